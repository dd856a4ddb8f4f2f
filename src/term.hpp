// bwplan CLI internals: text graphics for the terminal (memory bars, progress bar) and the shared
// memory-category palette also used by the HTML report.
// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <bwplan/memory.hpp>
#include <bwplan/units.hpp>

#include <chrono>
#include <cstdint>
#include <iosfwd>
#include <string>
#include <vector>

namespace bwplan::cli {

/// How text graphics are drawn on one stream.
struct term_style {
  bool unicode = false;  ///< Unicode block characters (else plain ASCII)
  bool colour = false;   ///< ANSI colours
};

/// Whether `s` is the process's standard output or standard error and that is a terminal.
/// An in-memory stream (tests, run_cli) is never a terminal.
[[nodiscard]] bool is_terminal(const std::ostream& s);

/// Style for a stream that is (`terminal`) or is not a terminal: Unicode only on a terminal and without
/// `ascii`; colour only on a terminal, and never when the environment sets `NO_COLOR` (any non-empty
/// value, see no-color.org) or `TERM=dumb`.
[[nodiscard]] term_style style_for_terminal(bool terminal, bool ascii);

/// style_for_terminal(is_terminal(s), ascii).
[[nodiscard]] term_style style_for(const std::ostream& s, bool ascii);

/// One kind of memory in the charts, in drawing order (bottom of a stacked bar first).
struct memory_category {
  const char* label;        ///< legend text, e.g. "optimizer states"
  const char* colour;       ///< Okabe-Ito (colour-blind safe) or grey, "#RRGGBB"
  int ansi256;              ///< nearest xterm-256 colour for the terminal
  const char* unicode;      ///< block glyph when drawn without colour
  char ascii;               ///< ASCII glyph (mnemonic letter)
};

/// Index of each category in memory_categories().
enum memory_category_id : std::size_t {
  mc_context,
  mc_parameters,
  mc_optimizer,
  mc_gradients,
  mc_compute_weights,
  mc_workspace,
  mc_ddp_buckets,
  mc_activations,
  mc_logits,
  mc_transient,
  mc_slack,
  mc_count
};

/// The categories, indexed by memory_category_id.
[[nodiscard]] const std::vector<memory_category>& memory_categories();

/// Bytes per category of one moment: `b`'s fields, plus `non_pytorch` (CUDA context + NCCL) and
/// `slack` (allocator segments reserved beyond the allocated bytes). Indexed by memory_category_id.
[[nodiscard]] std::vector<bytes> memory_segments(const memory_breakdown& b, bytes non_pytorch, bytes slack);

/// Segments at the peak of `me`: the peak breakdown, context + NCCL and allocator slack; they sum to
/// `me.device_peak()`.
[[nodiscard]] std::vector<bytes> peak_segments(const memory_estimate& me);

/// A bar of `width` cells for `capacity` bytes: one run of cells per non-empty segment (cell edges at
/// the rounded cumulative share, so the runs add up), free cells after, and a mark at the headroom
/// limit `(1 − headroom) · capacity` when `headroom > 0`. Over capacity, the bar fills all cells and
/// ends with '>' (ASCII) or '▶'. Framed as `[...]` in ASCII and `▕...▏` in Unicode.
[[nodiscard]] std::string memory_bar(const std::vector<bytes>& segments, bytes capacity, double headroom, int width,
                                     term_style st);

/// Legend for memory_bar: glyph, label and (with `values`) GiB of each non-empty segment, wrapped to
/// lines of at most `line_width` characters, each line starting with `indent`.
[[nodiscard]] std::string memory_legend(const std::vector<bytes>& segments, term_style st, const std::string& indent,
                                        std::size_t line_width = 100, bool values = true);

/// A progress bar on a stream (stderr). It draws nothing until `delay` has passed since construction,
/// so short searches stay silent, redraws at most every 100 ms and erases itself when done or destroyed.
/// Disabled, every call is a no-op.
class progress_bar {
 public:
  /// A bar labelled `label` for `total` steps on `s`; `enabled` is usually is_terminal(s).
  progress_bar(std::ostream& s, std::string label, std::int64_t total, bool enabled,
               std::chrono::milliseconds delay = std::chrono::milliseconds(500), bool unicode = true);
  progress_bar(const progress_bar&) = delete;
  progress_bar& operator=(const progress_bar&) = delete;
  ~progress_bar();

  /// Reports that `done` of the total steps are finished.
  void update(std::int64_t done);
  /// Erases the bar if it was drawn.
  void finish();
  /// Whether the bar has been drawn at least once.
  [[nodiscard]] bool shown() const noexcept { return shown_; }

 private:
  void draw(std::int64_t done);
  std::ostream& s_;
  std::string label_;
  std::int64_t total_;
  bool enabled_;
  bool unicode_;
  bool shown_ = false;
  bool visible_ = false;
  std::size_t last_len_ = 0;
  std::chrono::steady_clock::time_point start_;
  std::chrono::steady_clock::time_point last_draw_;
  std::chrono::milliseconds delay_;
};

}  // namespace bwplan::cli
