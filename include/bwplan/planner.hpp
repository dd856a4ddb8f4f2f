// bwplan: GPU memory and throughput planning for LLM training
// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <bwplan/hardware.hpp>
#include <bwplan/memory.hpp>
#include <bwplan/model.hpp>
#include <bwplan/precision.hpp>
#include <bwplan/throughput.hpp>
#include <bwplan/training.hpp>

#include <algorithm>
#include <cstdint>
#include <functional>
#include <vector>

namespace bwplan {

/// What `recommend` searches over, for one instance type and node count.
struct plan_request {
  int nodes = 1;                                   ///< instances
  std::vector<std::int64_t> seq_lens{4096};        ///< candidate sequence lengths, tokens
  std::int64_t global_batch_tokens = 4'194'304;    ///< target tokens per optimizer step (whole job)
  std::int64_t max_micro_batch = 256;              ///< largest micro-batch size tried
  double headroom = 0.05;                          ///< share of capacity kept free at the peak
  std::vector<int> ac_every{0, 1, 2, 4, -1};       ///< checkpointing choices: 0 = none, K = every K-th block, -1 = per-op selective
  std::vector<compute_format> formats{compute_format::bf16};  ///< GEMM formats tried (each must be supported by the GPU)
  std::vector<sharding> shardings{sharding::none, sharding::full};  ///< hybrid is tried only across nodes (one node: = full)
  std::vector<int> tps{1};                         ///< tensor-parallel degrees tried (those dividing heads and a node)
  std::vector<loss_impl> losses{loss_impl::standard, loss_impl::chunked};
  master_weights master = master_weights::fp32;
  optimizer_impl optimizer = optimizer_impl::fused;
  /// Called after each evaluated configuration with (evaluated so far, configurations in the search), e.g.
  /// to draw a progress bar; empty: not called. It must not throw.
  std::function<void(std::int64_t, std::int64_t)> progress;
};

/// Number of configurations search_plans evaluates for `req` on `world` GPUs (`eps`: expert-parallel
/// degrees tried, 1 for dense models; see detail::ep_candidates).
[[nodiscard]] inline std::int64_t plan_search_size(const plan_request& req, int world, std::size_t eps = 1) {
  std::int64_t n = 0;
  const auto per_mbs = static_cast<std::int64_t>(req.shardings.size() * req.tps.size() * req.ac_every.size() * req.losses.size() *
                                                 eps * std::max<std::size_t>(1, req.formats.size()));
  for (std::int64_t seq : req.seq_lens) {
    if (seq < 1) continue;
    for (std::int64_t mbs = 1; mbs <= req.max_micro_batch; mbs *= 2) {
      if (mbs * seq * world > req.global_batch_tokens && mbs > 1) break;
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

/// Searches micro-batch size (powers of two), activation checkpointing, sharding, loss implementation,
/// expert parallelism (MoE models only: detail::ep_candidates) and sequence length; gradient accumulation follows from the global batch
/// (`ceil(global_batch_tokens / (mbs · seq · world))`). Keeps candidates whose device peak is at most
/// (1 − headroom) · capacity and ranks them by tokens/s. Returns at most `top` candidates; with
/// `best_per_seq`, the best of each sequence length instead. Throws invalid_request for an empty search.
[[nodiscard]] inline plan_result search_plans(const model_spec& m, const gpu_spec& gpu, const instance_spec* inst,
                                              const plan_request& req, std::size_t top, bool best_per_seq = false,
                                              const runtime_overheads& rt = {}, const throughput_calibration& k = {}) {
  if (req.nodes < 1) throw invalid_request("--nodes: must be >= 1, got " + std::to_string(req.nodes));
  if (req.global_batch_tokens < 1) throw invalid_request("--global-batch-tokens: must be >= 1");
  if (req.seq_lens.empty()) throw invalid_request("--seq: no sequence length to try");
  if (req.headroom < 0 || req.headroom >= 1) throw invalid_request("--headroom: must be in [0, 1)");
  if (req.formats.empty()) throw invalid_request("--precisions: no format to try");
  for (compute_format f : req.formats)
    if (!supports(gpu, f))
      throw invalid_request(std::string("--precisions: ") + to_string(f) + " is not supported on " + gpu.id + " (" +
                            gpu.architecture + ")");
  std::vector<plan_candidate> per_format(req.formats.size());
  std::vector<bool> have_format(req.formats.size(), false);
  const int per_node = inst ? inst->gpus_per_node : 1;
  const int world = req.nodes * per_node;
  const std::vector<int> eps = detail::ep_candidates(m, world);  // MoE: expert parallelism too
  const std::int64_t total = req.progress ? plan_search_size(req, world, eps.size()) : 0;
  plan_result res;
  std::vector<plan_candidate> keep;
  const std::size_t cap = best_per_seq ? req.seq_lens.size() : std::max<std::size_t>(top, 1);
  auto better = [](const plan_candidate& a, const plan_candidate& b) {
    return a.throughput.tokens_per_s > b.throughput.tokens_per_s;
  };
  for (std::int64_t seq : req.seq_lens) {
    if (seq < 1) throw invalid_request("--seq: must be >= 1, got " + std::to_string(seq));
    if (m.positions > 0 && seq > m.positions) continue;  // learned positions (gpt2) cap the sequence
    plan_candidate best_seq{};
    bool have_seq = false;
    for (std::int64_t mbs = 1; mbs <= req.max_micro_batch; mbs *= 2) {
      const std::int64_t tokens = mbs * seq * world;
      if (tokens > req.global_batch_tokens && mbs > 1) break;
      for (sharding sh : req.shardings) {
       for (int tp : req.tps) {
        if (tp < 1 || tp > per_node || world % tp != 0 || m.heads % tp != 0 || m.kv_heads % tp != 0) continue;
        if (sh == sharding::hybrid && req.nodes < 2) continue;
        for (int ac : req.ac_every) {
          for (loss_impl loss : req.losses) {
           for (std::size_t fi = 0; fi < req.formats.size(); ++fi) {
          for (int ep : eps) {
            if ((world / tp) % ep != 0) continue;  // experts are split over ep x tp GPUs
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
            c.loss = loss;
            c.ac_enabled = ac > 0;
            c.ac_every = ac > 0 ? ac : 1;
            c.selective = ac < 0 ? selective_ac::op : selective_ac::none;
            const std::int64_t step_tokens = tokens / tp;  // data-parallel degree world / tp
            c.grad_accum = std::max<std::int64_t>(1, (req.global_batch_tokens + step_tokens - 1) / step_tokens);
            ++res.evaluated;
            if (req.progress) req.progress(res.evaluated, total);
            memory_estimate me = estimate_memory(m, c, gpu, rt);
            if (me.device_peak() > (1.0 - req.headroom) * me.capacity) continue;
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
    if (best_per_seq && have_seq) keep.push_back(best_seq);
  }
  if (best_per_seq) std::stable_sort(keep.begin(), keep.end(), better);
  res.ranked = std::move(keep);
  for (std::size_t fi = 0; fi < req.formats.size(); ++fi)
    if (have_format[fi]) res.best_per_format.push_back(per_format[fi]);
  return res;
}

}  // namespace bwplan
