// SPDX-License-Identifier: Apache-2.0
#include "cli.hpp"
#include "input.hpp"
#include "model_source.hpp"

#include <bwplan/io/calibration.hpp>
#include <bwplan/io/file.hpp>
#include <bwplan/io/json.hpp>

#include <fmt/format.h>
#include <spdlog/sinks/ostream_sink.h>
#include <spdlog/spdlog.h>

#include <cctype>
#include <cmath>
#include <cstdlib>
#include <functional>
#include <iostream>

#ifndef BWPLAN_SOURCE_CONFIG_DIR
#define BWPLAN_SOURCE_CONFIG_DIR ""
#endif
#ifndef BWPLAN_INSTALL_CONFIG_DIR
#define BWPLAN_INSTALL_CONFIG_DIR ""
#endif

namespace bwplan::cli {

std::filesystem::path context::configs() const {
  if (!config_dir.empty()) return config_dir;
  if (const char* env = std::getenv("BWPLAN_CONFIG_DIR"); env && *env) return env;
  for (const char* p : {BWPLAN_SOURCE_CONFIG_DIR, BWPLAN_INSTALL_CONFIG_DIR})
    if (*p && std::filesystem::exists(std::filesystem::path(p) / "hardware" / "catalog.json")) return p;
  return "configs";
}

hardware_catalog context::catalog() const {
  hardware_catalog cat;
  const auto path = configs() / "hardware" / "catalog.json";
  spdlog::debug("loading hardware catalog {}", path.string());
  io::load_catalog(cat, path);
  for (const auto& f : hardware_files) {
    spdlog::debug("merging hardware file {}", f);
    io::load_catalog(cat, f);
  }
  if (power_limit_w > 0) {  // --power-limit: the board limit the GPUs run at (gpu_spec::compute_clock_fraction)
    std::vector<gpu_spec> capped = cat.gpus();
    for (auto& g : capped) {
      if (g.power_limit_w <= 0 && g.rated_power_w <= 0) unpowered_gpus.push_back(g.id);
      apply_power_limit(g, power_limit_w);
      cat.put(std::move(g));
    }
  }
  if (!attention_kernel.empty()) {  // --attention-kernel: the attention kernel every GPU's stack runs
    std::vector<gpu_spec> set = cat.gpus();
    for (auto& g : set) {
      g.attention = parse_attention_kernel(attention_kernel).value_or(bwplan::attention_kernel::fused);
      cat.put(std::move(g));
    }
  }
  return cat;
}

io::training_contract context::contract() const {
  const auto path = configs() / "training-contract.json";
  spdlog::debug("loading the training contract {}", path.string());
  return io::load_contract(path);
}

std::filesystem::path context::trainer_dir() const {
  namespace fs = std::filesystem;
  const fs::path c = configs();
  for (const fs::path& d : {c / "train", c.parent_path() / "apps" / "train", c / ".." / "apps" / "train"})
    if (fs::exists(d / "train.py") && fs::exists(d / "contract.py")) return d.lexically_normal();
  throw config_error((c / "train").string(), "", "the reference trainer (train.py, contract.py) is neither installed here nor in "
                                                  "apps/train next to " + c.string());
}

model_spec context::model(const std::string& arg) const { return find_model(configs(), arg); }

const calibration_profile* context::profile() const {
  if (calibration_file.empty()) return nullptr;
  if (!profile_cache) {
    spdlog::debug("loading the calibration profile {}", calibration_file);
    calibration_profile prof = io::load_profile(calibration_file);
    // an entry for a GPU the catalog lacks never applies: said, not refused (a review: "gpu": "abc" passed without a
    // word; a GPU of a --hardware file the command was not given is a valid entry of the same profile)
    const hardware_catalog cat = catalog();
    for (std::size_t i = 0; i < prof.entries.size(); ++i) {
      try {
        (void)cat.gpu(prof.entries[i].gpu);
      } catch (const invalid_request&) {
        spdlog::warn("{}: /entries/{}/gpu: '{}' is no GPU of the catalog (a --hardware file not given?): the entry does not apply",
                     io::display_path(calibration_file), i, prof.entries[i].gpu);
      }
    }
    profile_cache = std::make_shared<const calibration_profile>(std::move(prof));
  }
  return profile_cache.get();
}

calibration_constants context::constants(const std::string& gpu, training_stack stack) const {
  const calibration_profile* p = profile();
  if (p && !p->find(gpu, to_string(stack)))
    spdlog::debug("calibration profile {}: no entry for {} / {}; the built-in constants apply", calibration_file, gpu, to_string(stack));
  return constants_for(p, gpu, to_string(stack));
}

const error_bands* context::bands() const {
  if (!bands_read) {
    bands_read = true;
    // the harness's bands (bwplan calibrate --bands-only), then the public evidence's (tools/public_bands.py)
    const auto path = configs() / "error-bands.json", pub = configs() / "public-error-bands.json";
    std::optional<error_bands> b;
    if (std::filesystem::exists(path)) b = io::load_error_bands(path);
    if (std::filesystem::exists(pub)) b = b ? merge_error_bands(*b, io::load_error_bands(pub)) : io::load_error_bands(pub);
    if (b) bands_cache = std::make_shared<const error_bands>(std::move(*b));
  }
  return bands_cache.get();
}

std::optional<error_band> context::band(const std::string& gpu, const training_config& c) const {
  if (const calibration_profile* p = profile())
    if (const profile_entry* e = p->find(gpu, to_string(c.stack)); e && e->band) return e->band;
  if (const error_bands* b = bands()) return b->lookup(gpu, to_string(c.stack), band_mode(c));
  return std::nullopt;
}

std::string context::unrecorded_options(bool plan_file) const {
  std::string given;
  auto add = [&](const std::string& o) { given += (given.empty() ? "" : ", ") + o; };
  if (power_limit_w > 0 && !plan_file) add(fmt::format("--power-limit {:g}", power_limit_w));
  if (!attention_kernel.empty() && !plan_file) add("--attention-kernel " + attention_kernel);
  if (!calibration_file.empty()) add("--calibration " + calibration_file);
  return given;
}

void context::warn_unrecorded(std::string_view what, bool plan_file, const plan_target* plan) const {
  // (a helper's audit of the plan loop: a plan emitted under --power-limit 500 read back at the catalog's 700 W, 28 %
  // faster, without a word; a plan file records both since, a job cannot carry them)
  std::string o = unrecorded_options(plan_file);
  auto add = [&](const std::string& x) { o += (o.empty() ? "" : ", ") + x; };
  if (plan && power_limit_w <= 0 && plan->power_limit_w > 0) add(fmt::format("the plan's power_limit_w {:g}", plan->power_limit_w));
  if (plan && attention_kernel.empty() && !plan->attention_kernel.empty()) add("the plan's attention_kernel " + plan->attention_kernel);
  if (!o.empty() && plan)  // a job: its instances run at their own limit and kernels; its runtime was sized with these
    spdlog::warn("{} does not record {}: its instances run at their own power limit and kernels (its MaxRuntimeInSeconds was "
                 "sized with them); check and sagemaker --plan estimate it without them unless they are given again",
                 what, o);
  else if (!o.empty())
    spdlog::warn("{} does not record {}: check, estimate --plan and sagemaker --plan estimate it without them unless they "
                 "are given again",
                 what, o);
}

void context::record_gpu_settings(plan_target& t) const {
  if (power_limit_w > 0) t.power_limit_w = power_limit_w;
  if (!attention_kernel.empty()) t.attention_kernel = attention_kernel;
}

void context::apply_gpu_settings(plan_target& t, gpu_spec& gpu) const {
  if (power_limit_w > 0 && std::find(unpowered_gpus.begin(), unpowered_gpus.end(), gpu.id) != unpowered_gpus.end())
    throw invalid_request(fmt::format("--power-limit {:g}: {} has no board power in the catalog (power_limit_w, rated_power_w), so a "
                                      "power limit cannot scale its rates; give the GPU's rated power in a --hardware file",
                                      power_limit_w, gpu.id));
  plan_target own;  // the plan's own values where the flags do not set them (the flags' are in the catalog already)
  if (power_limit_w <= 0) own.power_limit_w = t.power_limit_w;
  if (attention_kernel.empty()) own.attention_kernel = t.attention_kernel;
  apply_plan_gpu_settings(own, gpu);
  record_gpu_settings(t);
}

void apply_plan_gpu_settings(const plan_target& t, gpu_spec& g) {
  if (t.power_limit_w > 0) {
    if (g.power_limit_w <= 0 && g.rated_power_w <= 0)  // compute_clock_fraction would be 1: the limit would do nothing
      throw invalid_request(fmt::format("{:g} W: {} has no board power in the catalog (power_limit_w, rated_power_w), so a power "
                                        "limit cannot scale its rates; give the GPU's rated power in a --hardware file",
                                        t.power_limit_w, g.id));
    apply_power_limit(g, t.power_limit_w);
    if (g.rated_power_w > 0 && g.power_limit_w > g.rated_power_w)  // (as require_power_within_rating, for a file)
      throw invalid_request(fmt::format("{:g} W is above {}'s rated board power, {:g} W (its FLOP/s are rated there and a higher "
                                        "limit does not raise them); give at most {:g}",
                                        t.power_limit_w, g.id, g.rated_power_w, g.rated_power_w));
  }
  if (!t.attention_kernel.empty()) g.attention = parse_attention_kernel(t.attention_kernel).value_or(bwplan::attention_kernel::fused);
}

std::string gpu_settings_note(const gpu_spec& g) {
  std::string note;
  if (g.compute_clock_fraction() < 1)
    note = fmt::format("at {:g} W of its rated {:g} W", g.power_limit_w, g.rated_power_w > 0 ? g.rated_power_w : g.power_limit_w);
  if (g.attention == bwplan::attention_kernel::flash2) note += std::string(note.empty() ? "" : ", ") + "FlashAttention-2";
  return note;
}

void apply_power_limit(gpu_spec& g, double watts) {
  if (g.rated_power_w <= 0) g.rated_power_w = g.power_limit_w;
  g.power_limit_w = watts;
}

double context::default_headroom(const std::string& gpu, training_stack stack, double fallback, std::string& source) const {
  double band = -1;
  const calibration_profile* prof = profile();
  if (const profile_entry* e = prof ? prof->find(gpu, to_string(stack)) : nullptr; e && e->band) band = e->band->memory;
  else if (const error_bands* b = bands()) band = b->widest_memory(gpu, to_string(stack));
  if (band < 0) {
    source = "the fixed default: no error band";
    return fallback;
  }
  source = fmt::format("error band {:.1f}% + {:.0f}% margin", 100 * band, 100 * tight_margin);
  return band_headroom(band);
}

resolved_target resolve_target(const hardware_catalog& cat, const target_options& t, const std::string& default_instance) {
  resolved_target r;
  if (!t.instance.empty()) {
    r.instance = cat.instance(t.instance);
    r.gpu = cat.gpu(r.instance->gpu);
    if (!t.gpu.empty() && cat.gpu(t.gpu).id != r.gpu.id)
      throw invalid_request("--gpu " + t.gpu + " conflicts with --instance " + t.instance + " (which has " + r.gpu.id + ")");
  } else if (!t.gpu.empty()) {
    r.gpu = cat.gpu(t.gpu);
  } else {
    r.instance = cat.instance(default_instance);
    r.gpu = cat.gpu(r.instance->gpu);
  }
  require_power_within_rating(r.gpu);
  return r;
}

void require_power_within_rating(const gpu_spec& g) {
  // the rates are rated at rated_power_w and compute_clock_fraction caps the limit's effect at 1: a limit above the
  // rating would change nothing, silently (a review: --power-limit 5000 on an H100 ran as 700 W)
  if (g.rated_power_w > 0 && g.power_limit_w > g.rated_power_w)
    throw invalid_request(fmt::format("--power-limit {:g}: above {}'s rated board power, {:g} W (its FLOP/s are rated there and a "
                                      "higher limit does not raise them); give at most {:g}",
                                      g.power_limit_w, g.id, g.rated_power_w, g.rated_power_w));
}

std::string human(bytes b) { return fmt::format("{:.2f} GiB", b.in(gib)); }

std::string human_tokens(double tokens) {
  constexpr std::pair<double, const char*> units[] = {{1e12, "T"}, {1e9, "B"}, {1e6, "M"}, {1e3, "K"}};
  for (const auto& [scale, suffix] : units) {
    if (tokens < scale) continue;
    const double v = tokens / scale;
    return (v >= 1000 ? fmt::format("{:.0f}", v) : fmt::format("{:.4g}", v)) + suffix;  // (%g has no exponent below 1000)
  }
  return fmt::format("{:.4g}", tokens);
}

namespace {

void setup_logging(std::ostream& err, int verbosity) {
  auto sink = std::make_shared<spdlog::sinks::ostream_sink_mt>(err);
  auto logger = std::make_shared<spdlog::logger>("bwplan", sink);
  logger->set_pattern("bwplan: [%l] %v");
  logger->set_level(verbosity >= 2 ? spdlog::level::trace : verbosity == 1 ? spdlog::level::debug : spdlog::level::warn);
  spdlog::set_default_logger(logger);
}

/// `s` on one line, every run of more than io::max_shown_path non-blank bytes (a path or value echoed from
/// hostile input) cut with "...", so a message stays short whatever it quotes.
std::string one_line(std::string s) {
  for (auto& c : s)
    if (c == '\n' || c == '\r') c = ' ';
  std::string out;
  std::size_t run = 0;
  for (char c : s) {
    run = c == ' ' ? 0 : run + 1;
    if (run <= io::max_shown_path) out += c;
    else if (run == io::max_shown_path + 1) out += "...";
  }
  while (!out.empty() && out.back() == ' ') out.pop_back();
  return out;
}

/// The commands registered on `app`, comma-separated.
std::string command_list(const CLI::App& app) {
  std::string s;
  for (const CLI::App* sub : app.get_subcommands([](const CLI::App* a) { return !a->get_name().empty(); }))
    s += (s.empty() ? "" : ", ") + sub->get_name();
  return s;
}

}  // namespace

namespace {

int run_command(const std::vector<std::string>& args, std::ostream& out, std::ostream& err) {
  context ctx{out, err, {}, {}};
  CLI::App app{"bwplan: training-config planner and GPU memory estimator for LLM training on NVIDIA Hopper and Blackwell"};
  app.name("bwplan");
  app.set_version_flag("--version", std::string("bwplan ") + version_string);
  int verbosity = 0;
  app.add_flag("-v,--verbose", verbosity, "log to stderr (-vv for more)");
  app.add_option("--configs", ctx.config_dir, "directory with the bundled data (hardware/, models/)")->check(non_empty());
  app.add_option("--hardware", ctx.hardware_files, "extra hardware catalog JSON merged over the bundled one (repeatable)")
      ->check(non_empty());
  app.add_option("--power-limit", ctx.power_limit_w,
                 "GPU board power limit in W (nvidia-smi -pl): GEMM and attention rates scale by limit / rated power; a plan "
                 "file records it (power_limit_w), a SageMaker job cannot")
      ->check(finite_range(50, 5000));
  app.add_option("--attention-kernel", ctx.attention_kernel,
                 "attention kernel the training stack runs: fused (FlashAttention-3 / cuDNN, the catalog default) or fa2 "
                 "(FlashAttention-2, as PyTorch's flash backend and ring attention ran in 2024); a plan file records it")
      ->check(CLI::IsMember({"fused", "fa2"}));
  app.add_option("--calibration", ctx.calibration_file,
                 "calibration profile from `bwplan calibrate` (docs/calibration.md): its constants replace the built-in ones "
                 "for the GPUs and stacks it has entries for")
      ->check(non_empty());
  app.require_subcommand(0, 1);  // none: the help (no arguments) or "a command is required"
  std::vector<std::pair<CLI::App*, runner>> cmds;
  auto add = [&](const char* name, runner r) { cmds.emplace_back(app.get_subcommand(name), std::move(r)); };
  add("estimate", register_estimate(app, ctx));
  add("recommend", register_recommend(app, ctx));
  add("hardware", register_hardware(app, ctx));
  add("validate", register_validate(app, ctx));
  add("calibrate", register_calibrate(app, ctx));
  add("sagemaker", register_sagemaker(app, ctx));
  add("report", register_report(app, ctx));
  add("sweep", register_sweep(app, ctx));
  add("check", register_check(app, ctx));
  add("completion", register_completion(app, ctx));
  // every option that takes a value refuses an empty one, as docs/cli.md promises ("empty names are errors, not
  // defaults"): a review found --region '', --precisions '', --tokens '', -o '' and a dozen more taking their default
  std::function<void(CLI::App*)> refuse_empty = [&](CLI::App* a) {
    for (CLI::Option* opt : a->get_options())
      if (opt->get_expected_min() > 0) opt->check(non_empty());
    for (CLI::App* sub : a->get_subcommands([](CLI::App*) { return true; })) refuse_empty(sub);
  };
  refuse_empty(&app);

  if (args.empty()) {  // `bwplan` alone: the help, exit 0 (as `git`, `cargo`; docs/cli.md)
    out << app.help();
    return success;
  }
  if (const std::string bad = invalid_utf8_argument(args); !bad.empty()) {
    err << "bwplan: error: " << one_line(bad) << "\n";
    return usage;
  }
  std::vector<std::string> rev(args.rbegin(), args.rend());
  try {
    app.parse(rev);
  } catch (const CLI::CallForHelp&) {
    out << app.help();
    return success;
  } catch (const CLI::CallForAllHelp&) {
    out << app.help("", CLI::AppFormatMode::All);
    return success;
  } catch (const CLI::CallForVersion&) {
    out << "bwplan " << version_string << "\n";
    return success;
  } catch (const CLI::ExtrasError&) {
    err << "bwplan: error: " << one_line(unknown_argument_message(app)) << "\n";
    return usage;
  } catch (const CLI::ConversionError& e) {
    err << "bwplan: error: " << one_line(conversion_message(app, e.what())) << "\n";
    return usage;
  } catch (const CLI::ParseError& e) {
    if (e.get_exit_code() == 0) return success;
    err << "bwplan: error: " << one_line(e.what()) << "\n";
    return usage;
  }
  setup_logging(err, verbosity);
  try {
    for (auto& [sub, r] : cmds)
      if (sub->parsed()) return r();
    err << "bwplan: error: a command is required (" << command_list(app) << "); see 'bwplan --help'\n";
    return usage;
  } catch (const plan_error& e) {  // a rule broken by a flag's value: name the flag
    err << "bwplan: error: " << one_line(flag_error(e.violation()).what()) << "\n";
    return usage;
  } catch (const error& e) {
    err << "bwplan: error: " << one_line(e.what()) << "\n";
    return usage;
  } catch (const std::filesystem::filesystem_error& e) {  // a path the OS refused: name it, not "internal"
    const std::string reason = e.code() == std::errc::filename_too_long ? "file name too long" : e.code().message();
    err << "bwplan: error: " << one_line(io::display_path(e.path1().string()) + ": " + reason) << "\n";
    return usage;
  } catch (const std::exception& e) {
    err << "bwplan: error: internal: " << one_line(e.what()) << "\n";
    return usage;
  }
}

}  // namespace

int run(const std::vector<std::string>& args, std::ostream& out, std::ostream& err) {
  const int code = run_command(args, out, err);
  // Output that did not reach its destination (a full disk, /dev/full, a closed pipe) fails the command.
  out.flush();
  if (!out) {
    err << "bwplan: error: cannot write the output (standard output): the device is full or closed\n";
    return usage;
  }
  return code;
}

int run(int argc, char** argv, std::ostream& out, std::ostream& err) {
  std::vector<std::string> args;
  for (int i = 1; i < argc; ++i) args.emplace_back(argv[i]);
  return run(args, out, err);
}

}  // namespace bwplan::cli
