// SPDX-License-Identifier: Apache-2.0
// `bwplan validate RUNS.jsonl`: estimates against measured runs (the ground-truth format of
// shared/groundtruth/measure.py), per row and in summary. Generates docs/validation.md.
#include "cli.hpp"
#include "runs.hpp"

#include <bwplan/io/file.hpp>
#include <bwplan/io/json.hpp>

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <sstream>
#include <ostream>

namespace bwplan::cli {

namespace {

struct validate_options {
  std::string runs;
  std::string models;
  std::string format = "markdown";
};

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const std::size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

}  // namespace

runner register_validate(CLI::App& app, context& ctx) {
  auto o = std::make_shared<validate_options>();
  auto* sub = app.add_subcommand("validate", "compare estimates with measured runs (ground-truth JSONL)");
  sub->add_option("RUNS", o->runs, "JSONL of measured runs (e.g. ../shared/groundtruth/h200-calibration.jsonl)")->required();
  sub->add_option("--models", o->models, "directory of the runs' config.json files (default: RUNS' folder/models)");
  sub->add_option("--format", o->format, "markdown | json")->capture_default_str()->check(CLI::IsMember({"markdown", "json"}));
  return [o, &ctx]() -> int {
    const hardware_catalog cat = ctx.catalog();
    const std::filesystem::path runs(o->runs);
    const std::filesystem::path models = o->models.empty() ? runs.parent_path() / "models" : std::filesystem::path(o->models);
    std::istringstream in(io::read_text_file(runs));  // bounded, regular files only
    const std::string shown = io::display_path(o->runs);
    std::string line;
    std::size_t lineno = 0;
    std::string gpu_name = "h200";
    std::vector<double> mem_err, tps_err, res_err;
    int wrong_fits = 0;
    std::size_t records = 0;  // rows that are trainer records (a plan object), not ground-truth rows
    nlohmann::ordered_json rows = nlohmann::ordered_json::array();
    std::string table;
    while (std::getline(in, line)) {
      ++lineno;
      if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
      const std::string where = fmt::format("{}:{}", shown, lineno);
      const auto r = io::parse_json(line, where);
      if (!r.is_object()) throw config_error(where, "", std::string("expected a JSON object (one run per line), got ") + r.type_name());
      const run_line rl{r, where};
      if (rl.text_or("kind", "") == "env") {
        // the GPU the env line names and its context bytes, as calibrate reads them (read_runs): an unknown device is an
        // error, not the H200 (a review: a context of "abc" passed validate and failed calibrate)
        double context_used = 0, context_dist = 0;
        read_env_line(cat, rl, gpu_name, context_used, context_dist);
        continue;
      }
      // a trainer record (the reference trainer's measurements.jsonl): the plan it ran, read as calibrate reads it
      const auto pl = r.find("plan");
      if (pl != r.end() && !pl->is_object() && !pl->is_null())  // (an array was read as a ground-truth row, as in read_runs)
        throw config_error(where, "/plan", std::string("expected the plan the run ran (an object), got ") + pl->type_name());
      const bool record = pl != r.end() && pl->is_object();
      records += record ? 1 : 0;
      measured_run rec;
      rec.gpu = record ? gpu_name : ground_truth_gpu(cat, rl, gpu_name);
      if (record) fill_from_record(ctx, cat, rl, models.string(), rec);
      const training_config c = record ? rec.config : ground_truth_config(rl);
      const std::string recipe = record ? rl.text_or("recipe", "?") : rl.text("recipe");
      const std::string ac = record ? to_string(c.ac) : rl.text("ac");
      const std::string model_name = record ? rec.model.name : rl.text("model");
      const model_spec m = record ? rec.model : io::load_model(models / (model_name + ".json"), model_name);
      check_run_config(m, c, where, record ? "/plan" : "");  // a rule the row breaks: its line and member, not a flag
      const gpu_spec& gpu = cat.gpu(rec.gpu);
      require_power_within_rating(gpu);  // (--power-limit above it was capped silently here: a review)
      const calibration_constants k = ctx.constants(gpu.id, c.stack);  // --calibration
      const memory_estimate me = estimate_memory(m, c, gpu, k.overheads);
      const throughput_estimate te = estimate_throughput(m, c, gpu, record && rec.instance ? &*rec.instance : nullptr, k.throughput);
      const bool ok = rl.boolean_or("ok", false);
      const std::string impl = rl.text_or("impl", "");
      const std::string tag = record ? rec.label
                                     : fmt::format("{} {} mbs={} seq={} ac={}{}{}", model_name, recipe, c.micro_batch, c.seq_len, ac,
                                                   rl.text_or("optim", "") == "foreach" ? " foreach" : "", impl.empty() ? "" : " impl=" + impl);
      nlohmann::ordered_json row{{"run", tag}, {"measured_ok", ok}, {"fits", me.fits}};
      if (ok != me.fits) ++wrong_fits;
      if (!ok) {
        table += fmt::format("| {} | OOM | {:.2f} | — | {:.2f} | — | — | — | — | {} |\n", tag, me.peak_allocated.in(gib),
                             me.device_peak().in(gib), me.fits ? "**wrong: fits**" : "OOM ✓");
        // the same estimates as the table's row (the run died: nothing measured to compare with)
        row["peak_allocated_bytes"] = {{"estimated", me.peak_allocated.raw()}};
        row["device_peak_bytes"] = {{"estimated", me.device_peak().raw()}, {"capacity", gpu.cuda_capacity().raw()}};
      } else {
        const double pa = rl.number("peak_allocated"), pr = rl.number("peak_reserved");
        check_measured_peaks(where, pa, pr, gpu);
        const double tps = rl.number("tokens_per_s");
        check_measured_rate(where, tps, te);
        const double e = me.peak_allocated.raw() / pa - 1, er = me.peak_reserved.raw() / pr - 1;
        const double et = te.tokens_per_s / tps - 1;
        mem_err.push_back(std::abs(e));
        res_err.push_back(std::abs(er));
        tps_err.push_back(std::abs(et));
        const std::string phase = rl.text_or("peak_phase", "");
        const std::string est_phase = me.peak_phase == step_phase::forward ? "fwd" : me.peak_phase == step_phase::backward ? "bwd" : "opt";
        table += fmt::format("| {} | {:.2f} | {:.2f} | {:+.1f}% | {:.2f} / {:.2f} ({:+.1f}%) | {} / {} | {:.0f} | {:.0f} | {:+.1f}% | {} |\n",
                             tag, pa / gib.raw(), me.peak_allocated.in(gib), 100 * e, pr / gib.raw(), me.peak_reserved.in(gib),
                             100 * er, phase, est_phase, tps, te.tokens_per_s, 100 * et, me.fits ? "fits ✓" : "**wrong: OOM**");
        row["peak_allocated_bytes"] = {{"measured", pa}, {"estimated", me.peak_allocated.raw()}, {"error", e}};
        row["peak_reserved_bytes"] = {{"measured", pr}, {"estimated", me.peak_reserved.raw()}, {"error", er}};
        row["tokens_per_s"] = {{"measured", tps}, {"estimated", te.tokens_per_s}, {"error", et}};
        row["peak_phase"] = {{"measured", phase}, {"estimated", est_phase}};
      }
      rows.push_back(row);
    }
    if (rows.empty())
      throw config_error(shown, "", "no runs in the file (expected JSON lines with model, recipe, mbs, seq and ac, as "
                                    "../shared/groundtruth/measure.py writes them)");
    const double med = median(mem_err), mx = mem_err.empty() ? 0 : *std::max_element(mem_err.begin(), mem_err.end());
    const double tmed = median(tps_err), tmx = tps_err.empty() ? 0 : *std::max_element(tps_err.begin(), tps_err.end());
    const double rmed = median(res_err), rmx = res_err.empty() ? 0 : *std::max_element(res_err.begin(), res_err.end());
    if (o->format == "json") {
      nlohmann::ordered_json j;
      j["rows"] = rows;
      j["summary"] = {{"peak_allocated_median_abs_error", med}, {"peak_allocated_max_abs_error", mx},
                      {"peak_reserved_median_abs_error", rmed}, {"peak_reserved_max_abs_error", rmx},
                      {"tokens_per_s_median_abs_error", tmed}, {"tokens_per_s_max_abs_error", tmx},
                      {"fit_verdicts_wrong", wrong_fits}};
      ctx.out << j.dump(2) << "\n";
    } else {
      ctx.out << "# Validation against measured runs\n\n"
                 "<!-- This part, up to the public-runs marker, is generated by `bwplan validate ../shared/groundtruth/h200-calibration.jsonl\n"
                 "     --format markdown` (a ctest test fails when it is stale): replace this part only; the public-runs sections come from\n"
                 "     tools/public_runs.py, the sections after them are kept by hand. -->\n\n"
              ;
      // trainer records: each is the plan it ran, on its GPUs (an audit: the header said "one H200" of 16-GPU runs)
      const std::string records_text = fmt::format(
          "{} the reference trainer's records (measurements.jsonl), each estimated by `bwplan estimate` of the plan it ran, on "
          "the GPUs\nand instances it names.",
          records == rows.size() ? std::string("Every row is one of") : fmt::format("{} of the {} rows are", records, rows.size()));
      const std::string replay = "Peak reserved and the fit verdict come from the\n"
                                 "replay of each run's allocation sequence through PyTorch's caching allocator "
                                 "([methodology.md](methodology.md#allocator)).\n\n";
      const std::string ground_truth =
          (records > 0 ? std::string("The other rows are training configurations") : std::string("Every row is one training configuration")) +
          (gpu_name == "h200"
               ? std::string(" measured on one NVIDIA H200 SXM (PyTorch 2.11, CUDA 13.0; recipe and\n"
                             "harness in `../shared/groundtruth/`), estimated by `bwplan estimate <config.json> --gpu h200 --gpus 1` with\n")
               // (a review: the header said H200 for a file whose env line named a B200, which was used)
               : fmt::format(" measured on one {} (the env line's device), estimated by\n"
                             "`bwplan estimate <config.json> --gpu {} --gpus 1` with\n",
                             gpu_name, gpu_name)) +
          "the recipe mapped as amp → `--sharding none --master fp32`, fsdp2 → `--sharding full --master fp32`,\n"
          "bf16 → `--sharding none --master bf16`, ac half → `--ac full --ac-every 2`. Memory in GiB (2^30 bytes).\n"
          "`impl=hf` rows ran the Hugging Face `LlamaForCausalLM` instead of the harness's own decoder: estimated with\n"
          "`--modules transformers` (transformers' eager RMSNorm and rotary tables; the harness's decoder is the default\n"
          "`fused`, [stacks.md](stacks.md#modules)). ";
      if (records > 0) ctx.out << records_text << (records == rows.size() ? " Memory in GiB (2^30 bytes). " : "\n");
      if (records < rows.size()) ctx.out << ground_truth;
      ctx.out << replay;
      ctx.out << fmt::format("## Summary\n\n| quantity | median abs. error | max abs. error | bound (core issue) |\n|---|---|---|---|\n"
                             "| peak allocated | {:.2f}% | {:.2f}% | median ≤ 5 %, max ≤ 10 % |\n"
                             "| tokens/s | {:.1f}% | {:.1f}% | median ≤ 15 % |\n"
                             "| peak reserved (caching-allocator replay) | {:.2f}% | {:.2f}% | median ≤ 2 %, max ≤ 6 % (issue 15) |\n"
                             "| fit verdicts wrong | {} of {} | | 0 |\n\n",
                             100 * med, 100 * mx, 100 * tmed, 100 * tmx, 100 * rmed, 100 * rmx, wrong_fits, rows.size());
      ctx.out << "## Per run\n\n| run | measured peak alloc. | bwplan | error | reserved: measured / bwplan | peak phase: measured / bwplan | "
                 "measured tok/s | bwplan tok/s | error | fit verdict |\n|---|---|---|---|---|---|---|---|---|---|\n";
      ctx.out << table;
    }
    return success;
  };
}

}  // namespace bwplan::cli
