// SPDX-License-Identifier: Apache-2.0
#include "cli.hpp"
#include "input.hpp"
#include "model_source.hpp"

#include <bwplan/io/file.hpp>
#include <bwplan/io/json.hpp>

#include <fmt/format.h>
#include <spdlog/sinks/ostream_sink.h>
#include <spdlog/spdlog.h>

#include <cctype>
#include <cmath>
#include <cstdlib>
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
  return cat;
}

model_spec context::model(const std::string& arg) const { return find_model(configs(), arg); }

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
  return r;
}

std::string human(bytes b) { return fmt::format("{:.2f} GiB", b.in(gib)); }

std::string shard_label(const training_config& c) {
  switch (c.shard) {
    case sharding::full: return "fsdp";
    case sharding::hybrid: return fmt::format("hsdp/{}", c.shard_size());
    case sharding::grad_op: return "zero2";
    default: return c.fsdp_mesh() > 1 ? "ddp" : "none";
  }
}

double parse_token_count(const std::string& text, const std::string& flag) {
  std::size_t pos = 0;
  double v = 0;
  try {
    v = std::stod(text, &pos);
  } catch (const std::exception&) {
    throw invalid_request(flag + ": expected a token count such as 100B or 1T, got '" + text + "'");
  }
  std::string rest = text.substr(pos);
  double mult = 1;
  if (rest.size() == 1) {
    switch (std::toupper(static_cast<unsigned char>(rest[0]))) {
      case 'K': mult = 1e3; break;
      case 'M': mult = 1e6; break;
      case 'B': case 'G': mult = 1e9; break;
      case 'T': mult = 1e12; break;
      default: throw invalid_request(flag + ": unknown suffix '" + rest + "' (use K, M, B or T), got '" + text + "'");
    }
  } else if (!rest.empty()) {
    throw invalid_request(flag + ": expected a token count such as 100B or 1T, got '" + text + "'");
  }
  v *= mult;
  if (!(v >= 1) || v > 1e18) throw invalid_request(flag + ": must be between 1 and 1e18 tokens, got '" + text + "'");
  return v;
}

double parse_duration(const std::string& text, const std::string& flag, double unitless_s) {
  const std::string bad = flag + ": expected a positive duration such as 3600s, 90m, 36h, 2d or 1w, got '" + text + "'";
  std::size_t pos = 0;
  double v = 0;
  try {
    v = std::stod(text, &pos);
  } catch (const std::exception&) {
    throw invalid_request(bad);
  }
  const std::string rest = text.substr(pos);
  double mult = unitless_s;
  if (rest == "s") mult = 1;
  else if (rest == "m" || rest == "min") mult = 60;
  else if (rest == "h") mult = 3600;
  else if (rest == "d") mult = 86400;
  else if (rest == "w") mult = 7 * 86400;
  else if (!rest.empty()) throw invalid_request(flag + ": unknown unit '" + rest + "' (use s, m, h, d or w), got '" + text + "'");
  if (!(v > 0) || !std::isfinite(v)) throw invalid_request(bad);
  constexpr double max_s = 10 * 365.0 * 86400;  // ten years: above any training run or SageMaker limit
  if (!(v * mult <= max_s)) throw invalid_request(flag + ": out of range: at most 10 years (3650d), got '" + text + "'");
  return v * mult;
}

std::string human_duration(double s) {
  if (s < 120) return fmt::format("{:.0f} s", s);
  if (s < 7200) return fmt::format("{:.1f} min", s / 60);
  if (s < 3 * 86400) return fmt::format("{:.1f} h", s / 3600);
  return fmt::format("{:.1f} d", s / 86400);
}

std::string describe(const training_config& c) {
  std::string s = fmt::format("mbs {} x {}", c.micro_batch, c.seq_len);
  if (c.grad_accum > 1) s += fmt::format(", accum {}", c.grad_accum);
  s += ", AC " + ac_name(c);
  if (c.format != compute_format::bf16) {
    s += fmt::format(", {}", to_string(c.format));
    const auto keep = c.bf16_kept();
    if (keep.first || keep.last_for(1 << 20)) s += fmt::format(" (bf16 blocks: first {}, last {})", keep.first, keep.fraction >= 0 ? fmt::format("{:.0f}%", 100 * keep.fraction) : std::to_string(keep.last));
    if (c.fp8_all_gather) s += ", FP8 all-gather";
  }
  switch (c.shard) {
    case sharding::full: s += ", FSDP full shard"; break;
    case sharding::hybrid: s += fmt::format(", HSDP (shard {} x replicate {})", c.shard_size(), c.fsdp_mesh() / c.shard_size()); break;
    case sharding::grad_op: s += ", FSDP shard-grad-op (ZeRO-2)"; break;
    default: s += c.fsdp_mesh() > 1 ? ", DDP" : ", no sharding";
  }
  if (c.tp > 1) s += fmt::format(", TP {}", c.tp);
  if (c.cp > 1) s += fmt::format(", CP {}", c.cp);
  if (c.ep > 1) s += fmt::format(", EP {}", c.ep);
  if (c.master == master_weights::bf16) s += ", bf16 master";
  if (c.loss == loss_impl::chunked) s += ", chunked loss";
  return s;
}

