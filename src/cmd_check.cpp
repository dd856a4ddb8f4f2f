// SPDX-License-Identifier: Apache-2.0
// `bwplan check PLAN...`: evaluate plan files and apply the rules of bwplan/check.hpp, for CI.
#include "cli.hpp"
#include "input.hpp"

#include <bwplan/check.hpp>
#include <bwplan/io/plan.hpp>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <fstream>
#include <map>
#include <ostream>
#include <sstream>

namespace bwplan::cli {

namespace {

struct check_options {
  std::vector<std::string> plans;
  std::string fail_on = "error";
  std::string format = "text";
  std::string output;
};

/// A finding with the line of the plan member it points at.
struct located_finding {
  finding f;
  std::string pointer;  ///< the member found in the text ("" when none was)
  std::size_t line = 1;
  std::size_t column = 1;
  bool fails = false;   ///< at or above the --fail-on level
};

/// Everything known about one plan file.
struct plan_outcome {
  std::string file;
  bool input_error = false;  ///< the plan is unusable input (exit 2)
  std::string error;         ///< the one-line error
  std::size_t error_line = 1;
  std::string model, gpu, instance;
  std::string gpu_note;  ///< the GPU's power limit and attention kernel where not the defaults (gpu_settings_note)
  model_spec spec;
  check_result result;
  std::vector<located_finding> findings;
};

/// Throws config_error for `what` at plan member `pointer` (located in the plan's text when present; in a
/// SageMaker job, the member that carries the plan field).
[[noreturn]] void fail_at(const plan_document& p, const std::string& pointer, const std::string& what) {
  if (auto l = p.where(pointer)) throw config_error(p.file, p.pointer(pointer), what, l->line, l->column, l->byte);
  throw config_error(p.file, p.pointer(pointer), what);
}

plan_outcome evaluate(const context& ctx, const hardware_catalog& cat, const std::string& file, severity fail_level) {
  namespace fs = std::filesystem;
  plan_outcome po;
  po.file = file;
  try {
    const plan_document doc = io::load_plan(file, [&ctx] { return ctx.contract(); });
    plan p = doc.value;
    if (const auto u = unknown_disabled_rule(p.check)) fail_at(doc, "/check/disable/" + std::to_string(u->first), u->second);
    // A path in a plan is relative to the plan file's folder; a preset name stays as it is.
    if (fs::path(p.model).is_relative())
      if (const fs::path rel = fs::path(file).parent_path() / p.model; fs::exists(rel)) p.model = rel.string();
    model_spec m;
    try {
      m = ctx.model(p.model);
    } catch (const invalid_request& e) {
      // a job names its local config by its path in the source dir (an audit: a request for a local config.json could
      // not be checked, with no word of where its config is)
      if (doc.kind != document_kind::plan && fs::path(p.model).is_relative() && fs::path(p.model).extension() == ".json")
        fail_at(doc, "/model", std::string(e.what()) + "; a job's model path is relative to its source dir: check DIR/plan.json, "
                                                       "or the job saved in DIR, that --source-dir DIR writes with the config");
      fail_at(doc, "/model", e.what());
    }
    resolved_target t;
    try {
      t = resolve_target(cat, {p.target.gpu, p.target.instance, p.target.nodes}, "ml.p6-b200.48xlarge");
    } catch (const invalid_request& e) {
      fail_at(doc, doc.has("instance") ? "/instance" : "/gpu", e.what());
    }
    try {  // the plan's power limit and attention kernel where the global flags do not set them
      ctx.apply_gpu_settings(p.target, t.gpu);
    } catch (const invalid_request& e) {
      if (ctx.power_limit_w > 0 || !doc.has("power_limit_w")) throw;  // the flag's (named by the message)
      fail_at(doc, "/power_limit_w", e.what());
    }
    const auto world = resolve_world(p, t.instance ? t.instance->gpus_per_node : 0, t.instance ? t.instance->nvlink_domain_gpus : 0);
    if (!world.empty() && doc.kind != document_kind::plan && t.instance) {
      // a SageMaker job: T-world says what the trainer does with a world size other than every GPU of its instances
      plan q = p;
      q.training.gpus_per_node = t.instance->gpus_per_node;
      if (p.target.gpus > 0) q.training.world_size = p.target.gpus;
      for (const auto& v : io::job_violations(doc, q)) fail_at(doc, v.pointer, v.message);
    }
    for (const auto& v : world) fail_at(doc, v.pointer, v.message);
    if (!doc.has("sharding")) p.training.shard = default_sharding(p.training.world_size, p.training.stack);
    (void)cap_default_seq_len(p.training.seq_len, m.max_context, doc.has("seq_len"));  // as estimate: the default at the model's context
    for (const auto& v : io::job_violations(doc, p)) fail_at(doc, v.pointer, v.message);
    po.model = m.name;
    po.spec = m;
    po.gpu = t.gpu.id;
    po.gpu_note = gpu_settings_note(t.gpu);
    po.instance = t.instance ? t.instance->id : "";
    check_input in;
    in.model = m;
    in.gpu = t.gpu;
    in.instance = t.instance_ptr();
    in.p = p;
    in.grad_accum_given = doc.has("grad_accum");
    // a plan without "headroom" (a SageMaker request never carries it: it is planning-only) is held to the headroom
    // recommend plans with, the GPU and stack's error band + margin (context::default_headroom), else 5 %: a request
    // from recommend --emit sagemaker was warned about at 5 % while it was ranked at 3.9 % (a helper's audit)
    if (!doc.has("headroom")) {
      std::string source;
      p.headroom = ctx.default_headroom(t.gpu.id, p.training.stack, p.headroom, source);
    }
    in.p.headroom = p.headroom;
    in.headroom_given = doc.has("headroom");
    in.constants = ctx.constants(t.gpu.id, p.training.stack);
    in.band = ctx.band(t.gpu.id, p.training);
    po.result = check_plan(in);
    for (const auto& f : po.result.findings) {
      located_finding lf{f, "", 1, 1, f.level >= fail_level};
      for (const auto& ptr : f.pointers)
        if (auto l = doc.where(ptr)) {
          lf.pointer = doc.pointer(ptr);
          lf.line = l->line;
          lf.column = l->column;
          break;
        }
      po.findings.push_back(std::move(lf));
    }
  } catch (const config_error& e) {
    po.input_error = true;
    po.error = e.what();
    // The line is only meaningful in the plan file itself (a model or catalog file has its own lines).
    po.error_line = (e.file() == file && e.line() > 0) ? e.line() : 1;
    if (e.file() != file) po.error = file + ": " + po.error;
  } catch (const error& e) {
    po.input_error = true;
    po.error = file + ": " + std::string(e.what());
  }
  for (auto& ch : po.error)
    if (ch == '\n' || ch == '\r') ch = ' ';
  return po;
}

// ---------------------------------------------------------------- text

std::string status_word(const plan_outcome& po) {
  if (po.input_error) return "invalid";
  for (const auto& f : po.findings)
    if (f.fails) return "fail";
  return po.findings.empty() ? "ok" : "pass with warnings";
}

/// " (best plan found: 53.3% bf16; 92.8% with nvfp4)": the best plan in the plan's precision and, when another
/// precision does better, the best of any precision (both MFU against the bf16 dense peak).
std::string best_note(const check_result& r) {
  if (!r.best) return "";
  std::string s = " (best plan found: ";
  if (r.best_same_precision) s += fmt::format("{:.1f}% in {}", 100 * r.best_same_precision->throughput.mfu, to_string(r.config.format));
  if (!r.best_same_precision || r.best->config.format != r.config.format)
    s += fmt::format("{}{:.1f}% with {}", r.best_same_precision ? "; " : "", 100 * r.best->throughput.mfu, to_string(r.best->config.format));
  return s + ")";
}

void write_text(std::ostream& out, const std::vector<plan_outcome>& all) {
  int errors = 0, warnings = 0, invalid = 0;
  for (const auto& po : all) {
    if (po.input_error) {
      ++invalid;
      out << fmt::format("{}:{}: error: unusable input: {}\n", po.file, po.error_line, po.error);
      continue;
    }
    for (const auto& lf : po.findings) {
      (lf.f.level == severity::error ? errors : warnings)++;
      out << fmt::format("{}:{}: {} {} {}: {}\n    fix: {}\n", po.file, lf.line, to_string(lf.f.level), lf.f.rule, lf.f.name,
                         lf.f.message, lf.f.fix);
    }
    const auto& r = po.result;
    if (r.memory && r.throughput)
      out << fmt::format("{}: {}: {} on {}, {}: peak {} of {} ({}), {:.0f} tokens/s, MFU {:.1f}%{}\n", po.file,
                         status_word(po), po.model,
                         (po.instance.empty() ? po.gpu : po.instance) + (po.gpu_note.empty() ? "" : " (" + po.gpu_note + ")"),
                         describe(r.config),
                         human(r.memory->device_peak()), human(r.memory->capacity),
                         !r.memory->fits ? std::string("does not fit")
                         : r.band ? fmt::format("{:.1f}% free; {} with the error band +{:.1f}%", 100 * r.memory->headroom(),
                                                to_string(r.verdict), 100 * r.band->memory)
                                  : fmt::format("{:.1f}% free", 100 * r.memory->headroom()),
                         r.throughput->tokens_per_s, 100 * r.throughput->mfu,
                         best_note(r));
    else
      out << fmt::format("{}: {}: not evaluated ({})\n", po.file, status_word(po), po.model);
  }
  out << fmt::format("{} plan{} checked: {} error{}, {} warning{}, {} unusable\n", all.size(), all.size() == 1 ? "" : "s",
                     errors, errors == 1 ? "" : "s", warnings, warnings == 1 ? "" : "s", invalid);
}

// ---------------------------------------------------------------- json

void write_json(std::ostream& out, const std::vector<plan_outcome>& all, const std::string& fail_on, int code) {
  nlohmann::ordered_json j;
  j["fail_on"] = fail_on;
  j["exit_code"] = code;
  j["plans"] = nlohmann::ordered_json::array();
  for (const auto& po : all) {
    nlohmann::ordered_json p;
    p["file"] = po.file;
    p["status"] = status_word(po);
    if (po.input_error) {
      p["error"] = {{"message", po.error}, {"line", po.error_line}};
      j["plans"].push_back(p);
      continue;
    }
    p["model"] = po.model;
    p["gpu"] = po.gpu;
    p["instance"] = po.instance;
    p["findings"] = nlohmann::ordered_json::array();
    for (const auto& lf : po.findings)
      p["findings"].push_back({{"rule", lf.f.rule}, {"name", lf.f.name}, {"severity", to_string(lf.f.level)},
                               {"message", lf.f.message}, {"fix", lf.f.fix}, {"pointer", lf.pointer}, {"line", lf.line},
                               {"column", lf.column}, {"fails", lf.fails}});
    p["skipped_rules"] = po.result.skipped;
    const auto& r = po.result;
    if (r.memory && r.throughput) {
      p["estimate"] = io::estimate_to_json(po.spec, r.config, *r.memory, *r.throughput);
      io::add_band_json(p["estimate"], *r.memory, *r.throughput, r.band);
    }
    if (r.best) p["best_plan"] = io::estimate_to_json(po.spec, r.best->config, r.best->memory, r.best->throughput);
    if (r.best_same_precision)  // BWP007's yardstick: the best plan in the plan's own precision
      p["best_plan_same_precision"] = io::estimate_to_json(po.spec, r.best_same_precision->config, r.best_same_precision->memory,
                                                           r.best_same_precision->throughput);
    j["plans"].push_back(p);
  }
  out << j.dump(2) << "\n";
}

// ---------------------------------------------------------------- github

/// Escapes a workflow-command message (GitHub's toolkit `escapeData`: % CR LF).
std::string gh_data(const std::string& s) {
  std::string o;
  for (char c : s) {
    if (c == '%') o += "%25";
    else if (c == '\r') o += "%0D";
    else if (c == '\n') o += "%0A";
    else o += c;
  }
  return o;
}
/// Escapes a workflow-command property (`escapeProperty`: also : and ,).
std::string gh_prop(const std::string& s) {
  std::string o;
  for (char c : gh_data(s)) {
    if (c == ':') o += "%3A";
    else if (c == ',') o += "%2C";
    else o += c;
  }
  return o;
}

void write_github(std::ostream& out, const std::vector<plan_outcome>& all) {
  for (const auto& po : all) {
    if (po.input_error) {
      out << fmt::format("::error file={},line={},title={}::{}\n", gh_prop(po.file), po.error_line,
                         gh_prop("bwplan: unusable plan"), gh_data(po.error));
      continue;
    }
    for (const auto& lf : po.findings)
      out << fmt::format("::{} file={},line={},col={},title={}::{}\n", to_string(lf.f.level), gh_prop(po.file), lf.line,
                         lf.column, gh_prop(lf.f.rule + " " + lf.f.name), gh_data(lf.f.message + ". Fix: " + lf.f.fix));
  }
}

// ---------------------------------------------------------------- junit

std::string xml(const std::string& s) {
  std::string o;
  for (unsigned char c : s) {
    switch (c) {
      case '&': o += "&amp;"; break;
      case '<': o += "&lt;"; break;
      case '>': o += "&gt;"; break;
      case '"': o += "&quot;"; break;
      case '\'': o += "&apos;"; break;
      default:
        if (c < 0x20 && c != '\n' && c != '\t' && c != '\r') o += ' ';  // not allowed in XML 1.0
        else o += static_cast<char>(c);
    }
  }
  return o;
}

void write_junit(std::ostream& out, const std::vector<plan_outcome>& all) {
  int tests = 0, failures = 0, errors = 0;
  std::ostringstream suites;
  for (const auto& po : all) {
    int t = 0, f = 0, e = 0, s = 0;
    std::ostringstream cases;
    if (po.input_error) {
      t = 1;
      e = 1;
      cases << fmt::format("    <testcase classname=\"{}\" name=\"load plan\" time=\"0\">\n      <error type=\"unusable-input\" "
                           "message=\"{}\">{}:{}: {}</error>\n    </testcase>\n",
                           xml(po.file), xml(po.error), xml(po.file), po.error_line, xml(po.error));
    } else {
      for (const auto& r : check_rules()) {
        ++t;
        const std::string name = std::string(r.id) + " " + std::string(r.name);
        cases << fmt::format("    <testcase classname=\"{}\" name=\"{}\" time=\"0\">\n", xml(po.file), xml(name));
        bool any = false;
        for (const auto& lf : po.findings) {
          if (lf.f.rule != r.id) continue;
          any = true;
          const std::string body = fmt::format("{}:{}: {} {}\nfix: {}", po.file, lf.line, to_string(lf.f.level),
                                               lf.f.message, lf.f.fix);
          if (lf.fails) {
            cases << fmt::format("      <failure type=\"{}\" message=\"{}\">{}</failure>\n", to_string(lf.f.level),
                                 xml(lf.f.message), xml(body));
          } else {
            cases << fmt::format("      <system-out>{}</system-out>\n", xml(body));
          }
          break;  // one failure element per test case
        }
        const bool failed = any && std::any_of(po.findings.begin(), po.findings.end(),
                                               [&](const located_finding& lf) { return lf.f.rule == r.id && lf.fails; });
        if (failed) ++f;
        const bool skipped = !any && std::find(po.result.skipped.begin(), po.result.skipped.end(), r.id) != po.result.skipped.end();
        if (skipped) {
          ++s;
          cases << "      <skipped message=\"not applied: the plan could not be evaluated or the rule is disabled\"/>\n";
        }
        cases << "    </testcase>\n";
      }
    }
    tests += t;
    failures += f;
    errors += e;
    suites << fmt::format("  <testsuite name=\"{}\" tests=\"{}\" failures=\"{}\" errors=\"{}\" skipped=\"{}\" time=\"0\">\n{}  </testsuite>\n",
                          xml(po.file), t, f, e, s, cases.str());
  }
  out << "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n";
  out << fmt::format("<testsuites name=\"bwplan check\" tests=\"{}\" failures=\"{}\" errors=\"{}\" time=\"0\">\n{}</testsuites>\n",
                     tests, failures, errors, suites.str());
}

// ---------------------------------------------------------------- sarif

void write_sarif(std::ostream& out, const std::vector<plan_outcome>& all) {
  nlohmann::ordered_json rules = nlohmann::ordered_json::array();
  for (const auto& r : check_rules())
    rules.push_back({{"id", r.id},
                     {"name", r.name},
                     {"shortDescription", {{"text", r.summary}}},
                     {"defaultConfiguration", {{"level", to_string(r.level)}}}});
  nlohmann::ordered_json results = nlohmann::ordered_json::array();
  auto location = [](const std::string& file, std::size_t line, std::size_t col) {
    return nlohmann::ordered_json::array(
        {{{"physicalLocation", {{"artifactLocation", {{"uri", file}}}, {"region", {{"startLine", line}, {"startColumn", col}}}}}}});
  };
  for (const auto& po : all) {
    if (po.input_error) {
      results.push_back({{"ruleId", "BWP000"},
                         {"level", "error"},
                         {"message", {{"text", po.error}}},
                         {"locations", location(po.file, po.error_line, 1)}});
      continue;
    }
    for (const auto& lf : po.findings)
      results.push_back({{"ruleId", lf.f.rule},
                         {"level", to_string(lf.f.level)},
                         {"message", {{"text", lf.f.message + ". Fix: " + lf.f.fix}}},
                         {"locations", location(po.file, lf.line, lf.column)}});
  }
  rules.push_back({{"id", "BWP000"}, {"name", "unusable-input"}, {"shortDescription", {{"text", "the plan file cannot be read"}}},
                   {"defaultConfiguration", {{"level", "error"}}}});
  nlohmann::ordered_json j;
  j["$schema"] = "https://json.schemastore.org/sarif-2.1.0.json";
  j["version"] = "2.1.0";
  j["runs"] = nlohmann::ordered_json::array(
      {{{"tool", {{"driver", {{"name", "bwplan"}, {"version", version_string}, {"rules", rules}}}}}, {"results", results}}});
  out << j.dump(2) << "\n";
}

}  // namespace

runner register_check(CLI::App& app, context& ctx) {
  auto o = std::make_shared<check_options>();
  auto* sub = app.add_subcommand("check", "evaluate plan files and apply the CI rules (exit 0 clear, 1 a rule failed, 2 unusable input)");
  sub->add_option("PLAN", o->plans, "plan files (JSON, docs/plan.schema.json)")->required();
  sub->add_option("--fail-on", o->fail_on, "lowest severity that fails the check: error | warning")
      ->capture_default_str()
      ->check(CLI::IsMember({"error", "warning"}));
  sub->add_option("--format", o->format, "text | json | github | junit | sarif")
      ->capture_default_str()
      ->check(CLI::IsMember({"text", "json", "github", "junit", "sarif"}));
  sub->add_option("-o,--output", o->output, "write the report to FILE instead of stdout");

  return [o, &ctx]() -> int {
    const hardware_catalog cat = ctx.catalog();
    const severity level = o->fail_on == "warning" ? severity::warning : severity::error;
    std::vector<plan_outcome> all;
    for (const auto& f : o->plans) {
      spdlog::debug("checking {}", f);
      all.push_back(evaluate(ctx, cat, f, level));
    }
    int code = success;
    for (const auto& po : all) {
      if (po.input_error) code = usage;
      else if (code == success)
        for (const auto& lf : po.findings)
          if (lf.fails) code = failure;
    }
    std::ostringstream report;
    if (o->format == "json") write_json(report, all, o->fail_on, code);
    else if (o->format == "github") write_github(report, all);
    else if (o->format == "junit") write_junit(report, all);
    else if (o->format == "sarif") write_sarif(report, all);
    else write_text(report, all);
    if (o->output.empty() || o->output == "-") {  // ("-": stdout, as report takes it)
      ctx.out << report.str();
    } else {
      refuse_output_over_input(o->output, o->plans, "--output");  // (the report replaced the plan it checked)
      write_output_file(o->output, report.str(), "--output");
    }
    // Unusable input is also reported on stderr, one line per plan, as every other command does (in every format:
    // a CI log that shows stderr only still names the file, the field and the problem)
    for (const auto& po : all)
      if (po.input_error) ctx.err << "bwplan: error: " << po.error << "\n";
    return code;
  };
}

}  // namespace bwplan::cli
