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
#include <cmath>
#include <cstdint>
#include <functional>
#include <limits>
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
  std::vector<int> tps{1};                         ///< tensor-parallel degrees tried (those dividing heads and an NVLink domain)
  /// Pipeline-parallel degrees tried: those with pp ≤ GPUs / tp, dividing GPUs / tp, whose stages each hold a
  /// decoder block (pipeline_split_ok; uneven splits allowed); with pp > 1 the sharding modes none (DDP) and
  /// optimizer (ZeRO-1; FSDP full under pp has the same layout, zero1_layout, so it is not tried twice).
  std::vector<int> pps{1};
  /// Virtual stages per rank tried with pp > 1: 1 is 1F1B, v ≥ 2 the interleaved schedule (whose accumulation
  /// is rounded up to a multiple of pp).
  std::vector<int> vpps{1};
  std::vector<loss_impl> losses{loss_impl::standard, loss_impl::chunked};
  master_weights master = master_weights::fp32;
  optimizer_impl optimizer = optimizer_impl::fused;
  finetune_mode finetune = finetune_mode::full;     ///< full fine-tune, LoRA or QLoRA (adapters: tp 1 and bf16 only)
  lora_settings lora;                               ///< the adapters of a LoRA / QLoRA search (the user's rank and targets)
  std::vector<optimizer_kind> optimizers{optimizer_kind::adamw};  ///< optimizers tried (`--optimizer auto`: all)
  /// CPU offload sets tried (offload_target bits; `--offload auto`: offload_candidates()). Sets a layout cannot run
  /// (offload_violation) are skipped; with an instance, a plan whose offload needs more host memory per node than the
  /// instance has does not fit.
  std::vector<unsigned> offloads{0};
  training_stack stack = training_stack::hf;        ///< the training stack (megatron: sharding none or optimizer and the standard loss only)
  bool compile = false;                             ///< torch.compile as the stack applies it
  module_kernels modules = module_kernels::fused;   ///< the hf stack's RMSNorm and RoPE kernels (training_config::modules)
  bool expandable_segments = false;                 ///< every candidate runs with `expandable_segments:True`
  /// Every candidate steps the optimizer in backward (training_config::optimizer_in_backward: stack torchtune, one
  /// GPU, sharding none); candidates that need gradient accumulation are skipped.
  bool optimizer_in_backward = false;
  /// Tensor parallelism with sequence parallel (training_config::sequence_parallel); false only with stack megatron.
  bool sequence_parallel = true;
  /// FSDP2 shards the embedding and the LM head as units of their own (training_config::fsdp_embedding_units);
  /// candidates without FSDP (full or hybrid), with pipeline parallelism or with the hf stack's chunked loss are then
  /// skipped.
  bool fsdp_embedding_units = false;
  /// Megatron's tensor-parallel communication overlap (training_config::tp_comm_overlap) on every candidate with
  /// tp > 1; stack megatron only.
  bool tp_comm_overlap = false;
  /// The MoE all-to-all overlapped across micro-batches (training_config::moe_a2a_overlap) on every candidate with
  /// ep > 1.
  bool moe_a2a_overlap = false;
  /// Without expandable_segments: a candidate over the line whose replayed step fits with `expandable_segments:True`
  /// is kept with that setting (the plan carries it; the SageMaker job sets PYTORCH_CUDA_ALLOC_CONF).
  bool allow_expandable_segments = true;
  /// Keep the best fitting plan of each format (plan_result::best_per_format, what recommend's `precision:` line
  /// compares), replaying the caching allocator for it too; search_fleet, which reads only the top plan and the best
  /// pipeline, turns it off (its rows do not change; the best plan of a format that does not rank is not replayed).
  bool best_per_format = true;
  /// Called after each evaluated configuration with (evaluated so far, configurations in the search), e.g.
  /// to draw a progress bar; empty: not called. It must not throw.
  std::function<void(std::int64_t, std::int64_t)> progress;
  /// Which configurations the search may return at all (`recommend --emit sagemaker`: those the reference
  /// trainer runs); empty: all. Asked before a configuration is evaluated; one it rejects is neither evaluated
  /// nor counted. It must not throw.
  std::function<bool(const training_config&)> admit;
};

