// bwplan: GPU memory and throughput planning for LLM training
// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <bwplan/hardware.hpp>
#include <bwplan/memory.hpp>
#include <bwplan/model.hpp>
#include <bwplan/plan.hpp>
#include <bwplan/precision.hpp>
#include <bwplan/throughput.hpp>
#include <bwplan/training.hpp>

#include <algorithm>
#include <cstdint>
#include <functional>
#include <optional>
#include <vector>

namespace bwplan {

/// What `recommend` searches over, for one instance type and node count.
struct plan_request {
  int nodes = 1;                                   ///< instances
  std::vector<std::int64_t> seq_lens{4096};        ///< candidate sequence lengths, tokens
  std::int64_t global_batch_tokens = 4'194'304;    ///< target tokens per optimizer step (whole job)
  std::int64_t min_micro_batch = 1;                ///< smallest micro-batch size tried (= max to pin one)
  std::int64_t max_micro_batch = 256;              ///< largest micro-batch size tried (powers of two from the smallest)
  double headroom = 0.05;                          ///< share of capacity kept free at the peak
  std::vector<checkpointing> checkpointings{checkpointing::none(), checkpointing::full(), checkpointing::full(2),
                                            checkpointing::full(4), checkpointing::selective_op()};  ///< checkpointing tried
  std::vector<compute_format> formats{compute_format::bf16};  ///< GEMM formats tried (each must be supported by the GPU)
  std::vector<sharding> shardings{sharding::none, sharding::full};  ///< hybrid is tried only across nodes (one node: = full)
  std::vector<int> tps{1};                         ///< tensor-parallel degrees tried (those dividing heads and a node)
  std::vector<loss_impl> losses{loss_impl::standard, loss_impl::chunked};
  master_weights master = master_weights::fp32;
  optimizer_impl optimizer = optimizer_impl::fused;
  finetune_mode finetune = finetune_mode::full;     ///< full fine-tune, LoRA or QLoRA (adapters: tp 1 and bf16 only)
  lora_settings lora;                               ///< the adapters of a LoRA / QLoRA search (the user's rank and targets)
  std::vector<optimizer_kind> optimizers{optimizer_kind::adamw};  ///< optimizers tried (`--optimizer auto`: all)
  training_stack stack = training_stack::hf;        ///< the training stack (megatron: sharding none and the standard loss only)
  bool compile = false;                             ///< torch.compile as the stack applies it
  bool expandable_segments = false;                 ///< every candidate runs with `expandable_segments:True`
  /// Without expandable_segments: a candidate over the line whose replayed step fits with `expandable_segments:True`
  /// is kept with that setting (the plan carries it; the SageMaker job sets PYTORCH_CUDA_ALLOC_CONF).
  bool allow_expandable_segments = true;
  /// Called after each evaluated configuration with (evaluated so far, configurations in the search), e.g.
  /// to draw a progress bar; empty: not called. It must not throw.
  std::function<void(std::int64_t, std::int64_t)> progress;
  /// Which configurations the search may return at all (`recommend --emit sagemaker`: those the reference
  /// trainer runs); empty: all. Asked before a configuration is evaluated; one it rejects is neither evaluated
  /// nor counted. It must not throw.
  std::function<bool(const training_config&)> admit;
};

/// Number of configurations search_plans evaluates for `req` on `world` GPUs (`eps`: expert-parallel
/// degrees tried, 1 for dense models; see detail::ep_candidates).
[[nodiscard]] inline std::int64_t plan_search_size(const plan_request& req, int world, std::size_t eps = 1) {
  std::int64_t n = 0;
  const auto per_mbs = static_cast<std::int64_t>(req.shardings.size() * req.tps.size() * req.checkpointings.size() * req.losses.size() *
                                                 eps * std::max<std::size_t>(1, req.formats.size()) *
                                                 std::max<std::size_t>(1, req.optimizers.size()));
  for (std::int64_t seq : req.seq_lens) {
    if (seq < 1) continue;
    for (std::int64_t mbs = req.min_micro_batch; mbs >= 1 && mbs <= req.max_micro_batch; mbs *= 2) {
      if (mbs * seq * world > req.global_batch_tokens && mbs > req.min_micro_batch) break;
      n += per_mbs;
    }
  }
  return n;
}

/// One evaluated configuration.
struct plan_candidate {
  training_config config;
  memory_estimate memory;
  throughput_estimate throughput;
};

/// Outcome of a search.
struct plan_result {
  std::vector<plan_candidate> ranked;  ///< fitting candidates within headroom, best tokens/s first (at most `top`)
  std::int64_t evaluated = 0;          ///< configurations evaluated
  std::int64_t fitting = 0;            ///< configurations that fit with the headroom
  std::vector<plan_candidate> best_per_format;  ///< the best fitting candidate of each format tried (in request order)
};

/// Searches micro-batch size (powers of two), activation checkpointing, sharding, loss implementation, optimizer,
/// expert parallelism (MoE models only: detail::ep_candidates) and sequence length; gradient accumulation follows from the global batch
/// (`ceil(global_batch_tokens / (mbs · seq · world))`). Keeps candidates whose device peak is at most
/// (1 − headroom) · capacity and ranks them by tokens/s. Returns at most `top` candidates; with
/// `best_per_seq`, the best of each sequence length instead. Throws invalid_request for an empty search.
[[nodiscard]] inline plan_result search_plans(const model_spec& m, const gpu_spec& gpu, const instance_spec* inst,
                                              const plan_request& req, std::size_t top, bool best_per_seq = false,
                                              const runtime_overheads& rt = {}, const throughput_calibration& k = {}) {
  auto fail = [](const char* field, std::string msg) { return plan_error({field, std::string("/") + field, std::move(msg)}); };
  if (req.nodes < 1) throw fail("nodes", "must be >= 1, got " + std::to_string(req.nodes));
  if (req.global_batch_tokens < 1) throw fail("global_batch_tokens", "must be >= 1");
  if (req.seq_lens.empty()) throw fail("seq_len", "no sequence length to try");
  if (!(req.headroom >= 0 && req.headroom < 1)) throw fail("headroom", "must be in [0, 1)");
  if (req.formats.empty()) throw fail("precision", "no format to try");
  for (compute_format f : req.formats)
    if (!supports(gpu, f))
      throw fail("precision", std::string(to_string(f)) + " is not supported on " + gpu.id + " (" + gpu.architecture + ")");
  std::vector<plan_candidate> per_format(req.formats.size());
  std::vector<bool> have_format(req.formats.size(), false);
  const int per_node = inst ? inst->gpus_per_node : 1;
  const int world = req.nodes * per_node;
  const std::vector<int> eps = detail::ep_candidates(m, world);  // MoE: expert parallelism too
  // the search replays the caching allocator only for candidates near the fit line (the cheap bound elsewhere)
  runtime_overheads rt_search = rt;
  if (rt_search.replay == runtime_overheads::replay_policy::always)
    rt_search.replay = runtime_overheads::replay_policy::near_fit_line;
  const std::int64_t total = req.progress ? plan_search_size(req, world, eps.size()) : 0;
  plan_result res;
  std::vector<plan_candidate> keep;
  const std::size_t cap = best_per_seq ? req.seq_lens.size() : std::max<std::size_t>(top, 1);
  auto better = [](const plan_candidate& a, const plan_candidate& b) {
    return a.throughput.tokens_per_s > b.throughput.tokens_per_s;
  };
  for (std::int64_t seq : req.seq_lens) {
    if (seq < 1) throw fail("seq_len", "must be >= 1, got " + std::to_string(seq));
    if (m.positions > 0 && seq > m.positions) continue;  // learned positions (gpt2) cap the sequence
    plan_candidate best_seq{};
    bool have_seq = false;
    for (std::int64_t mbs = req.min_micro_batch; mbs >= 1 && mbs <= req.max_micro_batch; mbs *= 2) {
      const std::int64_t tokens = mbs * seq * world;
      if (tokens > req.global_batch_tokens && mbs > req.min_micro_batch) break;
      for (sharding sh : req.shardings) {
       for (int tp : req.tps) {
        if (tp < 1 || tp > per_node || world % tp != 0 || m.heads % tp != 0 || m.kv_heads % tp != 0) continue;
        if (sh == sharding::hybrid && req.nodes < 2) continue;
        for (const checkpointing& ac : req.checkpointings) {
          for (loss_impl loss : req.losses) {
           for (std::size_t fi = 0; fi < req.formats.size(); ++fi) {
          for (int ep : eps) {
           if ((world / tp) % ep != 0) continue;  // experts are split over ep x tp GPUs
           for (optimizer_kind opt : req.optimizers) {
            // adapters: tp 1 and bf16 (violations of training_config)
            if (req.finetune != finetune_mode::full && (tp != 1 || req.formats[fi] != compute_format::bf16)) continue;
            // Megatron: DDP over its main-gradient buffer and its own cross-entropy (violations of training_config)
            if (req.stack == training_stack::megatron && (sh != sharding::none || loss != loss_impl::standard)) continue;
            training_config c;
            c.format = req.formats[fi];
            c.ep = ep;
            c.micro_batch = mbs;
            c.seq_len = seq;
            c.world_size = world;
            c.gpus_per_node = per_node;
            c.shard = sh;
            c.tp = tp;
            c.master = req.master;
            c.optimizer = req.optimizer;
            c.optim = opt;
            c.finetune = req.finetune;
            if (req.finetune != finetune_mode::full) c.lora = req.lora;
            c.loss = loss;
            c.ac = ac;
            c.stack = req.stack;
            c.compile = req.compile;
            c.expandable_segments = req.expandable_segments;
            const std::int64_t step_tokens = tokens / tp;  // data-parallel degree world / tp
            c.grad_accum = std::max<std::int64_t>(1, (req.global_batch_tokens + step_tokens - 1) / step_tokens);
            if (req.admit && !req.admit(c)) continue;
            ++res.evaluated;
            if (req.progress) req.progress(res.evaluated, total);
            memory_estimate me = estimate_memory(m, c, gpu, rt_search);
            if (me.device_peak() > (1.0 - req.headroom) * me.capacity) {
              // only the allocator setting in the way: the replayed step with expandable segments
              if (!me.replayed || c.expandable_segments || !req.allow_expandable_segments) continue;
              training_config ce = c;
              ce.expandable_segments = true;
              memory_estimate mx = estimate_memory(m, ce, gpu, rt_search);
              if (mx.device_peak() > (1.0 - req.headroom) * mx.capacity) continue;
              c = ce;
              me = mx;
            }
            ++res.fitting;
            plan_candidate pc{c, me, estimate_throughput(m, c, gpu, inst, k)};
            if (!have_format[fi] || better(pc, per_format[fi])) { per_format[fi] = pc; have_format[fi] = true; }
            if (best_per_seq) {
              if (!have_seq || better(pc, best_seq)) { best_seq = pc; have_seq = true; }
              continue;
            }
            if (keep.size() < cap || better(pc, keep.back())) {
              keep.insert(std::upper_bound(keep.begin(), keep.end(), pc, better), pc);
              if (keep.size() > cap) keep.pop_back();
            }
           }
           }
          }
          }
        }
       }
      }
    }
    if (best_per_seq && have_seq) keep.push_back(best_seq);
  }
  if (best_per_seq) std::stable_sort(keep.begin(), keep.end(), better);
  res.ranked = std::move(keep);
  for (std::size_t fi = 0; fi < req.formats.size(); ++fi)
    if (have_format[fi]) res.best_per_format.push_back(per_format[fi]);
  return res;
}

/// The search space `recommend` explores on `gpu` with `nodes` instances: every sharding mode (hybrid only
/// across nodes), tp 1/2/4/8, the checkpointing modes of plan_request, both losses, and `formats` (default:
/// every format `gpu` supports). `bwplan check` compares a plan with the best of this same search.
[[nodiscard]] inline plan_request full_search(const gpu_spec& gpu, int nodes, std::vector<compute_format> formats = {}) {
  plan_request req;
  req.nodes = nodes;
  req.shardings = {sharding::none, sharding::full, sharding::hybrid, sharding::grad_op};
  req.tps = {1, 2, 4, 8};
  if (formats.empty())
    for (const auto& p : precisions())
      if (supports(gpu, p.format)) formats.push_back(p.format);
  req.formats = std::move(formats);
  return req;
}

/// What a fleet search ranks node counts and instance types by.
enum class fleet_objective {
  throughput,  ///< most tokens/s
  cost,        ///< fewest USD per token
  time,        ///< shortest time for the token budget (= most tokens/s)
};
[[nodiscard]] constexpr const char* to_string(fleet_objective o) noexcept {
  return o == fleet_objective::throughput ? "throughput" : o == fleet_objective::cost ? "cost" : "time";
}

/// A search over instance types × node counts (recommend --nodes auto, several --instance, --tokens).
struct fleet_request {
  std::vector<const instance_spec*> instances;  ///< instance types to compare (not owned)
  std::vector<int> node_counts{1};              ///< node counts tried for each
  fleet_objective objective = fleet_objective::throughput;
  double tokens = 0;                            ///< token budget (0: none), tokens
  double budget_usd = -1;                       ///< largest cost of the budget, USD (< 0: none)
  double deadline_s = 0;                        ///< longest time for the budget, seconds (0: none)
  double price_per_hour = -1;                   ///< USD per instance-hour overriding the catalog (< 0: catalog)
  plan_request search;                          ///< the per-(instance, nodes) search; formats filtered per GPU
};

/// The best plan of one instance type at one node count.
struct fleet_row {
  const instance_spec* instance = nullptr;
  int nodes = 0;
  int world = 0;                       ///< GPUs
  double price_per_hour = 0;           ///< USD per instance-hour used
  std::optional<plan_candidate> best;  ///< absent: nothing fits
  std::int64_t evaluated = 0;
  double scaling = 0;                  ///< per-GPU tokens/s relative to the smallest fitting node count of the instance
  training_cost cost;                  ///< with a token budget
  double usd_per_billion_tokens = 0;
  bool within = true;                  ///< meets the budget and the deadline
};

/// Outcome of search_fleet.
struct fleet_result {
  std::vector<fleet_row> rows;  ///< instance-major, node counts ascending
  std::optional<std::size_t> pick;  ///< index of the best row by the objective among fitting rows within constraints
};

/// Node counts 1, 2, 4, … up to `max_nodes` (and `max_nodes` itself). Throws plan_error outside 1..4096.
[[nodiscard]] inline std::vector<int> auto_node_counts(int max_nodes) {
  if (max_nodes < 1 || max_nodes > plan_limits::max_nodes)
    throw plan_error({"nodes", "/nodes", "largest node count must be between 1 and 4096, got " + std::to_string(max_nodes)});
  std::vector<int> n;
  for (int i = 1; i <= max_nodes; i *= 2) n.push_back(i);
  if (n.back() != max_nodes) n.push_back(max_nodes);
  return n;
}

/// Runs search_plans for every instance type and node count of `req` (each with the formats its GPU supports)
/// and picks the best row by the objective: throughput and time by tokens/s, cost by USD per token; rows over
/// the budget or past the deadline are kept but not picked. `gpu_of` maps an instance to its GPU.
[[nodiscard]] inline fleet_result search_fleet(const model_spec& m, const fleet_request& req,
                                               const std::function<const gpu_spec&(const instance_spec&)>& gpu_of,
                                               const runtime_overheads& rt = {}, const throughput_calibration& k = {}) {
  fleet_result out;
  for (const instance_spec* inst : req.instances) {
    const gpu_spec& gpu = gpu_of(*inst);
    plan_request rq = req.search;
    rq.formats.clear();
    for (compute_format f : req.search.formats)
      if (supports(gpu, f)) rq.formats.push_back(f);
    if (rq.formats.empty()) rq.formats.push_back(compute_format::bf16);
    double base_per_gpu = 0;
    for (int n : req.node_counts) {
      rq.nodes = n;
      const plan_result r = search_plans(m, gpu, inst, rq, 1, false, rt, k);
      fleet_row row;
      row.instance = inst;
      row.nodes = n;
      row.world = n * inst->gpus_per_node;
      row.price_per_hour = req.price_per_hour >= 0 ? req.price_per_hour : inst->price_per_hour_usd;
      row.evaluated = r.evaluated;
      if (!r.ranked.empty()) {
        row.best = r.ranked.front();
        const auto& te = row.best->throughput;
        if (base_per_gpu <= 0) base_per_gpu = te.tokens_per_s_per_gpu;
        row.scaling = te.tokens_per_s_per_gpu / base_per_gpu;
        row.usd_per_billion_tokens = n * row.price_per_hour / 3600 / te.tokens_per_s * 1e9;
        if (req.tokens > 0) row.cost = cost_to_train(te, req.tokens, n, row.price_per_hour);
        if (req.deadline_s > 0 && row.cost.seconds > req.deadline_s) row.within = false;
        if (req.budget_usd >= 0 && row.cost.usd > req.budget_usd) row.within = false;
      }
      out.rows.push_back(std::move(row));
    }
  }
  auto better = [&](const fleet_row& a, const fleet_row& b) {
    if (req.objective == fleet_objective::cost) return a.usd_per_billion_tokens < b.usd_per_billion_tokens;
    return a.best->throughput.tokens_per_s > b.best->throughput.tokens_per_s;
  };
  for (std::size_t i = 0; i < out.rows.size(); ++i) {
    const auto& r = out.rows[i];
    if (r.best && r.within && (!out.pick || better(r, out.rows[*out.pick]))) out.pick = i;
  }
  return out;
}

}  // namespace bwplan
