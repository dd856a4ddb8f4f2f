// bwplan CLI internals: the self-contained HTML report (`bwplan report`).
// SPDX-License-Identifier: Apache-2.0
#pragma once

#include "cli.hpp"
#include "sweep.hpp"

#include <string>
#include <vector>

namespace bwplan::cli {

/// One line of the sweep chart: a checkpointing mode over micro-batch sizes.
struct sweep_series {
  std::string label;                ///< e.g. "AC none", "AC every 2"
  std::vector<sweep_point> points;  ///< ascending micro-batch size
};

/// Everything the report shows.
struct report_data {
  resolved_plan plan;               ///< the configuration the user asked about
  memory_estimate memory;           ///< its memory estimate
  throughput_estimate throughput;   ///< its throughput estimate
  double headroom = 0.05;           ///< share of capacity kept free (the headroom line, the search, "fits" in the sweep)
  plan_request request;             ///< the search behind the top plans table
  plan_result plans;                ///< its result
  std::vector<sweep_series> sweep;  ///< one series per checkpointing mode
  std::string command_line;         ///< how to reproduce the report
  std::optional<error_band> band;   ///< the estimate's error band (the verdict line), if known
  /// plan_bands[i]: the error band of plans.ranked[i] (context::band), for the top plans' verdict column; a shorter
  /// vector or nullopt: no band, the verdict is the estimate's own fit.
  std::vector<std::optional<error_band>> plan_bands{};
};

/// Checkpointing modes of the sweep chart: none, every block, every 2nd and every 4th block, per-op selective
/// (and the plan's own mode when it is another), each over micro-batch sizes 1, 2, 4, … `max_mbs`, every other
/// setting as `base`.
[[nodiscard]] std::vector<sweep_series> checkpointing_sweep(const hardware_catalog& cat, const model_spec& m,
                                                            const resolved_plan& base, std::int64_t max_mbs,
                                                            const calibration_profile* profile = nullptr);

/// The largest moment of each phase as stacked memory bars (SVG): one bar per phase (forward,
/// backward, optimizer step) against the capacity line and the headroom line, with a legend.
[[nodiscard]] std::string phase_chart_svg(const memory_estimate& me, double headroom);

/// Peak device memory (`metric == "memory"`) or tokens/s (`"throughput"`) against micro-batch size,
/// one line per series; points above the headroom line are hollow and the first of each series is
/// ringed and listed as where it stops fitting.
[[nodiscard]] std::string sweep_chart_svg(const std::vector<sweep_series>& series, bytes capacity, double headroom,
                                          int world_size, const std::string& metric);

/// The command line that reproduces a report of plan `p`: `bwplan report` + to_cli_args(p) (every plan setting,
/// shell-quoted) + the report's own flags.
[[nodiscard]] std::string report_command_line(const plan& p, double headroom, int top, std::int64_t global_batch_tokens,
                                              std::int64_t sweep_max_mbs, const std::string& output);

/// The whole report: one HTML document with inline CSS and SVG, no scripts and no external resources.
[[nodiscard]] std::string render_report_html(const report_data& d);

}  // namespace bwplan::cli