/// Pipeline variants (pp, vpp) search_plans tries for `req` on `world` GPUs with tensor parallelism `tp`
/// and sharding `sh` for a model of `layers` blocks (0: do not check the split), pp = 1 first.
[[nodiscard]] inline std::vector<std::pair<int, int>> pipeline_variants(const plan_request& req, int world, int tp, sharding sh,
                                                                        std::int64_t layers = 0) {
  std::vector<std::pair<int, int>> out;
  for (int pp : req.pps) {
    if (pp < 1 || tp < 1 || world % tp != 0 || pp > world / tp || (world / tp) % pp != 0) continue;
    if (pp > 1 && sh != sharding::none && sh != sharding::optimizer) continue;
    for (int v : req.vpps) {
      if (v < 1 || (pp == 1 && v != 1)) continue;
      if (layers > 0 && !pipeline_split_ok(layers, static_cast<std::int64_t>(pp) * v, req.stack == training_stack::megatron)) continue;
      if (std::find(out.begin(), out.end(), std::pair{pp, v}) == out.end()) out.emplace_back(pp, v);
    }
  }
  return out;
}

/// Number of configurations search_plans evaluates for `req` on `world` GPUs (`eps`: expert-parallel
/// degrees tried, 1 for dense models; see detail::ep_candidates; `layers`: the model's, for the pipeline splits).
[[nodiscard]] inline std::int64_t plan_search_size(const plan_request& req, int world, std::size_t eps = 1, std::int64_t layers = 0) {
  std::int64_t n = 0;
  std::size_t layouts = 0;  // sharding × tp × pipeline variants
  for (sharding sh : req.shardings)
    for (int tp : req.tps) layouts += pipeline_variants(req, world, tp, sh, layers).size();
  const auto per_mbs = static_cast<std::int64_t>(layouts * req.checkpointings.size() * req.losses.size() *
                                                 eps * std::max<std::size_t>(1, req.formats.size()) *
                                                 std::max<std::size_t>(1, req.optimizers.size()) *
                                                 std::max<std::size_t>(1, req.offloads.size()));
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
  std::int64_t order = 0;  ///< its place in the search's enumeration: of two with the same tokens/s the earlier ranks first
};

/// How far over the fit line (the limit: capacity less the headroom) the cheap bound's device peak may be for
/// `search_plans` to still replay a replayable candidate (terms::replayable) and take the fit verdict from the replay,
/// as a share of the limit. There is no lower edge: every replayable candidate under it that would be ranked is
/// replayed. Over the limit the cheap bound has been found up to 1.19 times the replay near the line (Llama-3.1-8B,
/// FSDP2 over 2 H100, 2 x 8192, full checkpointing: 1.27 of the limit against 1.07) and 1.24 times further out; the
/// highest cheap share of a plan the replay accepts on the grids tried was 1.08 of the limit, so a plan past 1.2 that
/// the replay would accept has not been seen, but is possible. Under the limit no share is safe: on FSDP2 the cheap
/// bound misses segments the replay keeps cached (the root's fp32 reduce-scatter input and bf16 gradients, split by the
/// optimizer states and allocated again, its all-gather buffer on its own stream), up to 18 GiB whatever the rest of
/// the step holds, so on small GPUs the replay has come out 1.87 times the cheap bound (Llama-3.1-8B over 32 A10G,
/// 1 x 1024, full checkpointing: 0.54 of the limit against 1.01). A window of ±15 % around capacity let the search rank
/// plans there that `estimate` rejects (test "search_plans: the plans near the fit line carry the replay's verdict…").
/// Replays are few (only while a candidate would still be ranked) and take 1–12 ms (docs/performance.md).
inline constexpr double replay_ceiling = 1.2;

/// Outcome of a search.
struct plan_result {
  std::vector<plan_candidate> ranked;  ///< fitting candidates within headroom, best tokens/s first (at most `top`)
  std::int64_t evaluated = 0;          ///< configurations evaluated
  std::int64_t fitting = 0;            ///< configurations that fit with the headroom
  /// of `fitting`: candidates near the line (replayable, under replay_ceiling) counted by the cheap bound because no
  /// replay was needed to rank them; their count moves with how many plans are ranked (`top`), and a replay could
  /// reject a few of them (a helper's sweep: Llama-3.1-8B on p5, 2,891 fit at --top 1301 and 2,890 at 1302)
  std::int64_t fitting_unreplayed = 0;
  /// candidates not evaluated because the global batch needs more micro-batches per step than a plan takes
  /// (plan_limits::max_grad_accum): not counted in `evaluated`
  std::int64_t skipped_accumulation = 0;
  std::vector<plan_candidate> best_per_format;  ///< the best fitting candidate of each format tried (in request order)
  std::optional<plan_candidate> best_pipeline;  ///< the best fitting candidate with pipeline parallelism (pp > 1), if any was searched and fits
};

