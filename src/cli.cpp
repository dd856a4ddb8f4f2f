// SPDX-License-Identifier: Apache-2.0
#include "cli.hpp"

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

model_spec context::model(const std::string& arg) const {
  namespace fs = std::filesystem;
  if (arg.empty()) throw invalid_request("MODEL: empty model argument");
  if (fs::exists(arg)) {
    if (fs::is_directory(arg)) {
      if (fs::exists(fs::path(arg) / "config.json")) return io::load_model(fs::path(arg) / "config.json", fs::path(arg).filename().string());
      throw config_error(arg, "", "is a directory without a config.json");
    }
    const fs::path p(arg);
    std::string name = p.stem().string();
    if (name == "config") name = p.parent_path().filename().string();
    return io::load_model(p, name);
  }
  std::string key = arg;
  for (auto& ch : key) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
  if (auto slash = key.rfind('/'); slash != std::string::npos && arg.find(".json") == std::string::npos)
    key = key.substr(slash + 1);  // "meta-llama/Llama-3.1-8B" → preset "llama-3.1-8b"
  const fs::path dir = configs() / "models";
  const fs::path preset = dir / (key + ".json");
  if (fs::exists(preset)) return io::load_model(preset, arg.substr(arg.rfind('/') == std::string::npos ? 0 : arg.rfind('/') + 1));
  std::vector<std::string> names;
  if (fs::exists(dir))
    for (const auto& e : fs::directory_iterator(dir))
      if (e.path().extension() == ".json") names.push_back(e.path().stem().string());
  std::sort(names.begin(), names.end());
  std::string msg = "MODEL: '" + arg + "' is neither a file nor a bundled preset";
  if (auto m = closest_match(key, names)) msg += " (did you mean '" + *m + "'?)";
  msg += "; presets: ";
  for (std::size_t i = 0; i < names.size(); ++i) msg += (i ? ", " : "") + names[i];
  throw invalid_request(msg);
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
  return r;
}

std::string human(bytes b) { return fmt::format("{:.2f} GiB", b.in(gib)); }

namespace {

void setup_logging(std::ostream& err, int verbosity) {
  auto sink = std::make_shared<spdlog::sinks::ostream_sink_mt>(err);
  auto logger = std::make_shared<spdlog::logger>("bwplan", sink);
  logger->set_pattern("bwplan: [%l] %v");
  logger->set_level(verbosity >= 2 ? spdlog::level::trace : verbosity == 1 ? spdlog::level::debug : spdlog::level::warn);
  spdlog::set_default_logger(logger);
}

std::string one_line(std::string s) {
  for (auto& c : s)
    if (c == '\n' || c == '\r') c = ' ';
  while (!s.empty() && s.back() == ' ') s.pop_back();
  return s;
}

}  // namespace

int run(const std::vector<std::string>& args, std::ostream& out, std::ostream& err) {
  context ctx{out, err, {}, {}};
  CLI::App app{"bwplan: training-config planner and GPU memory estimator for LLM training on NVIDIA Hopper and Blackwell"};
  app.name("bwplan");
  app.set_version_flag("--version", std::string("bwplan ") + version_string);
  int verbosity = 0;
  app.add_flag("-v,--verbose", verbosity, "log to stderr (-vv for more)");
  app.add_option("--configs", ctx.config_dir, "directory with the bundled data (hardware/, models/)");
  app.add_option("--hardware", ctx.hardware_files, "extra hardware catalog JSON merged over the bundled one (repeatable)");
  app.require_subcommand(1);
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
  } catch (const CLI::ParseError& e) {
    if (e.get_exit_code() == 0) return success;
    err << "bwplan: error: " << one_line(e.what()) << "\n";
    return usage;
  }
  setup_logging(err, verbosity);
  try {
    for (auto& [sub, r] : cmds)
      if (sub->parsed()) return r();
    err << "bwplan: error: no subcommand\n";
    return usage;
  } catch (const plan_error& e) {  // a rule broken by a flag's value: name the flag
    err << "bwplan: error: " << one_line(flag_error(e.violation()).what()) << "\n";
    return usage;
  } catch (const error& e) {
    err << "bwplan: error: " << one_line(e.what()) << "\n";
    return usage;
  } catch (const std::exception& e) {
    err << "bwplan: error: internal: " << one_line(e.what()) << "\n";
    return usage;
  }
}

int run(int argc, char** argv, std::ostream& out, std::ostream& err) {
  std::vector<std::string> args;
  for (int i = 1; i < argc; ++i) args.emplace_back(argv[i]);
  return run(args, out, err);
}

}  // namespace bwplan::cli
