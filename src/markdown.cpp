// SPDX-License-Identifier: Apache-2.0
#include "markdown.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

namespace bwplan::cli {

namespace {
/// Display width of UTF-8 text (code points; every glyph bwplan writes is one column wide).
std::size_t width(const std::string& s) {
  std::size_t n = 0;
  for (unsigned char c : s)
    if ((c & 0xC0) != 0x80) ++n;
  return n;
}
}  // namespace

std::string md_escape(const std::string& text) {
  std::string s;
  for (char c : text) {
    if (c == '|') s += "\\|";
    else if (c == '\n' || c == '\r') s += ' ';
    else s += c;
  }
  return s;
}

std::string markdown_table(const std::vector<md_column>& columns, const std::vector<std::vector<std::string>>& rows) {
  const std::size_t n = columns.size();
  std::vector<std::vector<std::string>> cells;
  std::vector<std::size_t> w(n, 3);
  auto add = [&](std::vector<std::string> r) {
    r.resize(n);
    for (std::size_t i = 0; i < n; ++i) {
      r[i] = md_escape(r[i]);
      w[i] = std::max(w[i], width(r[i]));
    }
    cells.push_back(std::move(r));
  };
  std::vector<std::string> head;
  for (const auto& c : columns) head.push_back(c.header);
  add(head);
  for (const auto& r : rows) add(r);
  auto pad = [&](const std::string& s, std::size_t i) {
    const std::string fill(w[i] - width(s), ' ');
    return columns[i].align == md_align::right ? fill + s : s + fill;
  };
  auto line = [&](const std::vector<std::string>& r) {
    std::string s = "|";
    for (std::size_t i = 0; i < n; ++i) s += " " + pad(r[i], i) + " |";
    return s + "\n";
  };
  std::string out = line(cells[0]);
  out += "|";
  for (std::size_t i = 0; i < n; ++i) {
    const bool l = columns[i].align != md_align::right, r = columns[i].align != md_align::left;
    out += " " + std::string(l ? ":" : "-") + std::string(w[i] - 2, '-') + std::string(r ? ":" : "-") + " |";
  }
  out += "\n";
  for (std::size_t k = 1; k < cells.size(); ++k) out += line(cells[k]);
  return out;
}

namespace {
std::string grouped(double v) {
  const std::string digits = fmt::format("{:.0f}", std::abs(v));
  std::string s = v <= -0.5 ? "-" : "";
  for (std::size_t i = 0; i < digits.size(); ++i) {
    if (i > 0 && (digits.size() - i) % 3 == 0) s += ',';
    s += digits[i];
  }
  return s;
}
}  // namespace

std::string estimate_markdown(const model_spec& m, const resolved_target& t, const training_config& c,
                              const memory_estimate& me, const throughput_estimate& te, const std::optional<error_band>& band,
                              const std::string& modules_note) {
  const parameter_count pc = count_parameters(m);
  std::string s = fmt::format("### {} on {} × {}{}\n\n", m.name, c.world_size, t.gpu.id,
                              t.instance ? fmt::format(" ({} × {})", c.world_size / std::max(1, c.gpus_per_node), t.instance->id) : "");
  s += fmt::format("{:.3f} B parameters; {}.\n\n", static_cast<double>(pc.total()) / 1e9, describe(c));
  s += fmt::format("**{}**: device peak {:.2f} GiB of {:.2f} GiB per GPU ({}), in the {} phase.\n\n",
                   me.fits ? "Fits" : "Does not fit", me.device_peak().in(gib), me.capacity.in(gib),
                   me.fits ? fmt::format("{:.1f}% free", 100 * me.headroom())
                           : fmt::format("{:.2f} GiB over", (me.device_peak() - me.capacity).in(gib)),
                   to_string(me.peak_phase));
  s += "Peak reserved: " + reserved_source_note(m, c, me) + ".\n\n";
  if (!modules_note.empty()) s += "Modules: " + modules_note + ".\n\n";
  if (const std::string note = allocator_setting_note(me); !note.empty()) s += "Allocator: " + note + ".\n\n";
  if (me.paged_states.raw() > 0) s += "Paged optimizer: " + paged_states_note(me) + ".\n\n";
  if (band) s += "Error band: " + band_line(me, te, *band) + ".\n\n";
  const auto& b = me.at_peak;
  const std::pair<const char*, bytes> parts[] = {
      {"parameters", b.parameters},           {"optimizer states", b.optimizer_states}, {"gradients", b.gradients},
      {"compute weights", b.compute_weights}, {"activations", b.activations},           {"logits / loss", b.logits},
      {"transient", b.transient},             {"workspace", b.workspace},               {"DDP buckets", b.ddp_buckets},
      {"allocator slack", me.peak_reserved - me.peak_allocated}, {"CUDA context + NCCL", me.non_pytorch}};
  std::vector<std::vector<std::string>> rows;
  for (const auto& [name, v] : parts)
    if (v.raw() > 0) rows.push_back({name, fmt::format("{:.2f}", v.in(gib)), fmt::format("{:.1f}%", 100 * (v / me.capacity))});
  rows.push_back({"**device peak**", fmt::format("**{:.2f}**", me.device_peak().in(gib)),
                  fmt::format("**{:.1f}%**", 100 * (me.device_peak() / me.capacity))});
  s += markdown_table({{"memory per GPU at the peak"}, {"GiB", md_align::right}, {"of capacity", md_align::right}}, rows);
  s += "\n";
  s += markdown_table({{"throughput"}, {"value", md_align::right}},
                      {{c.world_size == 1 ? std::string("tokens/s (1 GPU)") : fmt::format("tokens/s (all {} GPUs)", c.world_size),
                        grouped(te.tokens_per_s)},
                       {"tokens/s per GPU", grouped(te.tokens_per_s_per_gpu)},
                       {"step time", fmt::format("{:.3f} s", te.step.raw())},
                       {"MFU (bf16 peak, bf16-equivalent)", fmt::format("{:.1f}%", 100 * te.mfu)},
                       {fmt::format("MFU ({} peak)", to_string(c.format)), fmt::format("{:.1f}%", 100 * te.mfu_format)},
                       {"exposed communication", fmt::format("{:.3f} s", te.exposed_communication.raw())}});
  if (const std::string note = moe_host_note(m, c); !note.empty()) s += "\nNot modelled: " + md_escape(note) + ".\n";
  s += fmt::format("\n<sub>bwplan {}</sub>\n", version_string);
  return s;
}

std::string unreplayed_note(const plan_result& r) {
  return r.fitting_unreplayed > 0 ? fmt::format(" ({} near the line by the cheap bound, not replayed)", r.fitting_unreplayed)
                                  : std::string();
}

std::string plans_markdown(const model_spec& m, const std::string& where, const plan_request& req, const plan_result& r,
                           const std::string& explanation, const std::vector<std::optional<error_band>>& bands) {
  std::string s = fmt::format("### {} on {}\n\n", m.name, where);
  s += fmt::format("{} configurations evaluated, {} fit{} with {:.1f}% headroom.\n\n", r.evaluated, r.fitting, unreplayed_note(r),
                   100 * req.headroom);
  if (r.ranked.empty()) {
    s += "**No configuration fits.**\n";
  } else {
    // every setting in which the plans differ gets a column (differing_columns)
    std::vector<training_config> cfgs;
    for (const auto& p : r.ranked) cfgs.push_back(p.config);
    const std::vector<bool> show = differing_columns(cfgs, m.is_moe() ? std::vector<std::string_view>{"ep"} : std::vector<std::string_view>{});
    const auto R = md_align::right;
    std::vector<md_column> cols{{"#", R}};
    const auto proto = setting_columns(cfgs.front());
    for (std::size_t k = 0; k < proto.size(); ++k)
      if (show[k]) cols.push_back({std::string(proto[k].header), R});
    const auto band_of = [&](std::size_t i) { return i < bands.size() ? bands[i] : std::optional<error_band>{}; };
    bool any_band = false;
    for (std::size_t i = 0; i < r.ranked.size(); ++i) any_band = any_band || band_of(i).has_value();
    cols.push_back({"peak GiB", R});
    if (any_band) cols.push_back({"band GiB", R});
    for (const char* h : {"verdict", "tokens/s", "MFU(fmt)", "MFU(bf16)", "step s"}) cols.push_back({h, R});
    std::vector<std::vector<std::string>> rows;
    for (std::size_t i = 0; i < r.ranked.size(); ++i) {
      const plan_candidate& p = r.ranked[i];
      const std::optional<error_band> b = band_of(i);
      std::vector<std::string> row{std::to_string(i + 1)};
      const auto vals = setting_columns(p.config);
      for (std::size_t k = 0; k < vals.size(); ++k)
        if (show[k]) row.push_back(vals[k].value);
      row.push_back(fmt::format("{:.2f}", p.memory.device_peak().in(gib)));
      if (any_band) row.push_back(b ? fmt::format("{:.2f}", band_top(p.memory, b->memory).in(gib)) : std::string("-"));
      row.push_back(to_string(b ? verdict_of(p.memory, b->memory) : fit_verdict::fits));
      row.push_back(grouped(p.throughput.tokens_per_s));
      row.push_back(fmt::format("{:.1f}%", 100 * p.throughput.mfu_format));
      row.push_back(fmt::format("{:.1f}%", 100 * p.throughput.mfu));
      row.push_back(fmt::format("{:.3f}", p.throughput.step.raw()));
      rows.push_back(std::move(row));
    }
    s += markdown_table(cols, rows);
    if (!explanation.empty()) s += "\n**Why #1:** " + md_escape(explanation) + "\n";
    // what the model leaves out for the plans (Megatron MoE), as estimate's Markdown and recommend's table say
    if (const std::string note = moe_host_note(m, r.ranked[0].config); !note.empty()) s += "\nNot modelled: " + md_escape(note) + ".\n";
  }
  s += fmt::format("\n<sub>bwplan {}</sub>\n", version_string);
  return s;
}

std::string band_line(const memory_estimate& me, const throughput_estimate& te, const error_band& band) {
  const fit_verdict v = verdict_of(me, band.memory);
  const auto name = [](const std::string& from) {
    return from == "*/*/*" ? std::string("all measured runs (none of this GPU and stack)") : from;
  };
  std::string group;
  if (band.memory_from.empty() && band.tokens_per_s_from.empty())  // a stored group or a profile's band
    group = band.gpu == "*" ? name("*/*/*") : band.label();
  else if (band.memory_from == band.tokens_per_s_from)
    group = name(band.memory_from);
  else
    group = fmt::format("{} (peak reserved) and {} (tokens/s)", name(band.memory_from), name(band.tokens_per_s_from));
  return fmt::format("{}: with the error band of {} ({} runs, 90 %: peak reserved +{:.1f}%, tokens/s ±{:.1f}%) the device "
                     "peak may reach {:.2f} GiB of {:.2f} GiB (\"tight\" above {:.0f}% of it); tokens/s {} – {}",
                     to_string(v), group, band.rows, 100 * band.memory, 100 * band.tokens_per_s,
                     band_top(me, band.memory).in(gib), me.capacity.in(gib), 100 * (1 - tight_margin),
                     grouped(te.tokens_per_s * std::max(0.0, 1 - band.tokens_per_s)), grouped(te.tokens_per_s * (1 + band.tokens_per_s)));
}

/// What the throughput model leaves out for Megatron-Core MoE (docs/scaling.md §7, "MoE at small micro-batches"): the
/// host time of the dropless dispatch, which waits for the token counts on the host in every MoE layer's forward
/// (megatron/core/transformer/moe/token_dispatcher.py `_maybe_dtoh_and_synchronize`); "" for other plans.
std::string moe_host_note(const model_spec& m, const training_config& c) {
  if (!m.is_moe() || c.stack != training_stack::megatron) return {};
  return "the host time of Megatron-Core's dropless MoE dispatch (a wait for the token counts on the host in every MoE "
         "layer, not hidden at small micro-batches); without CUDA graphs Megatron-Bridge measured Qwen3-30B-A3B at 0.37-0.39 "
         "of this model's tokens/s at micro-batch 1 x 4096 (B200), 0.76-0.84 at 4 x 4096 (GB200), 0.90-0.92 at 8 x 4096 "
         "(docs/scaling.md section 7)";
}

}  // namespace bwplan::cli