/// Searches micro-batch size (powers of two), activation checkpointing, sharding, tensor and pipeline parallelism
/// (pipeline_variants), loss implementation, optimizer, expert parallelism (MoE models only:
/// detail::ep_candidates) and sequence length; gradient accumulation (the micro-batches of a pipeline) follows
/// from the global batch (`ceil(global_batch_tokens / (mbs · seq · dp))`, dp = GPUs / (tp · pp); rounded up to a
/// multiple of pp for the interleaved schedule). Keeps candidates whose device peak is at most
/// (1 − headroom) · capacity and ranks them by tokens/s (ties: the first enumerated). Memory is the cheap bound,
/// except for a replayable candidate (terms::replayable) whose cheap device peak is at most replay_ceiling times the
/// limit: it is replayed through the caching allocator, as `estimate` does, when it would
/// be ranked, fastest first, and its fit verdict and memory are the replay's (`fitting` counts the cheap verdict of
/// those never replayed). Returns at most `top` candidates; with `best_per_seq`, the best of each sequence length
/// instead. Throws invalid_request for an empty search.
/// The settings `req` pins for every candidate, on a default configuration: master weights, the AdamW implementation,
/// fine-tuning mode and adapters, stack, compile, modules, allocator setting, optimizer in backward, sequence parallel,
/// FSDP embedding units and the two Megatron overlaps as asked (search_plans keeps the overlaps only where they apply).
[[nodiscard]] inline training_config pinned_settings(const plan_request& req) {
  training_config c;
  c.master = req.master;
  c.optimizer = req.optimizer;
  c.finetune = req.finetune;
  if (req.finetune != finetune_mode::full) c.lora = req.lora;
  c.stack = req.stack;
  c.compile = req.compile;
  c.modules = req.modules;
  c.expandable_segments = req.expandable_segments;
  c.optimizer_in_backward = req.optimizer_in_backward;
  c.sequence_parallel = req.sequence_parallel;
  c.fsdp_embedding_units = req.fsdp_embedding_units;
  c.tp_comm_overlap = req.tp_comm_overlap;
  c.moe_a2a_overlap = req.moe_a2a_overlap;
  return c;
}

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
  // a bare GPU (no instance): req.nodes GPUs on one node of the GPU's interconnect, as `estimate --gpu X --gpus N` and
  // resolve_world lay them out (a bare GPU has no network)
  const int world = inst ? req.nodes * inst->gpus_per_node : req.nodes;
  const int per_node = inst ? inst->gpus_per_node : world;
  // GPUs of one NVLink domain (NVL72: 72 over 18 instances), which bounds tensor parallelism
  const int domain = inst && inst->nvlink_domain_gpus > per_node ? inst->nvlink_domain_gpus : per_node;
  const std::vector<int> eps = detail::ep_candidates(m, world);  // MoE: expert parallelism too
  // the search prices every candidate with the cheap bound and replays the caching allocator only for a replayable
  // candidate under replay_ceiling that would be ranked (below), as `estimate` replays it
  const bool replaying = rt.replay != runtime_overheads::replay_policy::never;
  runtime_overheads rt_cheap = rt, rt_replay = rt;
  rt_cheap.replay = runtime_overheads::replay_policy::never;
  rt_replay.replay = runtime_overheads::replay_policy::always;
  const bytes limit = (1.0 - req.headroom) * gpu.cuda_capacity();  // the fit line, less recommend's headroom
  // only the verdict is wanted: a replay stops once the device peak passes the headroom limit (a plan past it is
  // dropped, the peak only grows) or at an out-of-memory; a plan under it is replayed whole
  rt_replay.replay_stop_device_peak = limit.raw();
  const std::int64_t total = req.progress ? plan_search_size(req, world, eps.size(), m.layers) : 0;
  plan_result res;
  std::vector<plan_candidate> keep;
  const std::size_t variants = req.formats.size() * eps.size() * std::max<std::size_t>(1, req.optimizers.size()) *
                               std::max<std::size_t>(1, req.offloads.size());
  std::vector<double> floors(variants);
  std::vector<bool> floor_validated(variants), pair_validated(req.checkpointings.size() * req.losses.size());
  std::vector<headless_ranks<memory_estimate>> headless(variants);
  std::vector<headless_ranks<throughput_estimate>> headless_time(variants);
  const std::size_t cap = best_per_seq ? req.seq_lens.size() : std::max<std::size_t>(top, 1);
  auto better = [](const plan_candidate& a, const plan_candidate& b) {
    return a.throughput.tokens_per_s > b.throughput.tokens_per_s ||
           (a.throughput.tokens_per_s == b.throughput.tokens_per_s && a.order < b.order);
  };
  for (std::int64_t seq : req.seq_lens) {
    if (seq < 1) throw fail("seq_len", "must be >= 1, got " + std::to_string(seq));
    if (m.positions > 0 && seq > m.positions) continue;  // learned positions (gpt2) cap the sequence
    plan_candidate best_seq{};
    bool have_seq = false;
    // a fitting candidate into the ranking: the best per format, the best pipeline, the best of this sequence length
    // (best_per_seq) or the top `cap`
    auto admit = [&](const plan_candidate& pc, std::size_t fi) {
      if (req.best_per_format && (!have_format[fi] || better(pc, per_format[fi]))) { per_format[fi] = pc; have_format[fi] = true; }
      if (pc.config.pp > 1 && (!res.best_pipeline || better(pc, *res.best_pipeline))) res.best_pipeline = pc;
      if (best_per_seq) {
        if (!have_seq || better(pc, best_seq)) { best_seq = pc; have_seq = true; }
        return;
      }
      if (keep.size() < cap || better(pc, keep.back())) {
        keep.insert(std::upper_bound(keep.begin(), keep.end(), pc, better), pc);
        if (keep.size() > cap) keep.pop_back();
      }
    };
    // would admit() change the ranking (pp 1 candidates: the best pipeline is not theirs)?
    auto would_rank = [&](const plan_candidate& pc, std::size_t fi) {
      if (req.best_per_format && (!have_format[fi] || better(pc, per_format[fi]))) return true;
      if (best_per_seq) return !have_seq || better(pc, best_seq);
      return keep.size() < cap || better(pc, keep.back());
    };
    // A replayable candidate under the replay ceiling waits in `pending` with its cheap estimate; at the end of the
    // sequence length the waiting ones are replayed from the fastest down, each only while it would still be ranked,
    // until the ranking is full of fitting plans (a replay costs milliseconds to tens of them, and a large search has
    // thousands of such candidates). Ranking is by tokens/s alone, so what is never replayed could not have been ranked.
    struct waiting { plan_candidate pc; std::size_t fi; bool cheap_fit; };
    std::vector<waiting> pending;
    const bool biased = m.qkv_bias || m.o_bias || m.mlp_bias;
    auto resolve = [&] {
      std::sort(pending.begin(), pending.end(), [&](const waiting& a, const waiting& b) { return better(a.pc, b.pc); });
      for (const waiting& w : pending) {
        if (!would_rank(w.pc, w.fi)) continue;
        training_config c = w.pc.config;
        memory_estimate e1 = estimate_memory(m, c, gpu, rt_replay);  // what `estimate` gives for this plan
        bool fit = e1.device_peak() <= limit;
        // what the default segments do to a plan that fits with expandable segments, from their replay stopped at the
        // line (the replays here skip allocator_setting_check): past the GPU or out of memory, the plan needs them;
        // between the line and the GPU, it needs them for the headroom
        auto needs = [](const memory_estimate& dflt) {
          return dflt.fits ? allocator_setting_verdict::needs_expandable_for_headroom : allocator_setting_verdict::needs_expandable;
        };
        if (!fit && !c.expandable_segments && req.allow_expandable_segments) {
          training_config ce = c;  // only the allocator setting in the way: the replayed step with expandable segments
          ce.expandable_segments = true;
          memory_estimate mx = estimate_memory(m, ce, gpu, rt_replay);
          if (mx.device_peak() <= limit) {
            mx.allocator_setting = needs(e1);
            c = ce; e1 = mx; fit = true;
          }
        } else if (fit && c.expandable_segments) {  // asked for (--expandable-segments): does the plan need them?
          training_config cd = c;
          cd.expandable_segments = false;
          const memory_estimate md = estimate_memory(m, cd, gpu, rt_replay);
          if (md.device_peak() > limit) e1.allocator_setting = needs(md);
        }
        res.fitting += (fit ? 1 : 0) - (w.cheap_fit ? 1 : 0);  // the count took the cheap verdict
        res.fitting_unreplayed -= w.cheap_fit ? 1 : 0;
        if (fit) admit(plan_candidate{c, e1, w.pc.throughput, w.pc.order}, w.fi);
      }
      pending.clear();
    };
    for (std::int64_t mbs = req.min_micro_batch; mbs >= 1 && mbs <= req.max_micro_batch; mbs *= 2) {
      const std::int64_t tokens = mbs * seq * world;
      if (tokens > req.global_batch_tokens && mbs > req.min_micro_batch) break;
      for (sharding sh : req.shardings) {
       for (int tp : req.tps) {
        if (tp < 1 || tp > domain || world % tp != 0 || m.heads % tp != 0 || m.kv_heads % tp != 0) continue;
        if (sh == sharding::hybrid && req.nodes < 2) continue;
        for (const auto& [pp, vpp] : pipeline_variants(req, world, tp, sh, m.layers)) {
        // the model-state floor of each (format, expert degree, optimizer, offload) of this layout, priced once for its
        // checkpointing and loss variants, which it does not depend on (model_state_floor); NaN until priced
        std::fill(floors.begin(), floors.end(), std::numeric_limits<double>::quiet_NaN());
        std::fill(floor_validated.begin(), floor_validated.end(), false);
        for (std::size_t ai = 0; ai < req.checkpointings.size(); ++ai) {
          const checkpointing& ac = req.checkpointings[ai];
          // with pp > 1, what the pipeline ranks without the LM head hold and take, shared by the loss variants (headless_ranks)
          for (auto& hm : headless) hm.known = false;
          for (auto& ht : headless_time) ht.known = false;
          for (std::size_t li = 0; li < req.losses.size(); ++li) {
           const loss_impl loss = req.losses[li];
           for (std::size_t fi = 0; fi < req.formats.size(); ++fi) {
          for (std::size_t ei = 0; ei < eps.size(); ++ei) {
           const int ep = eps[ei];
           if ((world / (tp * pp)) % ep != 0) continue;  // experts are split over ep x tp GPUs of one stage
           for (std::size_t oi = 0; oi < req.optimizers.size(); ++oi) {
           const optimizer_kind opt = req.optimizers[oi];
           for (std::size_t ffi = 0; ffi < req.offloads.size(); ++ffi) {
            const unsigned off = req.offloads[ffi];
            // adapters: tp 1, bf16, pp 1 and no distributed optimizer (violations of training_config)
            if (req.finetune != finetune_mode::full &&
                (tp != 1 || req.formats[fi] != compute_format::bf16 || pp > 1 || sh == sharding::optimizer))
              continue;
            // Megatron: DDP over its main-gradient buffer and its own cross-entropy (violations of training_config)
            if (req.stack == training_stack::megatron && ((sh != sharding::none && sh != sharding::optimizer) || loss != loss_impl::standard)) continue;
            training_config c = pinned_settings(req);
            c.format = req.formats[fi];
            c.ep = ep;
            c.micro_batch = mbs;
            c.seq_len = seq;
            c.world_size = world;
            c.gpus_per_node = per_node;
            c.shard = sh;
            c.tp = tp;
            c.pp = pp;
            c.vpp = vpp;
            c.schedule = vpp > 1 ? pp_schedule::interleaved : pp_schedule::one_f_one_b;
            c.nvlink_domain = domain > per_node ? domain : 0;
            c.optim = opt;
            c.loss = loss;
            c.ac = ac;
            c.tp_comm_overlap = req.tp_comm_overlap && c.tp > 1;
            // the overlap where Megatron-Core allows it (training_config violations): ep > 1, no full recompute, pp with
            // the interleaved schedule; elsewhere the candidate waits for its all-to-all, as Megatron would refuse the flag
            c.moe_a2a_overlap = req.moe_a2a_overlap && c.ep > 1 && c.ac.mode != ac_mode::full &&
                                (c.pp == 1 || c.schedule == pp_schedule::interleaved);
            if (c.fsdp_embedding_units && ((c.shard != sharding::full && c.shard != sharding::hybrid) || c.pp > 1 ||
                                           (c.stack == training_stack::hf && c.loss == loss_impl::chunked)))
              continue;  // the rules of violations(): FSDP, pp 1, not the hf stack's chunked loss
            c.offload = off;
            if (off != 0) {  // the offload rules of violations(): a set this layout cannot run is not a candidate
              const char* field = nullptr;
              if (offload_violation(c, &field)) continue;
            }
            // the hf stack's mxfp8 (torchao's MXFP8 linear) does not run on autocast's fp32 weights (violations)
            if (c.stack == training_stack::hf && c.format == compute_format::mxfp8 && c.autocast_fp32_weights()) continue;
            // nor on biased block linears, whose bias its F.linear override drops (plan_violations)
            if (biased && c.stack == training_stack::hf && c.format == compute_format::mxfp8) continue;
            // nor its nvfp4 under autocast on a model with biased block linears (plan_violations)
            if (biased && c.stack == training_stack::hf && c.format == compute_format::nvfp4 && c.autocast_fp32_weights()) continue;
            // nor NVFP4 on linears or micro-batches that are not multiples of 128 (plan_violations)
            if (c.format == compute_format::nvfp4 && !nvfp4_shape_misfit(m, c).empty()) continue;
            const std::int64_t step_tokens = tokens / (tp * pp);  // data-parallel degree world / (tp · pp)
            c.grad_accum = std::max<std::int64_t>(1, (req.global_batch_tokens + step_tokens - 1) / step_tokens);
            if (vpp > 1) c.grad_accum = (c.grad_accum + pp - 1) / pp * pp;  // interleaved: groups of pp micro-batches
            // an accumulation past the plan limits is not a plan (its file would be refused: a review found
            // --global-batch-tokens 1T emitting grad_accum 61,035,157, and check's hint 134,217,728)
            if (c.grad_accum > plan_limits::max_grad_accum) {
              ++res.skipped_accumulation;
              continue;
            }
            // optimizer in backward: no accumulation, one GPU unsharded, full fine-tune, no offload (violations)
            if (c.optimizer_in_backward &&
                (c.grad_accum > 1 || c.world_size > 1 || c.shard != sharding::none || c.adapters() || c.offload != 0))
              continue;
            if (req.admit && !req.admit(c)) continue;
            ++res.evaluated;
            if (req.progress) req.progress(res.evaluated, total);
            // a candidate whose model states alone pass the line is decided without its other terms: over `limit` the
            // cheap bound drops it, and a pp 1 candidate over replay_ceiling · limit is never replayed either (the
            // floor is at most the cheap device peak of every rank it prices)
            const std::size_t vi = ((fi * eps.size() + ei) * req.optimizers.size() + oi) * req.offloads.size() + ffi;
            double& floor = floors[vi];
            if (std::isnan(floor)) floor = model_state_floor(m, c, gpu, rt_cheap).raw();
            if (floor > (replaying && c.pp <= 1 ? replay_ceiling : 1.0) * limit.raw()) {
              // Validated as the estimates validate what they price, so that a request the model cannot run throws
              // whichever candidates the floor decides (Liger's loss outside the hf stack, TP overlap without sequence
              // parallel, an invalid checkpointing): the first dropped candidate of each floor group, which differ from
              // one another only in checkpointing and loss, and the first of each checkpointing × loss pair. A rule of
              // validate reads either what a group shares or the pair (with the request's constants); the rules that
              // read both (offloaded activations need full checkpointing, a head unit of its own only with the hf
              // stack's standard loss, Megatron's loss) are the search's own filters above, so no candidate reaching
              // here breaks them.
              const std::size_t pi = ai * req.losses.size() + li;
              if (!floor_validated[vi] || !pair_validated[pi]) {
                validate(c);
                floor_validated[vi] = true;
                pair_validated[pi] = true;
              }
              continue;
            }
            // the fit test (with pp, rank by rank: the first over the limit ends it)
            std::optional<memory_estimate> me;
            if (c.pp <= 1) {
              // the cheap bound; a replayable candidate under the replay ceiling waits for resolve()
              const memory_estimate e1 = estimate_memory(m, c, gpu, rt_cheap);
              if (replaying && e1.device_peak().raw() <= replay_ceiling * limit.raw() && terms::replay_applies(m, c)) {
                plan_candidate pc{c, e1, estimate_throughput(m, c, gpu, inst, k), res.evaluated};
                const bool cheap_fit = e1.device_peak() <= limit;
                res.fitting += cheap_fit ? 1 : 0;
                res.fitting_unreplayed += cheap_fit ? 1 : 0;
                if (would_rank(pc, fi)) pending.push_back({std::move(pc), fi, cheap_fit});
                continue;
              }
              if (e1.device_peak() > limit) continue;
              me = e1;
              // CPU offload: the node's host memory (instance_spec::host_memory; unknown for a bare GPU)
              if (off != 0 && inst && inst->host_memory.raw() > 0 && host_memory_per_node(*me, c) > inst->host_memory) continue;
            } else {
              me = estimate_memory_within(m, c, gpu, limit, rt_cheap, &headless[vi]);
              if (!me) continue;
            }
            ++res.fitting;
            admit(plan_candidate{c, *me, estimate_throughput(m, c, gpu, inst, k, c.pp > 1 ? &headless_time[vi] : nullptr), res.evaluated}, fi);
           }
           }
           }
          }
          }
        }
        }
       }
      }
    }
    resolve();
    if (best_per_seq && have_seq) keep.push_back(best_seq);
  }
  if (best_per_seq) std::stable_sort(keep.begin(), keep.end(), better);
  res.ranked = std::move(keep);
  for (std::size_t fi = 0; fi < req.formats.size(); ++fi)
    if (have_format[fi]) res.best_per_format.push_back(per_format[fi]);
  return res;
}

