// SPDX-License-Identifier: Apache-2.0
// Parameter sweeps: --vary parsing, evaluation, CSV and JSON.
#include "sweep.hpp"

#include <bwplan/io/estimate.hpp>

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <cstdint>
#include <set>

namespace bwplan::cli {

namespace {

constexpr std::int64_t max_points = 100000;

const std::vector<std::string> integer_keys = {"mbs", "seq", "grad-accum", "nodes", "ac-every", "tp", "cp", "ep", "lora-rank", "pp", "vpp"};

bool is_integer_key(const std::string& k) {
  return std::find(integer_keys.begin(), integer_keys.end(), k) != integer_keys.end();
}

std::int64_t parse_int(const std::string& spec, const std::string& text) {
  std::size_t pos = 0;
  std::int64_t v = 0;
  try {
    v = std::stoll(text, &pos);
  } catch (const std::exception&) {
    pos = 0;
  }
  if (text.empty() || pos != text.size())
    throw invalid_request("--vary " + spec + ": '" + text + "' is not an integer (at most " + std::to_string(INT64_MAX) + ")");
  return v;
}

std::vector<std::string> split(const std::string& s, char sep) {
  std::vector<std::string> parts;
  std::size_t start = 0;
  while (true) {
    const std::size_t p = s.find(sep, start);
    parts.push_back(s.substr(start, p == std::string::npos ? std::string::npos : p - start));
    if (p == std::string::npos) break;
    start = p + 1;
  }
  return parts;
}

void expand_integers(const std::string& spec, const std::string& item, std::vector<std::string>& out) {
  const std::size_t dots = item.find("..");
  if (dots == std::string::npos) {
    out.push_back(std::to_string(parse_int(spec, item)));
    return;
  }
  const std::string lo_s = item.substr(0, dots);
  std::string hi_s = item.substr(dots + 2);
  std::string step_s;
  if (const std::size_t colon = hi_s.find(':'); colon != std::string::npos) {
    step_s = hi_s.substr(colon + 1);
    hi_s = hi_s.substr(0, colon);
  }
  const std::int64_t lo = parse_int(spec, lo_s), hi = parse_int(spec, hi_s);
  if (lo > hi) throw invalid_request(fmt::format("--vary {}: empty range {}..{}", spec, lo, hi));
  const bool geometric = !step_s.empty() && (step_s[0] == 'x' || step_s[0] == '*');
  const std::int64_t step = step_s.empty() ? 1 : parse_int(spec, geometric ? step_s.substr(1) : step_s);
  if (geometric ? step < 2 : step < 1)
    throw invalid_request(fmt::format("--vary {}: the {} must be >= {}, got {}", spec, geometric ? "factor" : "step",
                                      geometric ? 2 : 1, step));
  if (geometric && lo < 1) throw invalid_request(fmt::format("--vary {}: a geometric range must start at >= 1", spec));
  for (std::int64_t v = lo;;) {
    out.push_back(std::to_string(v));
    if (static_cast<std::int64_t>(out.size()) > max_points)
      throw invalid_request(fmt::format("--vary {}: more than {} values", spec, max_points));
    // the next value, without signed overflow
    if (geometric ? v > hi / step : v > hi - step) break;
    v = geometric ? v * step : v + step;
    if (v > hi) break;
  }
}

void check_member(const std::string& spec, const std::string& v, const std::vector<std::string>& allowed) {
  std::string list;
  for (const auto& a : allowed) {
    if (v == a) return;
    list += (list.empty() ? "" : ", ") + a;
  }
  std::string msg = "--vary " + spec + ": '" + v + "' is not one of " + list;
  throw invalid_request(msg);
}

/// Sets `key` to `v` on plan `p` (values were checked by parse_vary).
void apply(plan& p, const std::string& key, const std::string& v) {
  training_config& c = p.training;
  if (key == "mbs") c.micro_batch = std::stoll(v);
  else if (key == "seq") c.seq_len = std::stoll(v);
  else if (key == "grad-accum") { c.grad_accum = std::stoll(v); p.global_batch.reset(); }
  else if (key == "nodes") p.target.nodes = static_cast<int>(std::min<std::int64_t>(std::stoll(v), plan_limits::max_nodes + 1));
  else if (key == "instance") { p.target.instance = v; p.target.gpu.clear(); }
  else if (key == "ac-every") c.ac = checkpointing::full(static_cast<int>(std::min<std::int64_t>(std::stoll(v), plan_limits::max_ac_every + 1)));
  else if (key == "ac") c.ac = *parse_checkpointing(v);
  else if (key == "sharding") c.shard = *parse_sharding(v);
  else if (key == "pp-schedule") c.schedule = *parse_pp_schedule(v);
  else if (key == "loss") c.loss = v == "chunked" ? loss_impl::chunked : v == "liger" ? loss_impl::liger : loss_impl::standard;
  else if (key == "master") c.master = v == "bf16" ? master_weights::bf16 : master_weights::fp32;
  else if (key == "optimizer-impl") c.optimizer = v == "foreach" ? optimizer_impl::foreach : optimizer_impl::fused;
  else if (key == "precision") c.format = *parse_format(v);
  else if (key == "finetune") c.finetune = *parse_finetune(v);
  else if (key == "optimizer") c.optim = *parse_optimizer(v);
  else if (key == "lora-rank") c.lora.rank = static_cast<int>(std::min<std::int64_t>(std::stoll(v), 65537));
  else if (key == "stack") c.stack = *parse_stack(v);
  else if (key == "compile") c.compile = v == "true";
  else if (key == "expandable-segments") c.expandable_segments = v == "true";
  else if (key == "optimizer-in-backward") c.optimizer_in_backward = v == "true";
  else if (key == "sequence-parallel") c.sequence_parallel = v == "true";
  else if (key == "fsdp-embedding-units") c.fsdp_embedding_units = v == "true";
  else if (key == "tp-comm-overlap") c.tp_comm_overlap = v == "true";
  else if (key == "moe-a2a-overlap") c.moe_a2a_overlap = v == "true";
  else if (key == "modules") c.modules = *parse_module_kernels(v);
  else if (key == "offload") {  // a set joined by '+' (',' separates the values of --vary)
    std::string list = v;
    std::replace(list.begin(), list.end(), '+', ',');
    c.offload = *parse_offload(list);
  }
  else if (key == "tp" || key == "cp" || key == "ep" || key == "pp" || key == "vpp") {
    const int d = static_cast<int>(std::min<std::int64_t>(std::stoll(v), plan_limits::max_degree + 1));
    (key == "tp" ? c.tp : key == "cp" ? c.cp : key == "ep" ? c.ep : key == "pp" ? c.pp : c.vpp) = d;
  }
}

std::string csv_cell(const std::string& s) {
  if (s.find_first_of(",\"\n\r") == std::string::npos) return s;
  std::string q = "\"";
  for (char ch : s) q += ch == '"' ? std::string("\"\"") : std::string(1, ch);
  return q + "\"";
}

}  // namespace

const std::vector<std::string>& sweep_keys() {
  static const std::vector<std::string> keys = {"mbs",      "seq",      "grad-accum", "nodes",  "ac",
                                                "ac-every", "sharding", "loss",       "master", "optimizer-impl",
                                                "precision", "tp",      "cp",         "ep",     "instance",
                                                "finetune",  "optimizer", "lora-rank", "stack",  "compile",
                                                "expandable-segments", "pp", "pp-schedule", "vpp", "offload",
                                                "optimizer-in-backward", "sequence-parallel", "fsdp-embedding-units",
                                                "tp-comm-overlap", "moe-a2a-overlap", "modules"};
  return keys;
}

sweep_axis parse_vary(const std::string& spec) {
  const std::size_t eq = spec.find('=');
  if (eq == std::string::npos || eq == 0)
    throw invalid_request("--vary " + spec + ": expected KEY=VALUES, e.g. mbs=1..64 or seq=2048,4096");
  sweep_axis a;
  a.key = spec.substr(0, eq);
  std::replace(a.key.begin(), a.key.end(), '_', '-');
  if (a.key == "micro-batch") a.key = "mbs";
  if (a.key == "seq-len") a.key = "seq";
  const auto& keys = sweep_keys();
  if (std::find(keys.begin(), keys.end(), a.key) == keys.end()) {
    std::string list;
    for (const auto& k : keys) list += (list.empty() ? "" : ", ") + k;
    std::string msg = "--vary " + spec + ": unknown key '" + a.key + "'";
    if (auto m = closest_match(a.key, keys)) msg += " (did you mean '" + *m + "'?)";
    throw invalid_request(msg + "; known: " + list);
  }
  const std::string values = spec.substr(eq + 1);
  if (values.empty()) throw invalid_request("--vary " + spec + ": no values");
  std::vector<std::string> formats;
  for (const auto& p : precisions()) formats.emplace_back(p.name);
  for (const std::string& item : split(values, ',')) {
    if (item.empty()) throw invalid_request("--vary " + spec + ": empty value");
    if (is_integer_key(a.key)) {
      expand_integers(spec, item, a.values);
      // the plan's range, with the value given (apply() caps a huge value one past the limit for the rule to refuse,
      // which then named the capped value, "got 4097" for nodes=99999999: an audit)
      const std::int64_t hi = a.key == "nodes" ? plan_limits::max_nodes
                              : a.key == "ac-every" ? plan_limits::max_ac_every
                              : a.key == "lora-rank" ? 65536
                              : (a.key == "tp" || a.key == "cp" || a.key == "ep" || a.key == "pp" || a.key == "vpp") ? plan_limits::max_degree
                              : 0;
      for (const auto& v : a.values)
        if (hi > 0 && std::stoll(v) > hi)
          throw invalid_request(fmt::format("--vary {}: {} must be at most {}, got {}{}", spec, a.key, hi, v,
                                            v == item ? std::string() : " (of " + item + ")"));
    }
    else if (a.key == "ac") {
      if (parse_checkpointing(item)) a.values.push_back(to_string(*parse_checkpointing(item)));
      else if (!item.empty() && (std::isalpha(static_cast<unsigned char>(item[0])) != 0))
        throw invalid_request("--vary " + spec + ": '" + item + "' is not one of none, full, every-K, selective-op, selective-attn or a block interval K");
      else {
        std::vector<std::string> ks;
        expand_integers(spec, item, ks);
        for (const auto& k : ks) {
          const std::int64_t n = std::stoll(k);
          if (n < 0 || n > plan_limits::max_ac_every)
            throw invalid_request("--vary " + spec + ": a checkpoint interval must be between 0 and " +
                                  std::to_string(plan_limits::max_ac_every) + ", got " + k);
          a.values.push_back(to_string(n == 0 ? checkpointing::none() : checkpointing::full(static_cast<int>(n))));
        }
      }
    } else if (a.key == "sharding") check_member(spec, item, {"none", "full", "hybrid", "grad-op", "optimizer"});
    else if (a.key == "pp-schedule") check_member(spec, item, {"1f1b", "interleaved"});
    else if (a.key == "loss") check_member(spec, item, {"standard", "chunked", "liger"});
    else if (a.key == "master") check_member(spec, item, {"fp32", "bf16"});
    else if (a.key == "optimizer-impl") check_member(spec, item, {"fused", "foreach"});
    else if (a.key == "precision") check_member(spec, item, formats);
    else if (a.key == "finetune") check_member(spec, item, {"full", "lora", "qlora"});
    else if (a.key == "optimizer") check_member(spec, item, {"adamw", "adamw-8bit", "paged-adamw-8bit", "adafactor", "sgd", "lion"});
    else if (a.key == "stack") check_member(spec, item, {"hf", "torchtitan", "torchtune", "megatron"});
    else if (a.key == "modules") check_member(spec, item, {"fused", "transformers"});
    else if (a.key == "compile" || a.key == "expandable-segments" || a.key == "optimizer-in-backward" ||
             a.key == "sequence-parallel" || a.key == "fsdp-embedding-units" || a.key == "tp-comm-overlap" ||
             a.key == "moe-a2a-overlap")
      check_member(spec, item, {"true", "false"});
    else if (a.key == "offload") {  // none, or a set joined by '+': optimizer+params
      std::string list = item;
      std::replace(list.begin(), list.end(), '+', ',');
      const auto off = parse_offload(list);
      if (!off)
        throw invalid_request("--vary " + spec + ": '" + item + "' is not none or a set of optimizer, params, activations joined by '+'");
      std::string canon = offload_to_string(*off);
      std::replace(canon.begin(), canon.end(), ',', '+');
      a.values.push_back(canon);
      continue;
    }
    if (!is_integer_key(a.key) && a.key != "ac") a.values.push_back(item);
  }
  return a;
}

std::int64_t sweep_size(const std::vector<sweep_axis>& axes) {
  std::int64_t n = 1;
  for (const auto& a : axes) {
    n *= static_cast<std::int64_t>(a.values.size());
    if (n > max_points) return n;
  }
  return n;
}

std::vector<sweep_point> run_sweep(const hardware_catalog& cat, const model_spec& m, const resolved_plan& base,
                                   const std::vector<sweep_axis>& axes,
                                   const std::function<void(std::int64_t, std::int64_t)>& on_point, const calibration_profile* profile) {
  std::set<std::string> seen;
  for (const auto& a : axes) {
    if (!seen.insert(a.key).second) throw invalid_request("--vary " + a.key + ": given twice; list all values in one --vary");
    if (a.values.empty()) throw invalid_request("--vary " + a.key + ": no values");
  }
  if (seen.count("ac") && seen.count("ac-every"))
    throw invalid_request("--vary ac and --vary ac-every overlap; use --vary ac=none,1,2,4");
  if ((seen.count("nodes") || seen.count("instance")) && !base.target.instance && !seen.count("instance"))
    throw invalid_request("--vary nodes needs an --instance (a bare --gpu has no nodes)");
  const std::int64_t total = sweep_size(axes);
  if (total > max_points)
    throw invalid_request(fmt::format("--vary: {} points is more than the {} a sweep may have", total, max_points));
  std::vector<sweep_point> points;
  points.reserve(static_cast<std::size_t>(total));
  std::vector<std::size_t> idx(axes.size(), 0);
  for (std::int64_t done = 0; done < total; ++done) {
    sweep_point pt;
    pt.p = base.p;
    std::string where;
    for (std::size_t i = 0; i < axes.size(); ++i) {
      apply(pt.p, axes[i].key, axes[i].values[idx[i]]);
      where += (i ? " " : "") + axes[i].key + "=" + axes[i].values[idx[i]];
    }
    auto bad = [&](const std::string& what) { return invalid_request("--vary: the point " + where + ": " + what); };
    // the same resolution and rules as any plan
    pt.target = base.target;
    if (seen.count("instance")) {
      try {
        pt.target.instance = cat.instance(pt.p.target.instance);
      } catch (const error& e) { throw bad(e.what()); }
      pt.target.gpu = cat.gpu(pt.target.instance->gpu);
      pt.p.target.instance = pt.target.instance->id;
      try {  // the plan's power limit and attention kernel, as resolve_plan applied them to the base (a review: dropped here)
        apply_plan_gpu_settings(pt.p.target, pt.target.gpu);
      } catch (const error& e) { throw bad(e.what()); }
    }
    for (const auto& v : resolve_world(pt.p, pt.target.instance ? pt.target.instance->gpus_per_node : 0,
                                       pt.target.instance ? pt.target.instance->nvlink_domain_gpus : 0))
      throw bad(flag_error(v).what());
    if (seen.count("nodes") || seen.count("instance")) {
      if (base.p.training.shard == default_sharding(base.p.training.world_size, base.p.training.stack) && !seen.count("sharding"))
        pt.p.training.shard = default_sharding(pt.p.training.world_size, pt.p.training.stack);
    }
    if (!supports(pt.target.gpu, pt.p.training.format))
      throw bad(std::string("--precision ") + to_string(pt.p.training.format) + " is not supported on " + pt.target.gpu.id);
    if (pt.p.global_batch)
      for (const auto& v : apply_global_batch(pt.p)) throw bad(flag_error(v).what());
    for (const auto& v : plan_violations(m, pt.p)) throw bad(flag_error(v).what());
    pt.config = pt.p.training;
    points.push_back(std::move(pt));
    for (std::size_t i = axes.size(); i-- > 0;) {  // odometer: the last axis fastest
      if (++idx[i] < axes[i].values.size()) break;
      idx[i] = 0;
    }
  }
  // every point is resolved and checked before any is estimated: a broken point is reported at once, not after
  // the estimates of the points before it (mbs=1..100000 failed at mbs=65537 after two minutes)
  std::int64_t done = 0;
  for (auto& pt : points) {
    const calibration_constants k = constants_for(profile, pt.target.gpu.id, to_string(pt.config.stack));  // --calibration
    pt.memory = estimate_memory(m, pt.config, pt.target.gpu, k.overheads);
    pt.throughput = estimate_throughput(m, pt.config, pt.target.gpu, pt.target.instance_ptr(), k.throughput);
    if (on_point) on_point(++done, total);
  }
  return points;
}

const std::vector<std::string>& sweep_columns() {
  static const std::vector<std::string> cols = {
      "model",       "gpu",          "instance",   "nodes",          "world_size",       "mbs",
      "seq",         "grad_accum",   "dp",         "global_batch_tokens", "ac",          "sharding",
      "tp",          "cp",           "ep",         "precision",      "master",           "optimizer_impl",
      "loss",        "peak_phase",   "peak_allocated_gib", "peak_reserved_gib", "device_peak_gib", "capacity_gib",
      "headroom",    "fits",         "tokens_per_s", "tokens_per_s_per_gpu", "step_s",      "mfu",
      "finetune",    "optimizer",    "lora_rank",  "lora_targets", "stack",     "compile",          "expandable_segments",
      "pp",          "pp_schedule",  "vpp",        "offload",        "optimizer_in_backward", "sequence_parallel",
      "fsdp_embedding_units", "tp_comm_overlap", "moe_a2a_overlap", "modules",
      "verdict",     "band_device_peak_gib", "tokens_per_s_low", "tokens_per_s_high"};
  return cols;
}

std::vector<std::string> sweep_row(const model_spec& m, const sweep_point& p) {
  const auto& c = p.config;
  const auto& me = p.memory;
  const auto& te = p.throughput;
  return {m.name,
          p.target.gpu.id,
          p.target.instance ? p.target.instance->id : "",
          std::to_string(p.p.target.nodes),
          std::to_string(c.world_size),
          std::to_string(c.micro_batch),
          std::to_string(c.seq_len),
          std::to_string(c.grad_accum),
          std::to_string(c.dp()),
          std::to_string(global_batch_tokens(c)),
          to_string(c.ac),
          to_string(c.shard),
          std::to_string(c.tp),
          std::to_string(c.cp),
          std::to_string(c.ep),
          to_string(c.format),
          to_string(c.master),
          to_string(c.optimizer),
          to_string(c.loss),
          to_string(me.peak_phase),
          fmt::format("{:.4f}", me.peak_allocated.in(gib)),
          fmt::format("{:.4f}", me.peak_reserved.in(gib)),
          fmt::format("{:.4f}", me.device_peak().in(gib)),
          fmt::format("{:.4f}", me.capacity.in(gib)),
          fmt::format("{:.4f}", me.headroom()),
          me.fits ? "true" : "false",
          fmt::format("{:.1f}", te.tokens_per_s),
          fmt::format("{:.1f}", te.tokens_per_s_per_gpu),
          fmt::format("{:.6f}", te.step.raw()),
          fmt::format("{:.4f}", te.mfu),
          to_string(c.finetune),
          to_string(c.optim),
          c.adapters() ? std::to_string(c.lora.rank) : "",
          c.adapters() ? lora_targets_to_string(c.lora.targets) : "",
          to_string(c.stack),
          c.compile ? "true" : "false",
          c.expandable_segments ? "true" : "false",
          std::to_string(c.pp),
          to_string(c.schedule),
          std::to_string(c.vpp),
          offload_to_string(c.offload),
          c.optimizer_in_backward ? "true" : "false",
          c.sequence_parallel ? "true" : "false",
          c.fsdp_embedding_units ? "true" : "false",
          c.tp_comm_overlap ? "true" : "false",
          c.moe_a2a_overlap ? "true" : "false",
          to_string(c.modules),
          to_string(p.band ? verdict_of(me, p.band->memory) : me.fits ? fit_verdict::fits : fit_verdict::does_not_fit),
          p.band ? fmt::format("{:.4f}", band_top(me, p.band->memory).in(gib)) : std::string(),
          p.band ? fmt::format("{:.1f}", te.tokens_per_s * std::max(0.0, 1 - p.band->tokens_per_s)) : std::string(),
          p.band ? fmt::format("{:.1f}", te.tokens_per_s * (1 + p.band->tokens_per_s)) : std::string()};
}

std::string sweep_csv(const model_spec& m, const std::vector<sweep_point>& points) {
  std::string out;
  auto line = [&](const std::vector<std::string>& cells) {
    for (std::size_t i = 0; i < cells.size(); ++i) {  // (two appends: GCC 12 warns -Wstringop-overflow on `"," + cell`)
      if (i) out += ',';
      out += csv_cell(cells[i]);
    }
    out += "\n";
  };
  line(sweep_columns());
  for (const auto& p : points) line(sweep_row(m, p));
  return out;
}

nlohmann::ordered_json sweep_json(const model_spec& m, const resolved_target& t, const std::vector<sweep_axis>& axes,
                                  const std::vector<sweep_point>& points) {
  nlohmann::ordered_json j;
  j["model"] = m.name;
  j["hardware"] = {{"gpu", t.gpu.id}, {"instance", t.instance ? t.instance->id : ""}};
  if (t.gpu.power_limit_w > 0) j["hardware"]["power_limit_w"] = t.gpu.power_limit_w;  // the base's (a --vary instance point: its GPU's)
  j["hardware"]["attention_kernel"] = to_string(t.gpu.attention);
  j["vary"] = nlohmann::ordered_json::object();
  for (const auto& a : axes) j["vary"][a.key] = a.values;
  j["points"] = nlohmann::ordered_json::array();
  for (const auto& p : points) {
    const auto& c = p.config;
    const auto& me = p.memory;
    const auto& te = p.throughput;
    j["points"].push_back({{"gpu", p.target.gpu.id},
                           {"instance", p.target.instance ? p.target.instance->id : ""},
                           {"nodes", p.p.target.nodes},
                           {"world_size", c.world_size},
                           {"mbs", c.micro_batch},
                           {"seq", c.seq_len},
                           {"grad_accum", c.grad_accum},
                           {"dp", c.dp()},
                           {"global_batch_tokens", global_batch_tokens(c)},
                           {"ac", to_string(c.ac)},
                           {"sharding", to_string(c.shard)},
                           {"tp", c.tp},
                           {"cp", c.cp},
                           {"ep", c.ep},
                           {"pp", c.pp},
                           {"pp_schedule", to_string(c.schedule)},
                           {"vpp", c.vpp},
                           {"precision", to_string(c.format)},
                           {"master", to_string(c.master)},
                           {"optimizer_impl", to_string(c.optimizer)},  // the plan file's names: optimizer_impl, optimizer
                           {"loss", to_string(c.loss)},
                           {"finetune", to_string(c.finetune)},
                           {"optimizer", to_string(c.optim)},
                           {"stack", to_string(c.stack)},
                           {"compile", c.compile},
                           {"expandable_segments", c.expandable_segments},
                           {"offload", offload_to_string(c.offload)},
                           {"optimizer_in_backward", c.optimizer_in_backward},
                           {"sequence_parallel", c.sequence_parallel},
                           {"fsdp_embedding_units", c.fsdp_embedding_units},
                           {"tp_comm_overlap", c.tp_comm_overlap},
                           {"moe_a2a_overlap", c.moe_a2a_overlap},
                           {"modules", to_string(c.modules)},
                           {"peak_phase", to_string(me.peak_phase)},
                           {"peak_allocated_gib", me.peak_allocated.in(gib)},
                           {"peak_reserved_gib", me.peak_reserved.in(gib)},
                           {"device_peak_gib", me.device_peak().in(gib)},
                           {"capacity_gib", me.capacity.in(gib)},
                           {"headroom", me.headroom()},
                           {"fits", me.fits},
                           {"tokens_per_s", te.tokens_per_s},
                           {"tokens_per_s_per_gpu", te.tokens_per_s_per_gpu},
                           {"step_s", te.step.raw()},
                           {"mfu", te.mfu}});
    if (c.adapters()) {  // the adapters of a LoRA / QLoRA point (absent for a full fine-tune: no nulls)
      j["points"].back()["lora_rank"] = c.lora.rank;
      j["points"].back()["lora_targets"] = lora_targets_to_string(c.lora.targets);
    }
    if (p.band) io::add_band_json(j["points"].back(), me, te, p.band);
    else j["points"].back()["verdict"] = to_string(me.fits ? fit_verdict::fits : fit_verdict::does_not_fit);
  }
  return j;
}

}  // namespace bwplan::cli
