// bwplan CLI internals: GitHub-flavoured Markdown output (`--format markdown`), ready for a PR comment.
// SPDX-License-Identifier: Apache-2.0
#pragma once

#include "cli.hpp"

#include <optional>
#include <string>
#include <vector>

namespace bwplan::cli {

/// Column alignment in a Markdown table.
enum class md_align { left, right, center };

/// One column of a Markdown table.
struct md_column {
  std::string header;
  md_align align = md_align::left;
};

/// Escapes text for a Markdown table cell: `|` becomes `\|` and line breaks become spaces.
[[nodiscard]] std::string md_escape(const std::string& text);

/// " (N near the line by the cheap bound, not replayed)" when the count of fitting plans holds candidates near the fit
/// line that no allocator replay checked (plan_result::fitting_unreplayed: the count moves with --top), else "". The
/// same words in the terminal table, the Markdown and the HTML report.
[[nodiscard]] std::string unreplayed_note(const plan_result& r);

/// A GitHub-flavoured Markdown table: header row, alignment row (`:--`, `--:`, `:-:`) and one row per
/// entry of `rows`. Cells are escaped with md_escape and padded so the raw text lines up; rows shorter
/// than the header are filled with empty cells. Ends with a newline.
/// Example: `markdown_table({{"GPU"}, {"GiB", md_align::right}}, {{"h200", "139.78"}})`.
[[nodiscard]] std::string markdown_table(const std::vector<md_column>& columns,
                                         const std::vector<std::vector<std::string>>& rows);

/// `estimate --format markdown`: a heading, a one-line verdict, the memory breakdown at the peak and the
/// throughput, as Markdown tables; `modules_note` (module_kernels_note) as a line of its own when not empty.
[[nodiscard]] std::string estimate_markdown(const model_spec& m, const resolved_target& t, const training_config& c,
                                            const memory_estimate& me, const throughput_estimate& te,
                                            const std::optional<error_band>& band = std::nullopt,
                                            const std::string& modules_note = {});

/// One line on the error band of an estimate and its three-state verdict (docs/calibration.md#bands), e.g.
/// "tight: with the error band of h200/hf/single (22 measured runs, 90 %: peak reserved +1.4 %, tokens/s ±6.2 %) the
/// device peak may reach 137.10 GiB of 139.80 GiB; tokens/s 45,100 – 51,100". Shared by every output.
/// What the throughput model leaves out for Megatron-Core MoE (docs/scaling.md section 7): the host time of the
/// dropless dispatch, with the measured ratios; "" for other plans. estimate and recommend print it.
[[nodiscard]] std::string moe_host_note(const model_spec& m, const training_config& c);
[[nodiscard]] std::string band_line(const memory_estimate& me, const throughput_estimate& te, const error_band& band);

/// `recommend --format markdown`: a heading naming `where`, the search summary, the ranked plans as a
/// table and `explanation` (why the first plan won). `bands[i]` is plan i's error band (context::band; nullopt or a
/// shorter vector: none): with any band the table gains "band GiB" (band_top); every row has its verdict (verdict_of).
[[nodiscard]] std::string plans_markdown(const model_spec& m, const std::string& where, const plan_request& req,
                                         const plan_result& r, const std::string& explanation,
                                         const std::vector<std::optional<error_band>>& bands = {});

}  // namespace bwplan::cli
