// SPDX-License-Identifier: Apache-2.0
// The HTML report: inline SVG charts, tables, no scripts, no external resources.
#include "report.hpp"
#include "markdown.hpp"

#include "term.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <functional>

namespace bwplan::cli {

namespace {

std::string esc(const std::string& s) {
  std::string o;
  for (char c : s) {
    switch (c) {
      case '&': o += "&amp;"; break;
      case '<': o += "&lt;"; break;
      case '>': o += "&gt;"; break;
      case '"': o += "&quot;"; break;
      case '\'': o += "&#39;"; break;
      default: o += c;
    }
  }
  return o;
}

/// A "nice" tick step so that [0, max] has about `n` ticks (1, 2, 2.5 or 5 × 10^k).
double nice_step(double max, int n) {
  if (max <= 0) return 1;
  const double raw = max / n;
  const double p = std::pow(10.0, std::floor(std::log10(raw)));
  for (double m : {1.0, 2.0, 2.5, 5.0, 10.0})
    if (m * p >= raw) return m * p;
  return 10 * p;
}

/// Tick label for tokens/s: 950, 12k, 1.5M.
std::string short_number(double v) {
  if (v >= 1e6) return fmt::format("{:g}M", std::round(v / 1e4) / 100);
  if (v >= 1e3) return fmt::format("{:g}k", std::round(v / 10) / 100);
  return fmt::format("{:g}", v);
}

std::string group_digits(double v) {
  const auto n = static_cast<long long>(std::llround(v));
  const std::string digits = std::to_string(n < 0 ? -n : n);
  std::string s = n < 0 ? "-" : "";
  for (std::size_t i = 0; i < digits.size(); ++i) {
    if (i > 0 && (digits.size() - i) % 3 == 0) s += ',';
    s += digits[i];
  }
  return s;
}

/// Whether white text reads better than black on `hex` (#RRGGBB).
bool dark(const std::string& hex) {
  auto ch = [&](int i) { return std::stoi(hex.substr(static_cast<std::size_t>(1 + 2 * i), 2), nullptr, 16) / 255.0; };
  return 0.2126 * ch(0) + 0.7152 * ch(1) + 0.0722 * ch(2) < 0.45;
}

std::string fill_of(std::size_t cat) {
  return cat == mc_slack ? "url(#bwplan-hatch)" : memory_categories()[cat].colour;
}

struct series_style {
  const char* colour;
  const char* dash;
  const char* marker;  // circle, square, triangle, diamond
};
const series_style styles[] = {
    {"#E69F00", "", "circle"}, {"#0072B2", "7 4", "square"}, {"#009E73", "2 3", "triangle"}, {"#CC79A7", "9 3 2 3", "diamond"}};

std::string marker(const std::string& shape, double x, double y, double r, const std::string& colour, bool filled,
                   const std::string& title) {
  const std::string paint = fmt::format("fill=\"{}\" stroke=\"{}\" stroke-width=\"2\"", filled ? colour : "#FFFFFF", colour);
  std::string el;
  if (shape == "square")
    el = fmt::format("<rect x=\"{:.1f}\" y=\"{:.1f}\" width=\"{:.1f}\" height=\"{:.1f}\" {}>", x - r, y - r, 2 * r, 2 * r, paint);
  else if (shape == "triangle")
    el = fmt::format("<polygon points=\"{:.1f},{:.1f} {:.1f},{:.1f} {:.1f},{:.1f}\" {}>", x, y - 1.2 * r, x + 1.1 * r,
                     y + 0.8 * r, x - 1.1 * r, y + 0.8 * r, paint);
  else if (shape == "diamond")
    el = fmt::format("<polygon points=\"{:.1f},{:.1f} {:.1f},{:.1f} {:.1f},{:.1f} {:.1f},{:.1f}\" {}>", x, y - 1.3 * r,
                     x + 1.3 * r, y, x, y + 1.3 * r, x - 1.3 * r, y, paint);
  else
    el = fmt::format("<circle cx=\"{:.1f}\" cy=\"{:.1f}\" r=\"{:.1f}\" {}>", x, y, r, paint);
  const std::string tag = shape == "square" ? "rect" : (shape == "circle" ? "circle" : "polygon");
  return el + "<title>" + esc(title) + "</title></" + tag + ">\n";
}

std::string svg_open(int w, int h, const std::string& label) {
  return fmt::format(
      "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{0}\" height=\"{1}\" viewBox=\"0 0 {0} {1}\" role=\"img\" "
      "aria-label=\"{2}\" font-family=\"system-ui, -apple-system, 'Segoe UI', 'DejaVu Sans', sans-serif\" font-size=\"13\">\n"
      "<title>{2}</title>\n",
      w, h, esc(label));
}

std::string text(double x, double y, const std::string& s, const std::string& extra = "") {
  return fmt::format("<text x=\"{:.1f}\" y=\"{:.1f}\"{}{}>{}</text>\n", x, y, extra.empty() ? "" : " ", extra, esc(s));
}

/// Horizontal capacity (solid) and headroom (dashed) lines across the plot, labelled at the right end;
/// `y_bottom` is the x axis.
std::string limit_lines(double x0, double x1, double y_cap, double y_lim, double y_bottom, bytes capacity, double headroom) {
  const std::string halo = "stroke=\"#FFFFFF\" stroke-width=\"3\" paint-order=\"stroke\"";  // readable over bars and lines
  std::string s;
  s += fmt::format("<line x1=\"{:.1f}\" y1=\"{:.1f}\" x2=\"{:.1f}\" y2=\"{:.1f}\" stroke=\"#000\" stroke-width=\"2\"/>\n", x0,
                   y_cap, x1, y_cap);
  s += text(x1 - 4, y_cap - 5, fmt::format("GPU capacity {:.1f} GiB", capacity.in(gib)),
            "text-anchor=\"end\" font-weight=\"600\" " + halo);
  if (headroom > 0) {
    s += fmt::format(
        "<line x1=\"{:.1f}\" y1=\"{:.1f}\" x2=\"{:.1f}\" y2=\"{:.1f}\" stroke=\"#000\" stroke-width=\"1.5\" stroke-dasharray=\"6 4\"/>\n",
        x0, y_lim, x1, y_lim);
    // Below its line, unless that runs into the x axis: then above the capacity label.
    const double ly = y_lim + 15 <= y_bottom - 4 ? y_lim + 15 : y_cap - 21;
    s += text(x1 - 4, ly, fmt::format("headroom limit ({:.0f}% free) {:.1f} GiB", 100 * headroom, ((1 - headroom) * capacity).in(gib)),
              "text-anchor=\"end\" " + halo);
  }
  return s;
}

/// Y grid, tick labels and axis title.
std::string y_axis(double x0, double x1, double y0, double y1, double vmax, double step,
                   const std::function<std::string(double)>& label, const std::string& title) {
  std::string s;
  for (double v = 0; v <= vmax + 1e-9 * vmax; v += step) {
    const double y = y0 - (v / vmax) * (y0 - y1);
    s += fmt::format("<line x1=\"{:.1f}\" y1=\"{:.1f}\" x2=\"{:.1f}\" y2=\"{:.1f}\" stroke=\"#DDDDDD\"/>\n", x0, y, x1, y);
    s += text(x0 - 6, y + 4, label(v), "text-anchor=\"end\"");
  }
  s += fmt::format("<line x1=\"{0:.1f}\" y1=\"{1:.1f}\" x2=\"{0:.1f}\" y2=\"{2:.1f}\" stroke=\"#333\"/>\n", x0, y0, y1);
  s += fmt::format("<line x1=\"{:.1f}\" y1=\"{:.1f}\" x2=\"{:.1f}\" y2=\"{:.1f}\" stroke=\"#333\"/>\n", x0, y0, x1, y0);
  const double ym = (y0 + y1) / 2;
  s += fmt::format("<text x=\"18\" y=\"{:.1f}\" text-anchor=\"middle\" transform=\"rotate(-90 18 {:.1f})\" font-weight=\"600\">{}</text>\n",
                   ym, ym, esc(title));
  return s;
}

/// The settings a chart holds fixed, named so its points cannot be mistaken for another plan's.
std::string fixed_settings(const training_config& c) {
  std::string s = std::string("precision ") + to_string(c.format) + ", " + shard_label(c) + ", master " + to_string(c.master) +
                  ", loss " + to_string(c.loss) + ", accumulation " + std::to_string(c.grad_accum);
  if (c.tp > 1) s += ", TP " + std::to_string(c.tp);
  if (c.cp > 1) s += ", CP " + std::to_string(c.cp);
  if (c.ep > 1) s += ", EP " + std::to_string(c.ep);
  return s;
}

bool within(const sweep_point& p, double headroom) {
  return p.memory.device_peak() <= (1.0 - headroom) * p.memory.capacity;
}

}  // namespace

std::string report_command_line(const plan& p, double headroom, int top, std::int64_t global_batch_tokens,
                                std::int64_t sweep_max_mbs, const std::string& output) {
  std::string s = "bwplan";  // the plan's power limit and attention kernel are global options, before the subcommand
  if (p.target.power_limit_w > 0) s += fmt::format(" --power-limit {:g}", p.target.power_limit_w);
  if (!p.target.attention_kernel.empty()) s += " --attention-kernel " + p.target.attention_kernel;
  s += " report";
  for (const auto& a : to_cli_args(p)) s += " " + shell_quote(a);
  s += fmt::format(" --headroom {} --top {} --global-batch-tokens {} --sweep-max-mbs {} -o {}", bwplan::detail::shortest(headroom), top,
                   global_batch_tokens, sweep_max_mbs, shell_quote(output));
  return s;
}

std::vector<sweep_series> checkpointing_sweep(const hardware_catalog& cat, const model_spec& m, const resolved_plan& base,
                                              std::int64_t max_mbs, const calibration_profile* profile) {
  std::vector<sweep_series> out;
  sweep_axis mbs{"mbs", {}};
  // With a fixed global batch (a plan's global_batch_size) a micro-batch must divide it per data-parallel rank: the
  // chart leaves out the sizes that do not (the bundled example plans' 256 sequences over 8 ranks end at 32), where
  // one such point used to refuse the whole report
  const std::int64_t dp = std::max<std::int64_t>(1, base.p.training.dp());
  for (std::int64_t b = 1; b <= std::max<std::int64_t>(1, max_mbs); b *= 2)
    if (!base.p.global_batch || b == 1 || *base.p.global_batch % (b * dp) == 0) mbs.values.push_back(std::to_string(b));
  std::vector<std::string> modes{"none", "full", "every-2", "every-4", "selective-op"};
  const std::string own = to_string(base.config.ac);  // the plan's own mode is always a series
  if (std::find(modes.begin(), modes.end(), own) == modes.end()) modes.push_back(own);
  for (const auto& ac : modes) {
    const auto pts = run_sweep(cat, m, base, {{"ac", {ac}}, mbs}, {}, profile);
    out.push_back({"AC " + to_string(pts.front().config.ac), pts});
  }
  return out;
}

std::string phase_chart_svg(const memory_estimate& me, double headroom) {
  constexpr int W = 900, H = 450;
  const double x0 = 75, x1 = 640, y0 = H - 60, y1 = 30;
  const step_phase phases[] = {step_phase::forward, step_phase::backward, step_phase::optimizer};
  const char* names[] = {"forward", "backward", "optimizer step"};
  std::vector<std::vector<bytes>> segs;
  double top = me.capacity.in(gib);
  std::vector<bool> used(mc_count, false);
  for (step_phase p : phases) {
    const bytes slack = p == me.peak_phase ? me.peak_reserved - me.peak_allocated : bytes{};
    segs.push_back(memory_segments(me.at_phase_peak(p), me.non_pytorch, slack));
    double sum = 0;
    for (std::size_t i = 0; i < mc_count; ++i) {
      sum += segs.back()[i].in(gib);
      if (segs.back()[i].raw() > 0) used[i] = true;
    }
    top = std::max(top, sum);
  }
  const double step = nice_step(top * 1.08, 8);
  const double vmax = std::ceil(top * 1.08 / step) * step;
  auto Y = [&](double g) { return y0 - g / vmax * (y0 - y1); };

  std::string s = svg_open(W, H, "Memory per GPU at the largest moment of each phase of a training step");
  s += "<defs><pattern id=\"bwplan-hatch\" patternUnits=\"userSpaceOnUse\" width=\"6\" height=\"6\" "
       "patternTransform=\"rotate(45)\"><rect width=\"6\" height=\"6\" fill=\"#EEEEEE\"/>"
       "<line x1=\"0\" y1=\"0\" x2=\"0\" y2=\"6\" stroke=\"#888888\" stroke-width=\"2.5\"/></pattern></defs>\n";
  s += y_axis(x0, x1, y0, y1, vmax, step, [](double v) { return fmt::format("{:g}", v); }, "memory per GPU (GiB)");
  const double slot = (x1 - x0) / 3, bw = 110;
  for (std::size_t k = 0; k < 3; ++k) {
    const double cx = x0 + slot * (static_cast<double>(k) + 0.5);
    double acc = 0;
    for (std::size_t i = 0; i < mc_count; ++i) {
      const double g = segs[k][i].in(gib);
      if (g <= 0) continue;
      const double ya = Y(acc + g), yb = Y(acc);
      const auto& cat = memory_categories()[i];
      s += fmt::format("<rect x=\"{:.1f}\" y=\"{:.2f}\" width=\"{:.1f}\" height=\"{:.2f}\" fill=\"{}\" stroke=\"#FFFFFF\" "
                       "stroke-width=\"0.75\"><title>{}: {} {:.2f} GiB</title></rect>\n",
                       cx - bw / 2, ya, bw, yb - ya, fill_of(i), names[k], esc(cat.label), g);
      if (yb - ya >= 15)
        s += text(cx, (ya + yb) / 2 + 4, fmt::format("{:.1f}", g),
                  fmt::format("text-anchor=\"middle\" font-size=\"11\" fill=\"{}\"",
                              i != mc_slack && dark(cat.colour) ? "#FFFFFF" : "#000000"));
      acc += g;
    }
    s += text(cx, Y(acc) - 6, fmt::format("{:.1f} GiB", acc), "text-anchor=\"middle\" font-weight=\"600\"");
    const bool peak = phases[k] == me.peak_phase;
    s += text(cx, y0 + 18, names[k], "text-anchor=\"middle\"");
    if (peak) s += text(cx, y0 + 33, "(peak of the step)", "text-anchor=\"middle\" font-size=\"11\"");
  }
  s += limit_lines(x0, x1, Y(me.capacity.in(gib)), Y((1 - headroom) * me.capacity.in(gib)), y0, me.capacity, headroom);
  s += text((x0 + x1) / 2, H - 8, "phase of the training step (largest moment of each)", "text-anchor=\"middle\" font-weight=\"600\"");
  // Legend, top of the stack first.
  double ly = y1 + 4;
  s += text(665, ly + 8, "memory held (GiB)", "font-weight=\"600\"");
  ly += 22;
  for (std::size_t i = mc_count; i-- > 0;) {
    if (!used[i]) continue;
    s += fmt::format("<rect x=\"665\" y=\"{:.1f}\" width=\"16\" height=\"16\" fill=\"{}\" stroke=\"#333\" stroke-width=\"0.5\"/>\n",
                     ly - 12, fill_of(i));
    s += text(688, ly + 1, memory_categories()[i].label);
    ly += 24;
  }
  s += "</svg>\n";
  return s;
}

std::string sweep_chart_svg(const std::vector<sweep_series>& series, bytes capacity, double headroom, int world_size,
                            const std::string& metric) {
  constexpr int W = 900, H = 400;
  const double x0 = 80, x1 = 660, y0 = H - 55, y1 = 25;
  const bool mem = metric == "memory";
  auto value = [&](const sweep_point& p) {
    return mem ? p.memory.device_peak().in(gib) : p.throughput.tokens_per_s;
  };
  double top = mem ? capacity.in(gib) : 0;
  double lo_mbs = 1e300, hi_mbs = 0;
  std::vector<double> ticks;
  for (const auto& se : series)
    for (const auto& p : se.points) {
      top = std::max(top, value(p));
      const double b = static_cast<double>(p.config.micro_batch);
      lo_mbs = std::min(lo_mbs, b);
      hi_mbs = std::max(hi_mbs, b);
      if (std::find(ticks.begin(), ticks.end(), b) == ticks.end()) ticks.push_back(b);
    }
  if (mem) top = std::min(top, 2.5 * capacity.in(gib));  // clip runaway points; drawn as arrows at the top
  const double step = nice_step(top * 1.05, 6);
  const double vmax = std::max(step, std::ceil(top * 1.05 / step) * step);
  auto Y = [&](double v) { return y0 - std::min(v, vmax) / vmax * (y0 - y1); };
  const double span = std::max(1e-9, std::log2(hi_mbs) - std::log2(std::max(1.0, lo_mbs)));
  auto X = [&](double b) { return x0 + 25 + (std::log2(b) - std::log2(std::max(1.0, lo_mbs))) / span * (x1 - x0 - 50); };

  const std::string title = mem ? "Peak device memory per GPU against micro-batch size, per checkpointing mode"
                                : "Training throughput against micro-batch size, per checkpointing mode";
  std::string s = svg_open(W, H, title);
  s += y_axis(x0, x1, y0, y1, vmax, step,
              mem ? std::function<std::string(double)>([](double v) { return fmt::format("{:g}", v); })
                  : std::function<std::string(double)>(short_number),
              mem ? "peak device memory per GPU (GiB)"
                  : (world_size == 1 ? std::string("tokens/s (1 GPU)") : fmt::format("tokens/s (all {} GPUs)", world_size)));
  std::sort(ticks.begin(), ticks.end());
  for (double b : ticks) {
    s += fmt::format("<line x1=\"{0:.1f}\" y1=\"{1:.1f}\" x2=\"{0:.1f}\" y2=\"{2:.1f}\" stroke=\"#333\"/>\n", X(b), y0, y0 + 5);
    s += text(X(b), y0 + 19, fmt::format("{:g}", b), "text-anchor=\"middle\"");
  }
  s += text((x0 + x1) / 2, H - 10, "micro-batch size per GPU (sequences, log scale)", "text-anchor=\"middle\" font-weight=\"600\"");
  if (mem) s += limit_lines(x0, x1, Y(capacity.in(gib)), Y((1 - headroom) * capacity.in(gib)), y0, capacity, headroom);

  std::vector<std::string> stops;
  for (std::size_t k = 0; k < series.size(); ++k) {
    const auto& st = styles[k % 4];
    const auto& pts = series[k].points;
    // Memory: one line through every point. Throughput: the line joins only points that fit.
    std::string path;
    for (const auto& p : pts) {
      if (!mem && !within(p, headroom)) continue;
      path += fmt::format("{}{:.1f},{:.1f}", path.empty() ? "M" : " L", X(static_cast<double>(p.config.micro_batch)), Y(value(p)));
    }
    if (!path.empty())
      s += fmt::format("<path d=\"{}\" fill=\"none\" stroke=\"{}\" stroke-width=\"2.5\"{}/>\n", path, st.colour,
                       *st.dash ? fmt::format(" stroke-dasharray=\"{}\"", st.dash) : "");
    bool stopped = false;
    for (const auto& p : pts) {
      const bool ok = within(p, headroom);
      const double x = X(static_cast<double>(p.config.micro_batch)), v = value(p);
      const std::string tip = fmt::format("{}, mbs {}: {} ({})", series[k].label, p.config.micro_batch,
                                          mem ? fmt::format("{:.1f} GiB", v) : group_digits(v) + " tokens/s",
                                          ok ? "fits" : "does not fit");
      if (mem && v > vmax) {  // clipped
        s += fmt::format("<polygon points=\"{0:.1f},{1:.1f} {2:.1f},{3:.1f} {4:.1f},{3:.1f}\" fill=\"#FFFFFF\" stroke=\"{5}\" "
                         "stroke-width=\"2\"><title>{6}</title></polygon>\n",
                         x, y1 - 2, x + 6, y1 + 9, x - 6, st.colour, esc(tip));
      } else {
        s += marker(st.marker, x, Y(v), 5, st.colour, ok, tip);
      }
      if (!ok && !stopped) {
        stopped = true;
        if (!(mem && v > vmax))
          s += fmt::format("<circle cx=\"{:.1f}\" cy=\"{:.1f}\" r=\"10\" fill=\"none\" stroke=\"{}\" stroke-width=\"1.5\"/>\n", x,
                           Y(v), st.colour);
        stops.push_back(&p == &pts.front() ? series[k].label + ": none fits"
                                           : fmt::format("{}: mbs {}", series[k].label, p.config.micro_batch));
      }
    }
    if (!stopped) stops.push_back(series[k].label + ": fits to the end");
  }
  // Legend.
  double ly = y1 + 8;
  s += text(680, ly, "checkpointing", "font-weight=\"600\"");
  ly += 20;
  for (std::size_t k = 0; k < series.size(); ++k) {
    const auto& st = styles[k % 4];
    s += fmt::format("<line x1=\"680\" y1=\"{0:.1f}\" x2=\"712\" y2=\"{0:.1f}\" stroke=\"{1}\" stroke-width=\"2.5\"{2}/>\n", ly - 4,
                     st.colour, *st.dash ? fmt::format(" stroke-dasharray=\"{}\"", st.dash) : "");
    s += marker(st.marker, 696, ly - 4, 5, st.colour, true, series[k].label);
    s += text(720, ly, series[k].label);
    ly += 22;
  }
  ly += 6;
  s += marker("circle", 686, ly - 4, 5, "#333333", true, "fits");
  s += text(698, ly, "fits within headroom");
  ly += 20;
  s += marker("circle", 686, ly - 4, 5, "#333333", false, "does not fit");
  s += text(698, ly, "does not fit");
  ly += 20;
  s += fmt::format("<circle cx=\"686\" cy=\"{:.1f}\" r=\"10\" fill=\"none\" stroke=\"#333\" stroke-width=\"1.5\"/>\n", ly - 4);
  s += text(702, ly, "first that does not fit");
  if (mem) {
    ly += 20;
    s += "<polygon points=\"686," + fmt::format("{:.1f} 692,{:.1f} 680,{:.1f}", ly - 10, ly + 1, ly + 1) +
         "\" fill=\"#FFFFFF\" stroke=\"#333\" stroke-width=\"2\"/>\n";
    s += text(698, ly, "off the chart (above)");
  }
  ly += 28;
  s += text(680, ly, "stops fitting at", "font-weight=\"600\"");
  for (const auto& line : stops) {
    ly += 18;
    s += text(680, ly, line);
  }
  s += "</svg>\n";
  return s;
}

std::string render_report_html(const report_data& d) {
  const model_spec& m = d.plan.model;
  const resolved_target& t = d.plan.target;
  const training_config& c = d.plan.config;
  const memory_estimate& me = d.memory;
  const throughput_estimate& te = d.throughput;
  const parameter_count pc = count_parameters(m);
  const std::string where = t.instance ? fmt::format("{} × {} ({} × {})", c.world_size / std::max(1, c.gpus_per_node),
                                                     t.instance->id, c.world_size, t.gpu.id)
                                       : fmt::format("{} × {}", c.world_size, t.gpu.id);
  const bool ok = me.device_peak() <= (1 - d.headroom) * me.capacity;
  std::string h;
  h += "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n";
  h += "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n";
  h += "<meta name=\"generator\" content=\"bwplan " + std::string(version_string) + "\">\n";
  h += "<title>bwplan report: " + esc(m.name) + " on " + esc(where) + "</title>\n";
  h += R"(<style>
body { font-family: system-ui, -apple-system, "Segoe UI", "DejaVu Sans", sans-serif; color: #1a1a1a; background: #fff;
       max-width: 960px; margin: 24px auto; padding: 0 16px; line-height: 1.45; }
h1 { font-size: 1.6em; margin-bottom: 0.2em; } h2 { font-size: 1.25em; margin-top: 1.8em; border-bottom: 1px solid #ccc; }
.sub { color: #444; margin-top: 0; }
.summary { display: flex; flex-wrap: wrap; gap: 12px; margin: 16px 0; }
.card { border: 1px solid #ccc; border-radius: 6px; padding: 8px 14px; min-width: 150px; }
.card b { display: block; font-size: 1.35em; } .card span { color: #444; font-size: 0.9em; }
.fits { border-left: 6px solid #009E73; } .nofit { border-left: 6px solid #D55E00; }
table { border-collapse: collapse; margin: 8px 0 16px; font-size: 0.92em; }
th, td { border: 1px solid #ccc; padding: 4px 8px; text-align: left; vertical-align: top; }
td.n, th.n { text-align: right; font-variant-numeric: tabular-nums; }
th { background: #f2f2f2; }
figure { margin: 12px 0 20px; } figcaption { color: #333; font-size: 0.92em; margin-top: 4px; }
svg { max-width: 100%; height: auto; display: block; }
code { background: #f4f4f4; padding: 1px 4px; border-radius: 3px; font-size: 0.92em; word-break: break-all; }
footer { margin-top: 32px; color: #555; font-size: 0.88em; border-top: 1px solid #ccc; padding-top: 8px; }
</style>
</head>
<body>
)";
  h += "<h1>" + esc(m.name) + " on " + esc(where) + "</h1>\n";
  h += "<p class=\"sub\">" + esc(describe(c)) + " — memory and throughput estimated by bwplan " + version_string + "</p>\n";
  h += "<div class=\"summary\">\n";
  h += fmt::format("<div class=\"card {}\"><b>{}</b><span>{} (limit {:.0f}% free)</span></div>\n", ok ? "fits" : "nofit",
                   ok ? "fits" : (me.fits ? "fits, below the headroom" : "does not fit"),
                   me.fits ? fmt::format("{:.1f}% of capacity free at the peak", 100 * me.headroom())
                           : fmt::format("{:.1f} GiB over capacity at the peak", (me.device_peak() - me.capacity).in(gib)),
                   100 * d.headroom);
  h += fmt::format("<div class=\"card\"><b>{:.1f} GiB</b><span>device peak per GPU of {:.1f} GiB ({} phase)</span></div>\n",
                   me.device_peak().in(gib), me.capacity.in(gib), to_string(me.peak_phase));
  h += fmt::format("<div class=\"card\"><b>{}</b><span>{}</span></div>\n", group_digits(te.tokens_per_s),
                   c.world_size == 1 ? std::string("tokens/s on 1 GPU")
                                     : fmt::format("tokens/s, all {} GPUs ({} per GPU)", c.world_size,
                                                   group_digits(te.tokens_per_s_per_gpu)));
  h += fmt::format("<div class=\"card\"><b>{:.1f}%</b><span>MFU, step {:.3f} s</span></div>\n", 100 * te.mfu, te.step.raw());
  h += "</div>\n";
  if (d.band) h += "<p class=\"band\">Error band: " + esc(band_line(me, te, *d.band)) + ".</p>\n";

  // Memory by phase.
  h += "<h2>Memory per GPU by phase</h2>\n<figure>\n" + phase_chart_svg(me, d.headroom);
  h += fmt::format(
      "<figcaption>Bytes held on each GPU at the largest moment of the forward pass, the backward pass and the optimizer "
      "step (as <code>torch.cuda.max_memory_allocated</code> counts them), plus the CUDA context and NCCL buffers outside "
      "PyTorch's allocator; the hatched part is the allocator's reserve beyond the allocated bytes at the peak of the "
      "step. The solid line is what CUDA can use on one {} ({:.1f} GiB); the dashed line keeps {:.0f}% free.</figcaption>\n</figure>\n",
      esc(t.gpu.name.empty() ? t.gpu.id : t.gpu.name), me.capacity.in(gib), 100 * d.headroom);
  // Data table for the chart.
  h += "<table>\n<tr><th>GiB per GPU</th><th class=\"n\">forward</th><th class=\"n\">backward</th><th class=\"n\">optimizer step</th></tr>\n";
  const step_phase phases[] = {step_phase::forward, step_phase::backward, step_phase::optimizer};
  std::vector<std::vector<bytes>> segs;
  for (step_phase p : phases)
    segs.push_back(memory_segments(me.at_phase_peak(p), me.non_pytorch,
                                   p == me.peak_phase ? me.peak_reserved - me.peak_allocated : bytes{}));
  for (std::size_t i = mc_count; i-- > 0;) {
    if (segs[0][i].raw() <= 0 && segs[1][i].raw() <= 0 && segs[2][i].raw() <= 0) continue;
    h += "<tr><td>" + esc(memory_categories()[i].label) + "</td>";
    for (const auto& sg : segs) h += fmt::format("<td class=\"n\">{:.2f}</td>", sg[i].in(gib));
    h += "</tr>\n";
  }
  h += "<tr><th>total</th>";
  for (const auto& sg : segs) {
    bytes sum;
    for (const auto& b : sg) sum += b;
    h += fmt::format("<th class=\"n\">{:.2f}</th>", sum.in(gib));
  }
  h += "</tr>\n</table>\n";

  // Sweep.
  if (!d.sweep.empty()) {
    const std::string mbs_range =
        fmt::format("{}–{}", d.sweep.front().points.front().config.micro_batch, d.sweep.front().points.back().config.micro_batch);
    h += "<h2>Micro-batch size and activation checkpointing</h2>\n";
    h += "<figure>\n" + sweep_chart_svg(d.sweep, me.capacity, d.headroom, c.world_size, "memory");
    h += fmt::format("<figcaption>Peak device memory per GPU for micro-batch sizes {} at sequence length {}, every other "
                     "setting as the plan above ({}). Hollow markers do not fit within the {:.0f}% headroom; the ringed marker is "
                     "where each checkpointing mode stops fitting.</figcaption>\n</figure>\n",
                     mbs_range, c.seq_len, esc(fixed_settings(c)), 100 * d.headroom);
    h += "<figure>\n" + sweep_chart_svg(d.sweep, me.capacity, d.headroom, c.world_size, "throughput");
    h += "<figcaption>Estimated tokens per second of the whole job for the same points. Lines join the points that fit; "
         "hollow markers are configurations that would run out of memory.</figcaption>\n</figure>\n";
    h += "<table>\n<tr><th>checkpointing</th><th class=\"n\">largest fitting micro-batch</th><th class=\"n\">device peak "
         "GiB</th><th class=\"n\">tokens/s</th><th class=\"n\">MFU</th><th class=\"n\">first that does not fit</th></tr>\n";
    for (const auto& se : d.sweep) {
      const sweep_point* best = nullptr;
      const sweep_point* first_bad = nullptr;
      for (const auto& p : se.points) {
        if (within(p, d.headroom)) best = &p;
        else if (!first_bad) first_bad = &p;
      }
      h += "<tr><td>" + esc(se.label) + "</td>";
      if (best)
        h += fmt::format("<td class=\"n\">{}</td><td class=\"n\">{:.1f}</td><td class=\"n\">{}</td><td class=\"n\">{:.1f}%</td>",
                         best->config.micro_batch, best->memory.device_peak().in(gib), group_digits(best->throughput.tokens_per_s),
                         100 * best->throughput.mfu);
      else
        h += "<td class=\"n\">none fits</td><td></td><td></td><td></td>";
      h += "<td class=\"n\">" + (first_bad ? std::to_string(first_bad->config.micro_batch) : std::string("—")) + "</td></tr>\n";
    }
    h += "</table>\n";
  }

  // Top plans.
  h += "<h2>Top plans</h2>\n";
  h += fmt::format("<p>{} configurations searched (micro-batch, checkpointing, sharding, loss; gradient accumulation for "
                   "{} tokens per step) at sequence length {}; {} fit{} with {:.0f}% headroom. Ranked by tokens/s.</p>\n",
                   d.plans.evaluated, group_digits(static_cast<double>(d.request.global_batch_tokens)),
                   d.request.seq_lens.empty() ? c.seq_len : d.request.seq_lens.front(), d.plans.fitting,
                   esc(unreplayed_note(d.plans)), 100 * d.request.headroom);
  if (d.plans.ranked.empty()) {
    h += "<p><b>No configuration fits.</b> Try more nodes, a larger GPU or a shorter sequence.</p>\n";
  } else {
    std::vector<training_config> cfgs;
    for (const auto& p : d.plans.ranked) cfgs.push_back(p.config);
    const std::vector<bool> show = differing_columns(cfgs);
    h += "<table>\n<tr><th class=\"n\">#</th>";
    const auto proto = setting_columns(cfgs.front());
    for (std::size_t k = 0; k < proto.size(); ++k)
      if (show[k]) h += "<th>" + esc(std::string(proto[k].header)) + "</th>";
    h += "<th class=\"n\">device peak GiB</th><th class=\"n\">free</th><th class=\"n\">band top GiB</th><th>verdict</th>"
         "<th class=\"n\">tokens/s</th><th class=\"n\">MFU</th><th class=\"n\">step s</th></tr>\n";
    for (std::size_t i = 0; i < d.plans.ranked.size(); ++i) {
      const plan_candidate& p = d.plans.ranked[i];
      // the plan's error band (docs/calibration.md#bands): the device peak at its top and the three-state verdict
      const std::optional<error_band> b = i < d.plan_bands.size() ? d.plan_bands[i] : std::nullopt;
      h += fmt::format("<tr><td class=\"n\">{}</td>", i + 1);
      const auto cols = setting_columns(p.config);
      for (std::size_t k = 0; k < cols.size(); ++k)
        if (show[k]) h += "<td>" + esc(cols[k].value) + "</td>";
      h += fmt::format("<td class=\"n\">{:.1f}</td><td class=\"n\">{:.1f}%</td><td class=\"n\">{}</td><td>{}</td><td class=\"n\">{}</td>"
                       "<td class=\"n\">{:.1f}%</td><td class=\"n\">{:.3f}</td></tr>\n",
                       p.memory.device_peak().in(gib), 100 * p.memory.headroom(),
                       b ? fmt::format("{:.1f}", band_top(p.memory, b->memory).in(gib)) : std::string("—"),
                       to_string(b ? verdict_of(p.memory, b->memory) : fit_verdict::fits), group_digits(p.throughput.tokens_per_s),
                       100 * p.throughput.mfu, p.throughput.step.raw());
    }
    h += "</table>\n";
  }

  // Inputs.
  h += "<h2>Inputs</h2>\n<table>\n";
  auto row = [&](const std::string& k, const std::string& v) { h += "<tr><th>" + esc(k) + "</th><td>" + esc(v) + "</td></tr>\n"; };
  row("model", fmt::format("{} ({}), {:.3f} B parameters", m.name, m.family, static_cast<double>(pc.total()) / 1e9));
  row("architecture", fmt::format("{} layers, hidden {}, {} heads ({} KV heads, head dim {}), intermediate {}, vocabulary {}, "
                                  "context {}{}",
                                  m.layers, m.hidden, m.heads, m.kv_heads, m.head_dim, m.intermediate, m.vocab, m.max_context,
                                  m.tied_embeddings ? ", tied embeddings" : ""));
  row("GPU", fmt::format("{} ({}): {:.1f} GiB usable by CUDA, HBM {:.1f} TB/s, bf16 dense {:.0f} TFLOP/s, NVLink {:.0f} GB/s per direction",
                         t.gpu.name.empty() ? t.gpu.id : t.gpu.name, t.gpu.id, me.capacity.in(gib), t.gpu.hbm_bandwidth.raw() / 1e12,
                         t.gpu.peak("bf16").value_or(flop_rate{}).raw() / 1e12, t.gpu.nvlink_per_direction.raw() / 1e9));
  if (t.instance)
    row("instance", fmt::format("{}: {} GPUs per node, EFA {:.0f} GB/s, {} node{}", t.instance->id, t.instance->gpus_per_node,
                                t.instance->efa_per_node.raw() / 1e9, c.world_size / std::max(1, c.gpus_per_node),
                                c.world_size / std::max(1, c.gpus_per_node) == 1 ? "" : "s"));
  row("world size", fmt::format("{} GPUs (data-parallel {}, TP {}, CP {}, EP {}{})", c.world_size, c.dp(), c.tp, c.cp, c.ep,
                                c.pp > 1 ? fmt::format(", PP {}", c.pp) : std::string()));
  if (c.pp > 1)
    row("pipeline", fmt::format("{} stages, {}{}, {} micro-batches per step; bubble {:.3f} s per step", c.pp, to_string(c.schedule),
                                c.virtual_stages() > 1 ? fmt::format(" with {} virtual stages per rank", c.vpp) : std::string(), c.grad_accum,
                                te.bubble.raw()));
  row("micro-batch × sequence", fmt::format("{} × {} tokens, gradient accumulation {} ({} tokens per optimizer step)",
                                            c.micro_batch, c.seq_len, c.grad_accum,
                                            group_digits(static_cast<double>(c.micro_batch * c.seq_len * c.grad_accum * c.dp()))));
  row("activation checkpointing", to_string(c.ac));
  row("sharding", c.shard == sharding::full ? std::string("FSDP2 full shard") : c.shard == sharding::none ? std::string(c.world_size > 1 ? "none (DDP)" : "none") : shard_label(c));
  row("precision", fmt::format("{} compute, {} master weights", to_string(c.format), to_string(c.master)));
  row("optimizer", c.optim == optimizer_kind::adamw ? fmt::format("AdamW ({})", to_string(c.optimizer)) : std::string(to_string(c.optim)));
  if (c.adapters())
    row("fine-tuning", fmt::format("{} rank {} (alpha {}) on {}, dropout {}", c.finetune == finetune_mode::qlora ? "QLoRA (NF4 base)" : "LoRA",
                                   c.lora.rank, c.lora.alpha, lora_targets_to_string(c.lora.targets), c.lora.dropout));
  row("loss", to_string(c.loss));
  if (c.modules != module_kernels::fused) row("modules", "transformers' RMSNorm and rotary tables as published (docs/stacks.md#modules)");
  if (c.offload != 0)
    row("CPU offload", fmt::format("{}: {:.1f} GiB of host memory per GPU, {:.1f} GiB per node{}; {:.3f} s of the step on the host's "
                                   "optimizer step and the host-device copies it waits for ({:.3f} s of CPU step)",
                                   offload_to_string(c.offload), me.host_per_gpu.in(gib), host_memory_per_node(me, c).in(gib),
                                   t.instance && t.instance->host_memory.raw() > 0
                                       ? fmt::format(" of the instance's {:.0f} GiB", t.instance->host_memory.in(gib))
                                       : std::string(),
                                   te.offload.raw(), te.offload_cpu_step.raw()));
  row("headroom", fmt::format("{:.0f}% of capacity kept free", 100 * d.headroom));
  h += "</table>\n";
  h += "<footer>Generated by bwplan " + std::string(version_string) + " with <code>" + esc(d.command_line) +
       "</code>. Estimates, not measurements: the bwplan documentation (docs/) describes the memory and throughput models "
       "and their measured error. This page is self-contained: no scripts, no external resources.</footer>\n";
  h += "</body>\n</html>\n";
  return h;
}

}  // namespace bwplan::cli
