// SPDX-License-Identifier: Apache-2.0
// Terminal graphics: memory bars and the progress bar.
#include "term.hpp"

#include <fmt/format.h>

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <iostream>

namespace bwplan::cli {

bool is_terminal(const std::ostream& s) {
  if (&s == &std::cout) return ::isatty(STDOUT_FILENO) == 1;
  if (&s == &std::cerr || &s == &std::clog) return ::isatty(STDERR_FILENO) == 1;
  return false;
}

term_style style_for(const std::ostream& s, bool ascii) { return style_for_terminal(is_terminal(s), ascii); }

term_style style_for_terminal(bool terminal, bool ascii) {
  term_style st;
  if (!terminal) return st;
  st.unicode = !ascii;
  const char* no_colour = std::getenv("NO_COLOR");
  const char* term = std::getenv("TERM");
  st.colour = !(no_colour && *no_colour) && !(term && std::strcmp(term, "dumb") == 0);
  return st;
}

const std::vector<memory_category>& memory_categories() {
  static const std::vector<memory_category> cats = {
      {"CUDA context + NCCL", "#555555", 240, "▙", 'C'},
      {"parameters", "#0072B2", 25, "█", 'P'},
      {"optimizer states", "#56B4E9", 74, "▓", 'O'},
      {"gradients", "#009E73", 36, "▒", 'G'},
      {"compute weights", "#F0E442", 227, "▄", 'W'},
      {"workspace", "#999999", 246, "▀", 'w'},
      {"DDP buckets", "#000000", 250, "▌", 'D'},
      {"activations", "#E69F00", 214, "▚", 'A'},
      {"logits / loss", "#D55E00", 166, "▞", 'L'},
      {"transient", "#CC79A7", 175, "▐", 'T'},
      {"allocator slack", "#BBBBBB", 252, "░", 's'},
  };
  return cats;
}

std::vector<bytes> memory_segments(const memory_breakdown& b, bytes non_pytorch, bytes slack) {
  std::vector<bytes> v(mc_count);
  v[mc_context] = non_pytorch;
  v[mc_parameters] = b.parameters;
  v[mc_optimizer] = b.optimizer_states;
  v[mc_gradients] = b.gradients;
  v[mc_compute_weights] = b.compute_weights;
  v[mc_workspace] = b.workspace;
  v[mc_ddp_buckets] = b.ddp_buckets;
  v[mc_activations] = b.activations;
  v[mc_logits] = b.logits;
  v[mc_transient] = b.transient;
  v[mc_slack] = slack;
  return v;
}

std::vector<bytes> peak_segments(const memory_estimate& me) {
  return memory_segments(me.at_peak, me.non_pytorch, me.peak_reserved - me.peak_allocated);
}

namespace {

std::string glyph(std::size_t cat, const term_style& st) {
  const auto& c = memory_categories()[cat];
  if (!st.unicode) return std::string(1, c.ascii);
  if (st.colour) return cat == mc_slack ? "░" : "█";
  return c.unicode;
}

std::string paint(const std::string& text, std::size_t cat, const term_style& st) {
  if (!st.colour || text.empty()) return text;
  return fmt::format("\x1b[38;5;{}m{}\x1b[0m", memory_categories()[cat].ansi256, text);
}

std::string repeat(const std::string& g, int n) {
  std::string s;
  for (int i = 0; i < n; ++i) s += g;
  return s;
}

}  // namespace

std::string memory_bar(const std::vector<bytes>& segments, bytes capacity, double headroom, int width, term_style st) {
  width = std::max(width, 4);
  const double cap = capacity.raw() > 0 ? capacity.raw() : 1;
  double total = 0;
  for (const auto& b : segments) total += std::max(0.0, b.raw());
  const int mark = headroom > 0 ? static_cast<int>(std::floor((1.0 - headroom) * width)) : -1;
  // Cell ownership: -1 free, else a category.
  std::vector<int> owner(static_cast<std::size_t>(width), -1);
  double cum = 0;
  int prev_edge = 0;
  for (std::size_t i = 0; i < segments.size(); ++i) {
    const double v = std::max(0.0, segments[i].raw());
    if (v <= 0) continue;
    cum += v;
    const int edge = std::min(width, static_cast<int>(std::lround(cum / cap * width)));
    for (int k = prev_edge; k < edge; ++k) owner[static_cast<std::size_t>(k)] = static_cast<int>(i);
    prev_edge = std::max(prev_edge, edge);
  }
  std::string s = st.unicode ? "▕" : "[";
  int k = 0;
  while (k < width) {
    if (k == mark && owner[static_cast<std::size_t>(k)] == -1) {
      s += st.unicode ? "│" : "|";
      ++k;
      continue;
    }
    const int o = owner[static_cast<std::size_t>(k)];
    int run = 1;
    while (k + run < width && owner[static_cast<std::size_t>(k + run)] == o && !(k + run == mark && o == -1)) ++run;
    if (o < 0) s += repeat(st.unicode ? "·" : ".", run);
    else s += paint(repeat(glyph(static_cast<std::size_t>(o), st), run), static_cast<std::size_t>(o), st);
    k += run;
  }
  s += st.unicode ? "▏" : "]";
  if (total > cap) s += st.unicode ? "▶" : ">";
  return s;
}

std::string memory_legend(const std::vector<bytes>& segments, term_style st, const std::string& indent,
                          std::size_t line_width, bool values) {
  std::string out, line;
  std::size_t line_len = 0;  // visible characters
  for (std::size_t i = 0; i < segments.size() && i < mc_count; ++i) {
    if (segments[i].raw() <= 0) continue;
    const std::string text = values ? fmt::format("{} {:.2f} GiB", memory_categories()[i].label, segments[i].in(gib))
                                    : std::string(memory_categories()[i].label);
    const std::size_t len = 2 + text.size();
    if (line_len > 0 && indent.size() + line_len + 2 + len > line_width) {
      out += indent + line + "\n";
      line.clear();
      line_len = 0;
    }
    if (line_len > 0) { line += "  "; line_len += 2; }
    line += paint(glyph(i, st), i, st) + " " + text;
    line_len += len;
  }
  if (line_len > 0) out += indent + line + "\n";
  return out;
}

progress_bar::progress_bar(std::ostream& s, std::string label, std::int64_t total, bool enabled,
                           std::chrono::milliseconds delay, bool unicode)
    : s_(s), label_(std::move(label)), total_(std::max<std::int64_t>(total, 1)), enabled_(enabled), unicode_(unicode),
      start_(std::chrono::steady_clock::now()), last_draw_(start_), delay_(delay) {}

progress_bar::~progress_bar() { finish(); }

void progress_bar::update(std::int64_t done) {
  if (!enabled_) return;
  const auto now = std::chrono::steady_clock::now();
  if (now - start_ < delay_) return;
  if (visible_ && now - last_draw_ < std::chrono::milliseconds(100) && done < total_) return;
  last_draw_ = now;
  draw(done);
}

void progress_bar::draw(std::int64_t done) {
  done = std::clamp<std::int64_t>(done, 0, total_);
  constexpr int cells = 30;
  const double share = static_cast<double>(done) / static_cast<double>(total_);
  const int full = static_cast<int>(share * cells);
  std::string bar = repeat(unicode_ ? "█" : "#", full) + repeat(unicode_ ? "░" : ".", cells - full);
  const std::string line = fmt::format("{} {} {:3.0f}% ({}/{})", label_, bar, 100 * share, done, total_);
  const std::size_t len = label_.size() + 1 + cells + fmt::format(" {:3.0f}% ({}/{})", 100 * share, done, total_).size();
  s_ << "\r" << line;
  if (last_len_ > len) s_ << std::string(last_len_ - len, ' ');
  s_.flush();
  last_len_ = len;
  shown_ = visible_ = true;
}

void progress_bar::finish() {
  if (!visible_) return;
  s_ << "\r" << std::string(last_len_, ' ') << "\r";
  s_.flush();
  visible_ = false;
}

}  // namespace bwplan::cli