/// The CPU offload sets `--offload auto` searches, least change to the run first: none, optimizer, optimizer +
/// activations, optimizer + params, all three, activations alone (a set a layout cannot run is skipped there).
[[nodiscard]] inline std::vector<unsigned> offload_candidates() {
  using namespace offload_target;
  return {0u, optimizer, optimizer | activations, optimizer | params, optimizer | params | activations, activations};
}

/// The search space `recommend` explores on `gpu` with `nodes` instances: every sharding mode (hybrid only
/// across nodes; the distributed optimizer), tp 1/2/4/8 (and 16, 32, 64 where an NVLink domain spans
/// instances: `domain_gpus`), pp 1/2/4/8/16/32 with 1F1B and the interleaved schedule with 2 and 4 virtual
/// stages (pipeline_variants bounds them by the GPUs and the layers), the checkpointing modes of plan_request,
/// both losses, and `formats` (default: every format `gpu` supports). `bwplan check` compares a plan with the
/// best of this same search.
[[nodiscard]] inline plan_request full_search(const gpu_spec& gpu, int nodes, std::vector<compute_format> formats = {},
                                              int domain_gpus = 0) {
  plan_request req;
  req.nodes = nodes;
  req.shardings = {sharding::none, sharding::full, sharding::hybrid, sharding::grad_op, sharding::optimizer};
  req.tps = {1, 2, 4, 8};
  for (int tp = 16; tp <= 64 && tp <= domain_gpus; tp *= 2) req.tps.push_back(tp);
  req.pps = {1, 2, 4, 8, 16, 32};
  req.vpps = {1, 2, 4};
  if (formats.empty())
    for (const auto& p : precisions())
      if (supports(gpu, p.format)) formats.push_back(p.format);
  req.formats = std::move(formats);
  return req;
}

