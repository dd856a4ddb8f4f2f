// SPDX-License-Identifier: Apache-2.0
// `bwplan sweep MODEL --vary KEY=VALUES ...`: memory and throughput over a grid, as CSV, JSON or Markdown.
#include "cli.hpp"
#include "markdown.hpp"
#include "sweep.hpp"
#include "term.hpp"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <ostream>

namespace bwplan::cli {

namespace {
struct sweep_options : plan_options {
  std::vector<std::string> vary;
  std::string format = "csv";
};
}  // namespace

runner register_sweep(CLI::App& app, context& ctx) {
  auto o = std::make_shared<sweep_options>();
  auto* sub = app.add_subcommand("sweep", "memory and tokens/s over a grid of settings (--vary), for plotting");
  add_plan_options(sub, o);
  sub->add_option("--vary", o->vary,
                  "KEY=VALUES to vary (repeatable): mbs=1..64, mbs=1..64:x2, seq=2048,4096, ac=none,full,every-2,selective-op, "
                  "precision=bf16,fp8, tp=1,2, cp, ep, instance=A,B, sharding, loss, master, optimizer-impl, grad-accum, nodes, ac-every")
      ->required();
  sub->add_option("--format", o->format, "csv | json | markdown")->capture_default_str()
      ->check(CLI::IsMember({"csv", "json", "markdown"}));

  return [o, &ctx]() -> int {
    std::vector<sweep_axis> axes;
    for (const auto& v : o->vary) axes.push_back(parse_vary(v));
    const hardware_catalog cat = ctx.catalog();
    const resolved_plan rp = resolve_plan(ctx, cat, *o);
    // each point's accumulation is the axis value, so the global batch follows from it (apply_vary): say so
    if (rp.p.global_batch)
      for (const auto& a : axes)
        if (a.key == "grad-accum")
          spdlog::warn("--vary grad-accum: overrides the plan's global_batch_size {} sequences; each point's global batch is "
                       "micro-batch x data-parallel x its accumulation (vary mbs alone to keep the plan's global batch)",
                       *rp.p.global_batch);
    progress_bar bar(ctx.err, "sweep", sweep_size(axes), is_terminal(ctx.err));
    auto points = run_sweep(cat, rp.model, rp, axes,
                                  [&bar](std::int64_t done, std::int64_t) { bar.update(done); }, ctx.profile());
    bar.finish();
    for (auto& p : points) p.band = ctx.band(p.target.gpu.id, p.config);
    spdlog::debug("sweep: {} points", points.size());
    if (o->format == "json") {
      ctx.out << sweep_json(rp.model, rp.target, axes, points).dump(2) << "\n";
    } else if (o->format == "markdown") {
      std::vector<md_column> cols;
      for (const auto& c : sweep_columns()) cols.push_back({c, md_align::right});
      std::vector<std::vector<std::string>> rows;
      for (const auto& p : points) rows.push_back(sweep_row(rp.model, p));
      ctx.out << markdown_table(cols, rows);
    } else {
      ctx.out << sweep_csv(rp.model, points);
    }
    return success;
  };
}

}  // namespace bwplan::cli
