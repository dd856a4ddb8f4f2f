// SPDX-License-Identifier: Apache-2.0
// `bwplan calibrate RUNS.jsonl… -o profile.json`: fits the constants measured runs identify, per GPU and stack, and
// writes a versioned profile with its provenance; `--bands-only` writes the error bands of the rows instead
// (configs/error-bands.json). docs/calibration.md
#include "cli.hpp"
#include "input.hpp"
#include "runs.hpp"

#include <bwplan/calibration.hpp>
#include <bwplan/io/calibration.hpp>
#include <bwplan/version.hpp>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <ostream>
#include <sstream>

namespace bwplan::cli {

namespace {

struct calibrate_options {
  std::vector<std::string> runs;
  std::vector<std::string> test;
  std::string output;
  std::string models;
  std::string fit;
  std::string format = "text";
  bool bands_only = false;
  int min_rows = 3;
  double prior = default_prior_weight;
  double quantile = 0.9;
};

/// "YYYY-MM-DDTHH:MM:SSZ" now (UTC).
std::string utc_now() {
  const std::time_t t = std::chrono::system_clock::to_time_t(std::chrono::system_clock::now());
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

std::vector<std::string> split_list(const std::string& s) {
  std::vector<std::string> out;
  std::stringstream in(s);
  std::string x;
  while (std::getline(in, x, ','))
    if (!x.empty()) out.push_back(x);
  return out;
}

/// Median |error| of tokens/s and peak reserved of `runs` under the constants `k_of(gpu, stack)`.
struct errors {
  int rows = 0;
  double tps = 0, reserved = 0;
};
template <class K>
errors errors_of(const std::vector<measured_run>& runs, const hardware_catalog& cat, K&& k_of) {
  std::vector<double> t, r;
  for (const auto& x : runs) {
    if (!x.ok || x.tokens_per_s <= 0) continue;
    const run_residual res = residual_of(x, cat.gpu(x.gpu), k_of(x.gpu, to_string(x.config.stack)));
    t.push_back(res.tokens_per_s);
    r.push_back(res.peak_reserved);
  }
  return {static_cast<int>(t.size()), median_abs(t), median_abs(r)};
}

void write_file(const std::string& path, const std::string& text) {
  errno = 0;
  std::ofstream f(path, std::ios::binary);
  if (!(f << text) || !f.flush()) {
    const std::string why = errno ? std::string(" (") + std::strerror(errno) + ")" : std::string{};
    throw invalid_request("-o " + path + ": cannot write the file" + why);
  }
}

/// The profile reader takes bands in [0, 10] (io/calibration.hpp): a band past that, or not finite, means estimate and
/// measurement disagree more than ten-fold on some row; calibrate refuses to write what --calibration would refuse.
void check_band(double v, const std::string& group, const char* quantity) {
  if (!(v >= 0 && v <= 10))
    throw invalid_request(fmt::format("calibrate {}: the error band of {} is {} (the 90 % quantile of |measured / estimated - 1|; "
                                      "a profile holds at most 10): some rows disagree with the estimate more than ten-fold; "
                                      "check their units and configuration", group, quantity, v));
}
void check_bands(const error_bands& b) {
  for (const auto& g : b.groups) {
    check_band(g.memory, g.label(), "peak reserved");
    check_band(g.tokens_per_s, g.label(), "tokens/s");
  }
  check_band(b.fallback.memory, "(all rows)", "peak reserved");
  check_band(b.fallback.tokens_per_s, "(all rows)", "tokens/s");
}

}  // namespace

runner register_calibrate(CLI::App& app, context& ctx) {
  auto o = std::make_shared<calibrate_options>();
  auto* sub = app.add_subcommand("calibrate", "fit the model's constants to measured runs (a profile for --calibration)");
  sub->add_option("RUNS", o->runs, "JSON lines of measured runs: the trainer's measurements.jsonl or the ground-truth format (docs/calibration.md)")
      ->required();
  sub->add_option("-o,--output", o->output, "write the profile to FILE (required unless --bands-only; with --bands-only: the error bands, default stdout)");
  sub->add_option("--test", o->test, "held-out runs (JSON lines, repeatable): their error is printed before and after, not fitted");
  sub->add_option("--fit", o->fit,
                  "comma-separated constants to fit (gemm_max, gemm_half_k, gemm_half_mn, attention, memory, launch_s, nvlink, efa, "
                  "cublas_workspace, fragmentation; default: those of gemm_max, attention, memory, launch_s, nvlink, efa and "
                  "fragmentation the rows have signal for)");
  sub->add_option("--models", o->models, "directory of the runs' config.json files (default: each file's folder/models)");
  sub->add_option("--min-rows", o->min_rows, "fewest rows a fit accepts")->capture_default_str()->check(int_range(1, 100000));
  sub->add_option("--prior", o->prior,
                  "weight of the pull of each fitted constant towards its current value, per log(value / current)^2 (0: none)")
      ->capture_default_str()
      ->check(finite_range(0, 100));
  sub->add_flag("--bands-only", o->bands_only,
                "write the error bands of RUNS (the 90 % quantile of |residual| per GPU, stack and mode) instead of fitting");
  sub->add_option("--format", o->format, "text | json (the report on stdout)")->capture_default_str()->check(CLI::IsMember({"text", "json"}));

  return [o, &ctx]() -> int {
    for (const auto& in : o->runs) {  // -o over an input would replace the measurements with the profile
      std::error_code ec;
      if (!o->output.empty() && std::filesystem::equivalent(in, o->output, ec))
        throw invalid_request("-o " + o->output + ": is the input " + in + " (the profile would replace the measurements)");
    }
    const hardware_catalog cat = ctx.catalog();
    std::vector<run_file> files;
    std::vector<measured_run> runs;
    std::vector<profile_input> inputs;
    for (const auto& p : o->runs) {
      run_file f = read_runs(ctx, cat, p, o->models);
      inputs.push_back({std::filesystem::path(p).filename().string(), f.sha256, static_cast<int>(f.runs.size())});
      runs.insert(runs.end(), f.runs.begin(), f.runs.end());
      files.push_back(std::move(f));
    }
    auto current = [&](const std::string& gpu, const std::string& stack) {
      return ctx.constants(gpu, parse_stack(stack).value_or(training_stack::hf));
    };
    auto gpu_of = [&](const std::string& id) -> const gpu_spec& { return cat.gpu(id); };

    if (o->bands_only) {  // the error bands of the rows with the current constants (configs/error-bands.json)
      calibration_constants k = current(runs.front().gpu, to_string(runs.front().config.stack));
      const error_bands b = compute_error_bands(runs, gpu_of, k, o->quantile);
      check_bands(b);
      std::string cmd = "bwplan calibrate --bands-only";
      for (const auto& i : inputs) cmd += " " + i.file;
      const std::string text = io::error_bands_to_json(b, inputs, cmd).dump(2) + "\n";
      if (o->output.empty()) ctx.out << text;
      else write_file(o->output, text);
      return success;
    }
    if (o->output.empty()) throw invalid_request("calibrate: -o FILE is required (where the profile goes), or --bands-only");

    // ---- group the rows by GPU and stack; variant implementations (impl) are left out of the fit
    struct group { std::string gpu, stack; std::vector<measured_run> rows; };
    std::vector<group> groups;
    int variants = 0, failed = 0;
    for (const auto& r : runs) {
      if (!r.variant.empty()) { ++variants; continue; }
      if (!r.ok) ++failed;
      const std::string st = to_string(r.config.stack);
      auto it = std::find_if(groups.begin(), groups.end(), [&](const group& g) { return g.gpu == r.gpu && g.stack == st; });
      if (it == groups.end()) { groups.push_back({r.gpu, st, {}}); it = groups.end() - 1; }
      it->rows.push_back(r);
    }
    const std::vector<std::string> names = split_list(o->fit);
    calibration_profile prof;
    prof.bwplan_version = version_string;
    prof.created = utc_now();
    prof.inputs = inputs;
    std::string software;
    for (const auto& f : files)
      if (!f.software.empty()) software = f.software;
    nlohmann::ordered_json report;
    report["rows"] = runs.size();
    report["left_out_variants"] = variants;
    report["failed_runs"] = failed;
    report["entries"] = nlohmann::ordered_json::array();
    std::string text = fmt::format("calibrate: {} row(s) from {} file(s)", runs.size(), files.size());
    if (variants) text += fmt::format("; {} left out (impl=…: another implementation than the stack's own)", variants);
    if (failed) text += fmt::format("; {} failed run(s) (OOM) carry no times", failed);
    text += "\n";
    for (const auto& g : groups) {
      const gpu_spec& gpu = cat.gpu(g.gpu);
      calibration_constants start = current(g.gpu, g.stack);
      // measured, not fitted: the bytes outside the allocator, from the runs' env lines
      std::vector<std::string> measured;
      for (const auto& r : g.rows) {
        if (r.cuda_context > 0 && std::find(measured.begin(), measured.end(), "cuda_context") == measured.end()) {
          set_constant(start, "cuda_context", r.cuda_context);
          measured.emplace_back("cuda_context");
        }
        if (r.nccl > 0 && std::find(measured.begin(), measured.end(), "nccl") == measured.end()) {
          set_constant(start, "nccl", r.nccl);
          measured.emplace_back("nccl");
        }
      }
      calibration_fit fit;
      try {
        fit = fit_constants(g.rows, gpu, start, names, o->min_rows, o->prior);
      } catch (const invalid_request& e) {
        throw invalid_request(fmt::format("calibrate {} / {} ({} rows): {}", g.gpu, g.stack, g.rows.size(), e.what()));
      }
      profile_entry e;
      e.gpu = g.gpu;
      e.stack = g.stack;
      e.constants = fit.constants;
      // the matmul factor the fit ran under (the GPU's measured one, or a --calibration profile's), recorded so that the
      // profile keeps giving these rates if the catalog's measurement changes (docs/calibration.md#profile)
      e.constants.throughput.fitted_matmul = terms::matmul_factor(gpu, fit.constants.throughput);
      e.fitted = fit.fitted;
      e.measured = measured;
      e.rows = static_cast<int>(g.rows.size());
      e.software = software;
      e.tps_before = fit.tps_before;
      e.tps_after = fit.tps_after;
      e.reserved_before = fit.reserved_before;
      e.reserved_after = fit.reserved_after;
      const error_bands after = compute_error_bands(g.rows, gpu_of, fit.constants, o->quantile);
      if (after.fallback.rows >= 5) {
        check_band(after.fallback.memory, g.gpu + " / " + g.stack, "peak reserved");
        check_band(after.fallback.tokens_per_s, g.gpu + " / " + g.stack, "tokens/s");
        e.band = error_band{g.gpu, g.stack, "*", after.fallback.rows, after.fallback.memory, after.fallback.tokens_per_s, -1, -1, {}, {}};
      }
      text += fmt::format("{} / {}: {} rows ({} with tokens/s, {} with peak memory)\n", g.gpu, g.stack, g.rows.size(), fit.throughput_rows,
                          fit.memory_rows);
      nlohmann::ordered_json ej{{"gpu", g.gpu}, {"stack", g.stack}, {"rows", g.rows.size()}};
      for (const auto& n : fit.fitted) {
        const double a = get_constant(start, n), b = get_constant(fit.constants, n);
        text += fmt::format("  {:<17} {:>12.6g} -> {:<12.6g} ({:+.1f}%)\n", n, a, b, a > 0 ? 100 * (b / a - 1) : 0.0);
        ej["constants"][n] = {{"before", a}, {"after", b}};
        // a constant pinned at a bound of its range: the rows ask for a value the model's range excludes (runs 100 x
        // slower than any GPU allows were fitted to the bounds without a word: a helper's audit)
        if (const calibration_parameter* cp = find_calibration_parameter(n)) {
          // (a lower bound of 0 is a value the rows may well ask for: fragmentation 0 is no slack)
          const bool at_lo = cp->lo > 0 && b <= cp->lo * (1 + 1e-9), at_hi = b >= cp->hi * (1 - 1e-9);
          if (at_lo || at_hi) {
            const std::string bound = at_lo ? "lower" : "upper";
            text += fmt::format("  {:<17} at its {} bound {:g}: the rows ask for a value outside its range (check the runs: "
                                "their GPU, power limit or stack)\n", "", bound, at_lo ? cp->lo : cp->hi);
            spdlog::warn("calibrate: {} / {}: {} fitted to its {} bound {:g}; the rows ask for a value outside its range", g.gpu, g.stack,
                         n, bound, at_lo ? cp->lo : cp->hi);
            ej["constants"][n]["at_bound"] = bound;
          }
        }
      }
      for (const auto& n : measured) {
        const double a = get_constant(current(g.gpu, g.stack), n), b = get_constant(start, n);
        text += fmt::format("  {:<17} {:>12.6g} -> {:<12.6g} (measured: the env line)\n", n, a, b);
        ej["measured"][n] = {{"before", a}, {"after", b}};
      }
      for (const auto& [n, why] : fit.left_out) {
        text += fmt::format("  {:<17} not fitted: {}\n", n, why);
        ej["not_fitted"][n] = why;
      }
      text += fmt::format("  rows used: tokens/s median |error| {:.2f}% -> {:.2f}%, peak reserved {:.2f}% -> {:.2f}%\n", 100 * fit.tps_before,
                          100 * fit.tps_after, 100 * fit.reserved_before, 100 * fit.reserved_after);
      ej["used"] = {{"tokens_per_s", {{"before", fit.tps_before}, {"after", fit.tps_after}}},
                    {"peak_reserved", {{"before", fit.reserved_before}, {"after", fit.reserved_after}}}};
      report["entries"].push_back(ej);
      prof.entries.push_back(std::move(e));
    }
    if (prof.entries.empty())  // (a profile without entries is what --calibration refuses)
      throw invalid_request(fmt::format("calibrate: nothing to fit: the {} row(s) are all of another implementation than the "
                                        "stack's own (impl=...), which the fit leaves out", runs.size()));
    // ---- held-out files: the error with the constants before and after
    report["test"] = nlohmann::ordered_json::array();
    for (const auto& t : o->test) {
      run_file f = read_runs(ctx, cat, t, o->models);
      std::vector<measured_run> rows;
      for (auto& r : f.runs)
        if (r.variant.empty()) rows.push_back(std::move(r));
      const errors before = errors_of(rows, cat, current);
      const errors after = errors_of(rows, cat, [&](const std::string& gpu, const std::string& stack) { return constants_for(&prof, gpu, stack); });
      text += fmt::format("--test {} ({} rows): tokens/s median |error| {:.2f}% -> {:.2f}%, peak reserved {:.2f}% -> {:.2f}%\n", f.shown,
                          before.rows, 100 * before.tps, 100 * after.tps, 100 * before.reserved, 100 * after.reserved);
      report["test"].push_back({{"file", f.shown}, {"rows", before.rows},
                                {"tokens_per_s", {{"before", before.tps}, {"after", after.tps}}},
                                {"peak_reserved", {{"before", before.reserved}, {"after", after.reserved}}}});
    }
    write_file(o->output, io::profile_to_json(prof).dump(2) + "\n");
    text += "wrote " + o->output + " (use it with: bwplan --calibration " + o->output + " recommend …)\n";
    report["profile"] = o->output;
    if (o->format == "json") ctx.out << report.dump(2) << "\n";
    else ctx.out << text;
    return success;
  };
}

}  // namespace bwplan::cli