/// The global batch `--global-batch-tokens auto` asks for on `gpus` GPUs: `max(4 Mi, 32 Ki · gpus)` tokens,
/// i.e. 4,194,304 tokens (the default) up to 128 GPUs and 32,768 tokens per GPU beyond, so that every GPU keeps
/// the same tokens per step as the job grows (weak scaling) and the communication of a step, which per GPU does
/// not shrink with more GPUs, stays amortised over the same compute. The slope is DeepSeek-V3's: 15,360
/// sequences of 4,096 tokens (62.9 M) on 2,048 H800 GPUs, 30.7 K tokens per GPU (DeepSeek-AI 2024,
/// arXiv:2412.19437, §3.1 and §4.2); Llama 3 405B ran 16 M tokens (Dubey et al. 2024, arXiv:2407.21783 §3.4.1).
/// A batch is also a training decision (the critical batch size): recommend prints the batch it used.
[[nodiscard]] constexpr std::int64_t auto_global_batch_tokens(std::int64_t gpus) noexcept {
  return std::max<std::int64_t>(4'194'304, 32'768 * gpus);
}

/// Share of one step not spent computing: (exposed communication + pipeline bubble) / step.
[[nodiscard]] inline double overhead_share(const throughput_estimate& te) noexcept {
  return te.step.raw() > 0 ? (te.exposed_communication + te.bubble).raw() / te.step.raw() : 0.0;
}

/// What a larger global batch would buy a plan whose step is mostly not compute (global_batch_hint).
struct batch_hint {
  bool needed = false;                 ///< the best plan spends more than `threshold` of its step off compute
  double share = 0;                    ///< that share (overhead_share)
  std::int64_t tokens = 0;             ///< the global batch searched, tokens
  std::optional<std::int64_t> larger;  ///< the smallest global batch tried (2×, 4×, 8×, 16×) whose best plan is under the threshold
  std::optional<plan_candidate> then;  ///< that plan
  std::optional<plan_candidate> at16;  ///< the best plan at 16× the global batch (when none is under the threshold: what remains)
};

/// Whether the best plan `best` of `req` spends more than `threshold` of its step in exposed communication and
/// pipeline bubble, and if so the smallest of 2, 4, 8 and 16 times the global batch whose best plan does not (by
/// search_plans with the same request; 16× is tried first, and when even that does not, no other). Per-step
/// collectives (DDP, HSDP and distributed-optimizer gradient reductions, the pipeline bubble) are amortised over
/// more micro-batches; per-micro-batch ones (FSDP gathers, tensor-parallel collectives, expert all-to-all) are
/// not, which the search answers by another layout (or by no larger batch at all).
[[nodiscard]] inline batch_hint global_batch_hint(const model_spec& m, const gpu_spec& gpu, const instance_spec* inst,
                                                  plan_request req, const plan_candidate& best, double threshold = 0.10,
                                                  const runtime_overheads& rt = {}, const throughput_calibration& k = {}) {
  batch_hint h;
  h.tokens = req.global_batch_tokens;
  h.share = overhead_share(best.throughput);
  h.needed = h.share > threshold;
  if (!h.needed) return h;
  req.progress = nullptr;
  auto best_at = [&](std::int64_t f) -> std::optional<plan_candidate> {
    plan_request r = req;
    r.global_batch_tokens = req.global_batch_tokens * f;
    r.best_per_format = false;  // only the top plan is read
    const plan_result res = search_plans(m, gpu, inst, r, 1, false, rt, k);
    if (res.ranked.empty()) return std::nullopt;
    return res.ranked.front();
  };
  auto good = [&](const std::optional<plan_candidate>& c) { return c && overhead_share(c->throughput) <= threshold; };
  h.at16 = best_at(16);
  if (!good(h.at16)) return h;  // at16 says what even 16× leaves
  for (std::int64_t f = 2; f <= 16; f *= 2) {
    std::optional<plan_candidate> c = f == 16 ? h.at16 : best_at(f);
    if (good(c)) {
      h.larger = req.global_batch_tokens * f;
      h.then = std::move(c);
      break;
    }
  }
  return h;
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
  /// `--global-batch-tokens auto`: each node count searches auto_global_batch_tokens(GPUs) instead of
  /// search.global_batch_tokens
  bool auto_global_batch = false;
  /// Compute global_batch_hint for every row whose best plan spends more than `hint_threshold` of its step off compute
  bool hints = false;
  double hint_threshold = 0.10;
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
  std::int64_t global_batch_tokens = 0;  ///< the global batch searched (tokens)
  batch_hint hint;                     ///< fleet_request::hints: what a larger global batch would buy
  std::optional<plan_candidate> best_pipeline;  ///< the best fitting plan with pipeline parallelism (pp > 1)
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

/// Runs search_plans for every instance type and node count of `req` (each with the formats its GPU supports;
/// with auto_global_batch, the global batch of its GPU count) and picks the best row by the objective:
/// throughput and time by tokens/s, cost by USD per token; rows over the budget or past the deadline are kept
/// but not picked. With `hints`, each row's global_batch_hint. `gpu_of` maps an instance to its GPU.
[[nodiscard]] inline fleet_result search_fleet(const model_spec& m, const fleet_request& req,
                                               const std::function<const gpu_spec&(const instance_spec&)>& gpu_of,
                                               const runtime_overheads& rt = {}, const throughput_calibration& k = {}) {
  fleet_result out;
  for (const instance_spec* inst : req.instances) {
    const gpu_spec& gpu = gpu_of(*inst);
    plan_request rq = req.search;
    rq.best_per_format = false;  // a row reads the top plan and the best pipeline only
    rq.formats.clear();
    for (compute_format f : req.search.formats)
      if (supports(gpu, f)) rq.formats.push_back(f);
    if (rq.formats.empty()) rq.formats.push_back(compute_format::bf16);
    double base_per_gpu = 0;
    for (int n : req.node_counts) {
      rq.nodes = n;
      if (req.auto_global_batch) rq.global_batch_tokens = auto_global_batch_tokens(static_cast<std::int64_t>(n) * inst->gpus_per_node);
      const plan_result r = search_plans(m, gpu, inst, rq, 1, false, rt, k);
      fleet_row row;
      row.global_batch_tokens = rq.global_batch_tokens;
      row.instance = inst;
      row.nodes = n;
      row.world = n * inst->gpus_per_node;
      row.price_per_hour = req.price_per_hour >= 0 ? req.price_per_hour : inst->price_per_hour();  // SageMaker's when known
      row.evaluated = r.evaluated;
      row.best_pipeline = r.best_pipeline;
      if (!r.ranked.empty()) {
        row.best = r.ranked.front();
        const auto& te = row.best->throughput;
        if (base_per_gpu <= 0) base_per_gpu = te.tokens_per_s_per_gpu;
        row.scaling = te.tokens_per_s_per_gpu / base_per_gpu;
        row.usd_per_billion_tokens = n * row.price_per_hour / 3600 / te.tokens_per_s * 1e9;
        if (req.tokens > 0) row.cost = cost_to_train(te, req.tokens, n, row.price_per_hour);
        if (req.deadline_s > 0 && row.cost.seconds > req.deadline_s) row.within = false;
        if (req.budget_usd >= 0 && row.cost.usd > req.budget_usd) row.within = false;
        if (req.hints) row.hint = global_batch_hint(m, gpu, inst, rq, *row.best, req.hint_threshold, rt, k);
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
