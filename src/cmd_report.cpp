// SPDX-License-Identifier: Apache-2.0
// `bwplan report MODEL -o report.html`: a self-contained HTML report with charts.
#include "cli.hpp"
#include <bwplan/check.hpp>
#include <bwplan/io/plan.hpp>
#include "input.hpp"
#include "report.hpp"
#include "term.hpp"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <filesystem>
#include <fstream>
#include <ostream>

namespace bwplan::cli {

namespace {

struct report_options : plan_options {
  std::string output;
  double headroom = 0.05;
  int top = 5;
  std::int64_t global_batch_tokens = 4'194'304;
  std::int64_t sweep_max_mbs = 64;
};

}  // namespace

runner register_report(CLI::App& app, context& ctx) {
  auto o = std::make_shared<report_options>();
  auto* sub = app.add_subcommand("report", "write a self-contained HTML report: memory by phase, sweep charts, top plans");
  add_plan_options(sub, o);
  sub->add_option("-o,--output", o->output, "HTML file to write ('-' for stdout)")->required();
  sub->add_option("--headroom", o->headroom,
                  "share of GPU memory kept free at the peak (0-1; default: recommend's, what the error band of the GPU and "
                  "stack needs for a plain \"fits\", docs/calibration.md#bands, else 0.05)")
      ->check(finite_range(0, max_headroom));
  sub->add_option("--top", o->top, "plans in the top plans table")->capture_default_str();
  sub->add_option("--global-batch-tokens", o->global_batch_tokens, "tokens per optimizer step for the plan search")
      ->capture_default_str()
      ->check(int_range(1, max_global_batch_tokens));
  sub->add_option("--sweep-max-mbs", o->sweep_max_mbs, "largest micro-batch size of the sweep chart (powers of two from 1)")
      ->capture_default_str();

  return [o, sub, &ctx]() -> int {
    if (!(o->headroom >= 0 && o->headroom < 1)) throw invalid_request(fmt::format("--headroom: must be in [0, 1), got {:g}", o->headroom));
    if (o->top < 1) throw invalid_request("--top: must be >= 1, got " + std::to_string(o->top));
    if (o->sweep_max_mbs < 1 || o->sweep_max_mbs > 65536)
      throw invalid_request("--sweep-max-mbs: must be in 1..65536, got " + std::to_string(o->sweep_max_mbs));
    if (!o->plan_file.empty() && o->output != "-") {  // the page over its own plan file would lose the plan
      std::error_code ec;
      if (std::filesystem::equivalent(o->plan_file, o->output, ec))
        throw invalid_request("--output " + o->output + ": is the plan file given with --plan (the report would replace it)");
    }
    const hardware_catalog cat = ctx.catalog();
    report_data d{resolve_plan(ctx, cat, *o), {}, {}, o->headroom, {}, {}, {}, {}, {}};
    // the plan file's `headroom` when it sets one and --headroom is not given (as check reads it: BWP002); else
    // recommend's default, so the top plan is recommend's best
    const bool file_headroom = !o->plan_file.empty() && io::load_plan(o->plan_file, [&ctx] { return ctx.contract(); }).has("headroom");
    if (sub->get_option("--headroom")->count() == 0 && file_headroom) {
      o->headroom = d.headroom = d.plan.p.headroom;
    } else if (sub->get_option("--headroom")->count() == 0) {
      std::string source;
      o->headroom = d.headroom = ctx.default_headroom(d.plan.target.gpu.id, d.plan.config.stack, o->headroom, source);
    }
    const model_spec& m = d.plan.model;
    const resolved_target& t = d.plan.target;
    const training_config& c = d.plan.config;
    const calibration_constants k = ctx.constants(t.gpu.id, c.stack);  // --calibration
    d.memory = estimate_memory(m, c, t.gpu, k.overheads);
    d.throughput = estimate_throughput(m, c, t.gpu, t.instance_ptr(), k.throughput);
    d.band = ctx.band(t.gpu.id, c);
    d.sweep = checkpointing_sweep(cat, m, d.plan, o->sweep_max_mbs, ctx.profile());

    // the search recommend runs (every sharding, TP, checkpointing, loss; the --numerics balanced formats) with every
    // other setting of the plan kept (fine-tuning, optimizer, stack, compile, offload, ...), as check's BWP007 search
    d.request = search_around(d.plan.p, t.gpu, t.instance_ptr(), formats_for_tier(numerics_tier::balanced, t.gpu));
    d.request.global_batch_tokens = o->global_batch_tokens;
    d.request.headroom = o->headroom;
    progress_bar bar(ctx.err, "searching plans", plan_search_size(d.request, d.request.nodes * (t.instance ? t.instance->gpus_per_node : 1), detail::ep_candidates(m, d.request.nodes * (t.instance ? t.instance->gpus_per_node : 1)).size()),
                     is_terminal(ctx.err));
    d.request.progress = [&bar](std::int64_t done, std::int64_t) { bar.update(done); };
    d.plans = search_plans(m, t.gpu, t.instance_ptr(), d.request, static_cast<std::size_t>(o->top), false, k.overheads, k.throughput);
    for (const auto& p : d.plans.ranked) d.plan_bands.push_back(ctx.band(t.gpu.id, p.config));
    d.request.progress = nullptr;
    bar.finish();
    d.command_line = report_command_line(d.plan.p, o->headroom, o->top, o->global_batch_tokens, o->sweep_max_mbs, o->output);

    const std::string html = render_report_html(d);
    if (o->output == "-") {
      ctx.out << html;
    } else {
      write_output_file(o->output, html, "--output");
      ctx.err << fmt::format("bwplan: wrote {} ({} bytes)\n", o->output, html.size());
    }
    return success;
  };
}

}  // namespace bwplan::cli