nlohmann::ordered_json to_json(const model_spec& m, const training_config& c, const memory_estimate& me,
                               const throughput_estimate& te) {
  const parameter_count pc = count_parameters(m);
  nlohmann::ordered_json j;
  j["model"] = {{"name", m.name}, {"family", m.family}};
  j["params"] = {{"total", pc.total()}, {"active", pc.active()}, {"non_embedding", pc.non_embedding()},
                 {"embedding", pc.embedding}, {"lm_head", pc.lm_head}, {"per_block", pc.block()}};
  if (pc.positions > 0) j["params"]["position_embedding"] = pc.positions;
  if (m.is_moe())
    j["params"]["moe"] = {{"experts", m.experts}, {"top_k", m.top_k}, {"moe_layers", m.moe_layers},
                          {"routed_experts", pc.routed_experts}};
  if (pc.mtp > 0) j["params"]["mtp"] = pc.mtp;
  j["config"] = {{"micro_batch_size", c.micro_batch},
                 {"seq_len", c.seq_len},
                 {"grad_accum", c.grad_accum},
                 {"global_batch_tokens", c.micro_batch * c.seq_len * c.grad_accum * c.dp()},
                 {"world_size", c.world_size},
                 {"gpus_per_node", c.gpus_per_node},
                 {"activation_checkpointing", c.ac_enabled ? "full" : to_string(c.selective)},
                 {"ac_every", c.ac_enabled ? c.ac_every : 0},
                 {"sharding", to_string(c.shard)},
                 {"shard_size", c.shard_size()},
                 {"tp", c.tp},
                 {"cp", c.cp},
                 {"ep", c.ep},
                 {"master_weights", to_string(c.master)},
                 {"precision", to_string(c.format)},
                 {"bf16_blocks", {{"first", c.bf16_kept().first}, {"last", c.bf16_kept().last_for(m.layers)}}},
                 {"quantized_blocks", c.quantized_blocks(m.layers)},
                 {"fp8_all_gather", c.fp8_all_gather},
                 {"ep", c.ep},
                 {"optimizer_impl", to_string(c.optimizer)},
                 {"loss", to_string(c.loss)}};
  const auto& b = me.at_peak;
  nlohmann::ordered_json mem;
  mem["peak_allocated_bytes"] = me.peak_allocated.raw();
  mem["peak_reserved_bytes"] = me.peak_reserved.raw();
  mem["peak_phase"] = to_string(me.peak_phase);
  mem["non_pytorch_bytes"] = me.non_pytorch.raw();
  mem["device_peak_bytes"] = me.device_peak().raw();
  mem["capacity_bytes"] = me.capacity.raw();
  mem["headroom"] = me.headroom();
  mem["breakdown"] = {{"parameters", b.parameters.raw()},     {"optimizer_states", b.optimizer_states.raw()},
                      {"gradients", b.gradients.raw()},       {"compute_weights", b.compute_weights.raw()},
                      {"activations", b.activations.raw()},   {"logits", b.logits.raw()},
                      {"transient", b.transient.raw()},       {"workspace", b.workspace.raw()},
                      {"ddp_buckets", b.ddp_buckets.raw()}};
  mem["phases"] = {{"before_forward_bytes", me.before_forward.raw()}, {"forward_peak_bytes", me.forward_peak.raw()},
                   {"after_forward_bytes", me.after_forward.raw()},   {"backward_peak_bytes", me.backward_peak.raw()},
                   {"after_backward_bytes", me.after_backward.raw()}, {"optimizer_peak_bytes", me.optimizer_peak.raw()}};
  j["memory"] = mem;
  j["fits"] = me.fits;
  j["throughput"] = {{"tokens_per_s", te.tokens_per_s},
                     {"tokens_per_s_per_gpu", te.tokens_per_s_per_gpu},
                     {"step_time_s", te.step.raw()},
                     {"mfu", te.mfu},
                     {"model_flops_per_step", te.step_flops.model.raw()},
                     {"recompute_flops_per_step", te.step_flops.recompute.raw()},
                     {"compute_s", te.compute.raw()},
                     {"gemm_s", te.gemm.raw()},
                     {"attention_s", te.attention.raw()},
                     {"memory_bound_s", te.memory_bound.raw()},
                     {"communication_s", te.communication.raw()},
                     {"exposed_communication_s", te.exposed_communication.raw()},
                     {"communication_by_parallelism_s",
                      {{"data_parallel", te.comm.data_parallel.raw()},
                       {"tensor_parallel", te.comm.tensor_parallel.raw()},
                       {"context_parallel", te.comm.context_parallel.raw()}}},
                     {"exposed_by_parallelism_s",
                      {{"data_parallel", te.exposed.data_parallel.raw()},
                       {"tensor_parallel", te.exposed.tensor_parallel.raw()},
                       {"context_parallel", te.exposed.context_parallel.raw()}}},
                     {"tokens_per_step", te.tokens_per_step}};
  return j;
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
  app.require_subcommand(0, 1);  // none: the help (no arguments) or "a command is required"
  std::vector<std::pair<CLI::App*, runner>> cmds;
  auto add = [&](const char* name, runner r) { cmds.emplace_back(app.get_subcommand(name), std::move(r)); };
  add("estimate", register_estimate(app, ctx));
  add("recommend", register_recommend(app, ctx));
  add("hardware", register_hardware(app, ctx));
  add("validate", register_validate(app, ctx));
  add("sagemaker", register_sagemaker(app, ctx));
  add("report", register_report(app, ctx));
  add("sweep", register_sweep(app, ctx));
  add("check", register_check(app, ctx));
  add("completion", register_completion(app, ctx));

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
