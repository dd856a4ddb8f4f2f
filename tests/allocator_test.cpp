// The caching-allocator replay (include/bwplan/allocator.hpp) against hand-derived cases of PyTorch's
// CUDACachingAllocator rules (/work/shared/reference/allocator.md §8).
#include <bwplan/io/json.hpp>
#include <bwplan/memory.hpp>
#include <bwplan/plan.hpp>
#include <bwplan/planner.hpp>

#include "test_util.hpp"

#include <algorithm>
#include <cmath>
#include <utility>

#include <catch2/catch.hpp>

using namespace bwplan::alloc;

TEST_CASE("allocator: size classes and segment sizes", "[allocator]") {
  CHECK(round_size(1) == 512);
  CHECK(round_size(513) == 1024);
  CHECK(segment_size(4096) == 2 * MiB);            // small pool
  CHECK(segment_size(3 * MiB / 2) == 20 * MiB);    // 1 MiB < size < 10 MiB
  CHECK(segment_size(30 * MiB) == 30 * MiB);       // rounded to 2 MiB
  CHECK(segment_size(31 * MiB) == 32 * MiB);
  caching_allocator a;
  a.malloc(3 * MiB / 2);
  CHECK(a.reserved() == 20 * MiB);  // a 1.5 MiB request reserves a 20 MiB segment
  a.malloc(30 * MiB);
  CHECK(a.reserved() == 50 * MiB);  // a 30 MiB request reserves 30 MiB
  caching_allocator b;
  for (int i = 0; i < 7; ++i) b.malloc(3 * MiB);  // six split one 20 MiB segment, the seventh needs another
  CHECK(b.reserved() == 40 * MiB);
  CHECK(b.allocated() == 21 * MiB);
  caching_allocator c;
  c.malloc(39 * MiB / 2);  // 19.5 MiB: remainder 0.5 MiB ≤ 1 MiB, not split: the whole block counts
  CHECK(c.allocated() == 20 * MiB);
  caching_allocator d;
  for (int i = 0; i < 1000; ++i) d.malloc(4096);
  CHECK(d.reserved() == 4 * MiB);
}

TEST_CASE("allocator: reuse within a pool and stream only", "[allocator]") {
  caching_allocator a;
  const int x = a.malloc(30 * MiB, 0);
  a.free(x);
  const int y = a.malloc(25 * MiB, 0);  // same stream: a smaller request reuses the freed 30 MiB segment
  CHECK(a.reserved() == 30 * MiB);
  a.free(y);
  a.malloc(25 * MiB, 1);  // another stream cannot use it: a new segment, 25 MiB rounded to 26
  CHECK(a.reserved() == 56 * MiB);
  caching_allocator b;  // worked example of allocator.md §8 part 1
  const int l = b.malloc(512 * MiB);
  b.free(l);
  const int f = b.malloc(1024 * MiB);
  CHECK(b.reserved() == 1536 * MiB);
  b.free(f);
  for (int i = 0; i < 30; ++i) b.malloc(20 * MiB);
  b.malloc(1024 * MiB);
  CHECK(b.reserved() == 2560 * MiB);
  CHECK(b.peak_reserved() == 2560 * MiB);
}

TEST_CASE("allocator: expandable segments and the out-of-memory path", "[allocator]") {
  allocator_settings s;
  s.expandable_segments = true;
  caching_allocator a(s);  // allocator.md §8 part 2: 1640 MiB instead of 2560
  const int l = a.malloc(512 * MiB);
  CHECK(a.reserved() == 520 * MiB);
  a.free(l);
  const int f = a.malloc(1024 * MiB);
  CHECK(a.reserved() == 1040 * MiB);
  a.free(f);
  for (int i = 0; i < 30; ++i) a.malloc(20 * MiB);
  a.malloc(1024 * MiB);
  CHECK(a.reserved() == 1640 * MiB);
  allocator_settings t;
  t.budget = 1024 * MiB;
  caching_allocator b(t);
  const int x = b.malloc(512 * MiB);
  b.free(x);
  b.malloc(1000 * MiB);  // fails, releases the free 512 MiB segment, retries: fits
  CHECK_FALSE(b.oom());
  CHECK(b.reserved() == 1000 * MiB);
  b.malloc(100 * MiB);
  CHECK(b.oom());
}

TEST_CASE("allocator: the step replay reproduces a measured H200 run", "[allocator]") {
  // llama3.2-1b, amp (fp32 weights, autocast bf16), micro-batch 1 × 2048, no checkpointing, fused AdamW:
  // measured peak allocated 22.586 GiB, peak reserved 23.459 GiB (h200-calibration.jsonl, first row)
  step_shape m;
  m.hidden = 2048; m.layers = 16; m.heads = 32; m.kv_heads = 8; m.head_dim = 64; m.intermediate = 8192;
  m.vocab = 128256; m.micro_batch = 1; m.seq = 2048; m.tied = true; m.workspace = 69'206'016;
  m.checkpointed.assign(16, false);
  caching_allocator a;
  const replay_result r = replay_step_trace(m, a);
  const double gib = 1073741824.0;
  CHECK(std::abs(r.peak_allocated / gib / 22.586 - 1) < 0.005);
  CHECK(std::abs(r.peak_reserved / gib / 23.459 - 1) < 0.01);
  CHECK_FALSE(r.oom);
}

namespace {

bwplan::gpu_spec b200_like() {  // the capacity only bounds the replay's budget; these shapes fit it
  bwplan::gpu_spec g;
  g.id = "b200";
  g.architecture = "blackwell";
  g.hbm_total = 183359 * bwplan::mib;
  g.driver_reserved = 454 * bwplan::mib;
  g.hbm_bandwidth = 8 * bwplan::tb_per_s;
  g.nvlink_per_direction = 900 * bwplan::gb_per_s;
  g.dense_flops["bf16"] = 2250 * bwplan::tflop_per_s;
  return g;
}

/// An allocator with expandable segments and `settings`' other fields whose one expandable segment holds a free block
/// of `bytes` (mapped: reserved() == bytes).
bwplan::alloc::caching_allocator expandable_with_free_block(bwplan::alloc::allocator_settings settings, std::uint64_t bytes) {
  settings.expandable_segments = true;
  bwplan::alloc::caching_allocator a(settings);
  a.free(a.malloc(bytes));
  return a;
}

bwplan::gpu_spec b200_fp8_like() {  // b200_like with an fp8 rate, so fp8 formats are supported
  bwplan::gpu_spec g = b200_like();
  g.dense_flops["fp8"] = 4500 * bwplan::tflop_per_s;
  return g;
}

bwplan::training_config fsdp_ranks(int ranks, int mbs, int seq, bool full_ac) {
  bwplan::training_config c;
  c.micro_batch = mbs;
  c.seq_len = seq;
  c.world_size = ranks;
  c.gpus_per_node = std::min(ranks, 8);
  c.ac = full_ac ? bwplan::checkpointing::full() : bwplan::checkpointing{};
  c.master = bwplan::master_weights::fp32;
  c.shard = bwplan::sharding::full;
  return c;
}

// The recipes the replay tests sweep, micro-batch `mbs` × `seq`: 0 one GPU under autocast (fp32 weights), 1 one GPU in
// pure bf16, 2 FSDP2 on one rank, 3 FSDP2 on 8 ranks (fp32 master weights, bf16 compute).
bwplan::training_config recipe_config(int recipe, int mbs, int seq) {
  bwplan::training_config c = fsdp_ranks(recipe == 3 ? 8 : 1, mbs, seq, false);
  if (recipe < 2) {
    c.shard = bwplan::sharding::none;
    c.master = recipe == 0 ? bwplan::master_weights::fp32 : bwplan::master_weights::bf16;
  }
  return c;
}

// A bundled model (configs/models/NAME.json).
bwplan::model_spec bundled_model(const char* name) {
  return bwplan::io::load_model((std::filesystem::path(BWPLAN_SOURCE_DIR) / "configs" / "models" / (std::string(name) + ".json")).string());
}

// The memory terms of Llama 3.1 8B on one GPU under autocast, micro-batch 1 × `seq`, in low-precision format `f` on the
// hf stack: torchao's eager Float8Linear (memory_shape::f8_linear) under autocast, which the fp8 bug tests hand-derive.
bwplan::memory_terms llama8b_autocast_terms(bwplan::compute_format f, int seq) {
  bwplan::training_config c = recipe_config(0, 1, seq);
  c.format = f;
  const bwplan::memory_terms t = bwplan::compute_memory_terms(bundled_model("llama-3.1-8b"), c, b200_fp8_like());
  REQUIRE(t.shape.f8_linear);
  REQUIRE(t.shape.amp);
  return t;
}

// Peak allocated bytes of the step trace `shape` replayed with settings `st` and no budget (nothing runs out).
double replay_peak(const step_shape& shape, allocator_settings st) {
  st.budget = std::uint64_t{1} << 42;
  caching_allocator a(st);
  return static_cast<double>(replay_step_trace(shape, a).peak_allocated);
}

// Peak allocated bytes of the liveness walk alone (the cheap bound: no replay).
double walk_peak(const bwplan::model_spec& m, const bwplan::training_config& c, const bwplan::gpu_spec& g) {
  bwplan::runtime_overheads walk;
  walk.replay = bwplan::runtime_overheads::replay_policy::never;
  return bwplan::estimate_memory(m, c, g, walk).peak_allocated.raw();
}

/// The low-precision replay tests' grid: Llama 3.2 1B, Llama 3.1 8B and Qwen3 0.6B, the recipes from `first_recipe`
/// (recipe_config), no checkpointing or every 1st / 2nd block, micro-batch 1 and 4 × 2048, accumulation 1 and 4:
/// calls `f(model, config)` for each.
template <class Fn>
void for_each_low_precision_case(int first_recipe, Fn&& f) {
  for (const char* name : {"llama-3.2-1b", "llama-3.1-8b", "qwen3-0.6b"}) {
    const bwplan::model_spec m = bundled_model(name);
    for (int recipe = first_recipe; recipe < 4; ++recipe)
      for (int ac = 0; ac < 3; ++ac)
        for (int mbs : {1, 4})
          for (int ga : {1, 4}) {
            bwplan::training_config c = recipe_config(recipe, mbs, 2048);
            c.ac = ac == 0 ? bwplan::checkpointing{} : bwplan::checkpointing::full(ac);
            c.grad_accum = ga;
            INFO(name << " recipe " << recipe << " ac " << ac << " mbs " << mbs << " ga " << ga);
            f(m, c);
          }
  }
}

/// Peak allocated of the step trace and of the walk for the low-precision plan `c` and for its bf16 twin `bf`, after
/// checking that the trace describes `c` (replayable, its first block low-precision, the estimate replayed).
struct trace_and_walk {
  double traced, cheap, traced_bf, cheap_bf;
  bool mxfp8;
};
trace_and_walk low_precision_peaks(const bwplan::model_spec& m, const bwplan::training_config& c,
                                   const bwplan::training_config& bf, const bwplan::gpu_spec& g) {
  using namespace bwplan;
  const memory_terms t = compute_memory_terms(m, c, g), tb = compute_memory_terms(m, bf, g);
  REQUIRE(t.replay.replayable);
  REQUIRE(t.replay.shape.float8.size() == static_cast<std::size_t>(m.layers));
  CHECK(t.replay.shape.float8.front());
  CHECK(compose_memory(t).replayed);
  return {replay_peak(t.replay.shape, t.replay.settings), walk_peak(m, c, g), replay_peak(tb.replay.shape, tb.replay.settings),
          walk_peak(m, bf, g), t.replay.shape.mxfp8};
}

}  // namespace

TEST_CASE("allocator: FSDP2 across ranks shards the parameters, gradients and AdamW states", "[allocator]") {
  // A small Llama layout whose dims divide 8 (no padding) and whose tensors are multiples of 512 B: the bytes alive
  // after the last step are the fp32 shards, their AdamW states (12 B per sharded element) and shape-independent
  // small tensors, so going from 4 to 8 ranks frees exactly 12 · (P/4 − P/8) bytes.
  step_shape m;
  m.hidden = 1024; m.layers = 4; m.heads = 8; m.kv_heads = 8; m.head_dim = 128; m.intermediate = 4096;
  m.vocab = 32768; m.micro_batch = 1; m.seq = 1024; m.tied = false; m.fsdp2 = true; m.meta_init = true;
  m.checkpointed.assign(4, false);
  const std::uint64_t P = 4 * (2 * 1024 + 4 * 1024 * 1024 + 3 * 1024 * 4096) + 2 * 32768 * 1024 + 1024;
  std::uint64_t end[2] = {0, 0};
  for (int j = 0; j < 2; ++j) {
    m.shards = j == 0 ? 4 : 8;
    caching_allocator a;
    const replay_result r = replay_step_trace(m, a);
    CHECK_FALSE(r.oom);
    end[j] = a.allocated();
  }
  // the 1-D tensors (norms: 1024 elements, 4 KiB fp32 → 512 B and 1 KiB shards) round to 512 B at 8 ranks as at 4:
  // 1024·4/8 = 512 B, 1024·4/4 = 1 KiB, so they follow 12·(P/4 − P/8) too
  CHECK(end[0] - end[1] == 12 * (P / 4 - P / 8));
  // a dim 0 that does not divide: FSDP2 pads each shard to ceil(dim0 / N) rows. Vocabulary 32769 on 4 ranks: the
  // embedding and the untied head shards are 8193 × 1024, not 32769 · 1024 / 4 elements, 12 B each with their states
  m.shards = 4;
  std::uint64_t pad[2] = {0, 0};
  for (int j = 0; j < 2; ++j) {
    m.vocab = j == 0 ? 32768 : 32769;
    caching_allocator a;
    (void)replay_step_trace(m, a);
    pad[j] = a.allocated();
  }
  CHECK(pad[1] - pad[0] == 12 * 2 * 1024);
  m.vocab = 32768;
  // one rank built on the device (measure.py) and on the meta device differ only before the first step
  m.shards = 1;
  caching_allocator on_device, on_meta;
  m.meta_init = false;
  const replay_result d = replay_step_trace(m, on_device);
  m.meta_init = true;
  const replay_result e = replay_step_trace(m, on_meta);
  CHECK(on_device.allocated() == on_meta.allocated());
  CHECK(d.peak_allocated == e.peak_allocated);
}

TEST_CASE("allocator: the FSDP2 replay across ranks agrees with the liveness walk", "[allocator]") {
  // Llama-3.1-8B, FSDP2 full sharding with fp32 master weights on 8 and 16 ranks: the replay is the estimate's peak
  // reserved, and its peak allocated stays within 3 % of the walk's (the walk counts terms, the trace tensors); hybrid
  // sharding replays as FSDP2 over its shard group
  using namespace bwplan;
  const model_spec m = test::llama_8b();
  const gpu_spec g = b200_like();
  for (int ranks : {8, 16})
    for (bool full_ac : {false, true})
      for (auto [mbs, seq] : {std::pair{1, 2048}, std::pair{2, 8192}}) {
        const training_config c = fsdp_ranks(ranks, mbs, seq, full_ac);
        INFO("ranks " << ranks << " full AC " << full_ac << " " << mbs << " x " << seq);
        const memory_terms t = compute_memory_terms(m, c, g);
        REQUIRE(t.replay.replayable);
        CHECK(t.replay.shape.shards == ranks);
        CHECK(t.replay.shape.meta_init);
        const memory_estimate e = compose_memory(t);
        CHECK(e.replayed);
        CHECK(e.fits);
        allocator_settings st = t.replay.settings;
        st.budget = std::uint64_t{1} << 42;
        caching_allocator a(st);
        const replay_result r = replay_step_trace(t.replay.shape, a);
        CHECK(std::abs(static_cast<double>(r.peak_allocated) / e.peak_allocated.raw() - 1) < 0.03);
        CHECK(e.peak_reserved >= e.peak_allocated);
      }
  // hybrid sharding (HSDP) over two replicas of 8 allocates what FSDP2 over those 8 does (its all-reduce across
  // replicas runs in place on the reduce-scatter output): the same trace, the same replayed peak; before, it kept the
  // cheap bound
  for (bool full_ac : {false, true}) {
    training_config hsdp = fsdp_ranks(16, 1, 2048, full_ac);
    hsdp.shard = sharding::hybrid;
    REQUIRE(terms::replayable(m, hsdp));
    const memory_terms th = compute_memory_terms(m, hsdp, g);
    CHECK(th.replay.shape.shards == 8);
    CHECK(th.replay.shape.meta_init);
    const memory_estimate eh = compose_memory(th);
    const memory_estimate e8 = estimate_memory(m, fsdp_ranks(8, 1, 2048, full_ac), g);
    CHECK(eh.replayed);
    CHECK(eh.peak_reserved == e8.peak_reserved);
    hsdp.shard_group = 4;  // a narrower shard group: four replicas of 4
    CHECK(compute_memory_terms(m, hsdp, g).replay.shape.shards == 4);
    CHECK(estimate_memory(m, hsdp, g).peak_reserved == estimate_memory(m, fsdp_ranks(4, 1, 2048, full_ac), g).peak_reserved);
  }
  // not traced: tensor parallelism
  training_config tp = fsdp_ranks(16, 1, 2048, true);
  tp.tp = 2;
  CHECK_FALSE(terms::replayable(m, tp));
}

TEST_CASE("allocator: FSDP2 grad-op (reshard_after_forward=False) is replayed and agrees with the liveness walk", "[allocator]") {
  // The trainer's sharding grad-op is fully_shard(..., reshard_after_forward=False) on every block and the root
  // (apps/train/bwtrain/parallel.py apply_fsdp): each block stays gathered from its forward to its post-backward, and
  // backward gathers nothing. It kept the cheap bound ("this sharding"). Now the trace runs it: its peak allocated
  // against the walk's (memory_shape::grad_op: every block kept gathered, weight_copies::grad_op_all) on two models,
  // 8 and 16 ranks, with and without checkpointing, gradient accumulation 1 and 4: within 3 %; the peak is above full
  // sharding's, by less than every block's gathered parameters.
  using namespace bwplan;
  const gpu_spec g = b200_like();
  for (const char* name : {"llama-3.2-1b", "llama-3.1-8b"}) {
    const model_spec m = bundled_model(name);
    for (int ranks : {8, 16})
      for (bool full_ac : {false, true})
        for (int ga : {1, 4}) {
          training_config c = fsdp_ranks(ranks, 2, 4096, full_ac);
          c.grad_accum = ga;
          training_config full = c;
          c.shard = sharding::grad_op;
          INFO(name << " ranks " << ranks << " full AC " << full_ac << " ga " << ga);
          const memory_terms t = compute_memory_terms(m, c, g), tf = compute_memory_terms(m, full, g);
          REQUIRE(t.replay.replayable);
          CHECK_FALSE(t.replay.shape.reshard_after_forward);
          CHECK(tf.replay.shape.reshard_after_forward);
          CHECK(t.replay.shape.shards == ranks);
          const memory_estimate e = compose_memory(t);
          CHECK(e.replayed);
          const double traced = replay_peak(t.replay.shape, t.replay.settings), cheap = walk_peak(m, c, g);
          CHECK(std::abs(traced / cheap - 1) < 0.03);
          // every block's bf16 parameters, gathered (each parameter padded to a multiple of the ranks on dim 0)
          const double gathered = t.weights.grad_op_all.raw();
          CHECK(gathered == Approx(2.0 * static_cast<double>(count_parameters(m).block_linear + count_parameters(m).block_other) *
                                   static_cast<double>(m.layers)).epsilon(0.01));
          const double more = traced - replay_peak(tf.replay.shape, tf.replay.settings);
          CHECK(more > 0);
          CHECK(more < gathered + 64.0 * MiB);
        }
  }
}

TEST_CASE("bug: FSDP2 backward gathered a prefetched block's parameters at the prefetch, and the loss backward's prefetch was dropped", "[allocator][bugs]") {
  // In backward FSDP2 runs, per group, `wait_for_unshard` (the copy-out allocates the unsharded parameters and frees the
  // all-gather output at once) and then `_backward_prefetch` (the next group's all-gather output); the root's
  // pre-backward hook sits on the loss (the hf stack computes it inside the root) and prefetches block L - 1 before the
  // loss backward (torch/distributed/fsdp/_fully_shard/_fsdp_param_group.py `pre_backward`, `wait_for_unshard`;
  // _fsdp_state.py `_post_forward`, `_pre_backward`). The trace allocated the prefetched block's unsharded parameters
  // with its all-gather, so each block's backward held one gathered block more than FSDP2 (a known difference in
  // docs/methodology.md); a review found that a later change freeing the forward's last all-gather output at the root's
  // post-forward had dropped the loss backward's prefetch, and the walk had never counted it; on one rank FSDP2 gathers
  // nothing at all (the measured one-GPU fsdp2 rows agree). Now both follow FSDP2:
  // Llama 3.2 1B on 8 ranks, 1 x 4096, full checkpointing, trace vs walk +1.38 % -> +0.03 %; 4 x 4096 +0.44 % -> +0.02 %;
  // Llama 3.1 8B 4 x 4096 +1.00 % -> +0.01 %.
  using namespace bwplan;
  const gpu_spec g = b200_like();
  for (auto [name, mbs] : {std::pair{"llama-3.2-1b", 1}, std::pair{"llama-3.2-1b", 4}, std::pair{"llama-3.1-8b", 4}}) {
    const model_spec m = bundled_model(name);
    const training_config c = fsdp_ranks(8, mbs, 4096, true);
    const memory_terms t = compute_memory_terms(m, c, g);
    REQUIRE(t.replay.replayable);
    INFO(name << " " << mbs << " x 4096");
    CHECK(std::abs(replay_peak(t.replay.shape, t.replay.settings) / walk_peak(m, c, g) - 1) < 0.002);
    // the walk's prefetched block at the loss backward: one gathered block, bf16; none under grad-op (the block is still
    // gathered) or where the loss runs outside the root (torchtitan)
    CHECK(t.weights.fsdp_loss_prefetch.raw() == Approx(2.0 * static_cast<double>(count_parameters(m).block())).epsilon(0.01));
    training_config go = c;
    go.shard = sharding::grad_op;
    CHECK(compute_memory_terms(m, go, g).weights.fsdp_loss_prefetch.raw() == 0);
    training_config tt = c;
    tt.stack = training_stack::torchtitan;
    CHECK(compute_memory_terms(m, tt, g).weights.fsdp_loss_prefetch.raw() == 0);
    // one rank gathers nothing (FSDPParamGroup.unshard, `world_size == 1`): no prefetched all-gather output, one block's
    // unsharded parameters while it runs
    const memory_terms t1 = compute_memory_terms(m, fsdp_ranks(1, mbs, 4096, true), g);
    CHECK(t1.weights.fsdp_loss_prefetch.raw() == 0);
    CHECK(t1.weights.fsdp_gathered.raw() == Approx(2.0 * static_cast<double>(count_parameters(m).block())).epsilon(0.01));
    CHECK(t.weights.fsdp_gathered.raw() == Approx(2 * t1.weights.fsdp_gathered.raw()).epsilon(0.01));
  }
}

TEST_CASE("allocator: DDP's buckets are grouped as the Reducer groups them", "[allocator]") {
  // compute_bucket_assignment_by_size (torch/csrc/distributed/c10d/reducer.cpp): a tensor joins the open bucket, which
  // closes once it reaches the current limit; the limits advance and the last one stays. Hand-made sizes, MiB.
  using bwplan::alloc::bucket_assignment;
  const std::uint64_t K = MiB / 4;  // 0.25 MiB
  CHECK(bucket_assignment({2 * K, 3 * K, 40 * K, 120 * K, 20 * K, 20 * K}, {MiB, 25 * MiB}) ==
        std::vector<std::uint64_t>{5 * K, 160 * K, 40 * K});
  CHECK(bucket_assignment({30 * MiB, 30 * MiB}, {MiB, 25 * MiB}) == std::vector<std::uint64_t>{30 * MiB, 30 * MiB});
  // DDP's construction without find_unused_parameters: one bucket of everything (bucket_size_limits = [sys.maxsize])
  CHECK(bucket_assignment({30 * MiB, 3 * K, 30 * MiB}, {}) == std::vector<std::uint64_t>{60 * MiB + 3 * K});
  CHECK(bucket_assignment({}, {MiB}).empty());
}

TEST_CASE("allocator: DDP (the trainer's sharding none over several GPUs) is replayed and agrees with the liveness walk", "[allocator]") {
  // DDP kept the cheap bound ("DDP"). The trace now builds the model on the meta device in the master dtype (the
  // trainer's build_on_meta), runs DDP's coalesced broadcast and its one construction bucket, and rebuilds the buckets
  // at the second step (step_shape::ddp). Against the walk (ddp_buckets: w·P all step) on three models, under autocast
  // and in pure bf16 on 8 ranks, every checkpointing mode, micro-batch 1 and 4, gradient accumulation 1 and 4: within
  // 3 %; and the buckets are w·P beside what one GPU holds: the DDP trace's peak allocated is one GPU's plus w·P.
  using namespace bwplan;
  const gpu_spec g = b200_like();
  for (const char* name : {"llama-3.2-1b", "llama-3.1-8b", "qwen3-0.6b"}) {
    const model_spec m = bundled_model(name);
    for (int recipe : {0, 1})
      for (int ac = 0; ac < 3; ++ac)
        for (int mbs : {1, 4})
          for (int ga : {1, 4}) {
            training_config one = recipe_config(recipe, mbs, 2048);
            one.ac = ac == 0 ? checkpointing{} : checkpointing::full(ac);
            one.grad_accum = ga;
            training_config c = one;
            c.world_size = 8;
            c.gpus_per_node = 8;
            INFO(name << " recipe " << recipe << " ac " << ac << " mbs " << mbs << " ga " << ga);
            const memory_terms t = compute_memory_terms(m, c, g), t1 = compute_memory_terms(m, one, g);
            REQUIRE(t.replay.replayable);
            CHECK(t.replay.shape.ddp);
            CHECK(t.replay.shape.meta_init);
            CHECK_FALSE(t1.replay.shape.ddp);
            CHECK(compose_memory(t).replayed);
            const double traced = replay_peak(t.replay.shape, t.replay.settings), cheap = walk_peak(m, c, g);
            CHECK(std::abs(traced / cheap - 1) < 0.03);
            const double buckets = t.weights.ddp_buckets.raw();
            CHECK(buckets == Approx((recipe == 0 ? 4.0 : 2.0) * static_cast<double>(count_parameters(m).total())).epsilon(1e-6));
            CHECK(traced - replay_peak(t1.replay.shape, t1.replay.settings) == Approx(buckets).margin(64.0 * MiB));
          }
  }
}

TEST_CASE("allocator: gradient accumulation: the replay agrees with the liveness walk, later micro-batches repeat the second", "[allocator]") {
  // Gradient accumulation (2 and 4 micro-batches per step) under the three recipes the trace describes: one GPU under
  // autocast, pure bf16, FSDP2 on 8 ranks. The estimate is replayed (it took the cheap bound before); the replay's peak
  // allocated stays within 1.5 % of the walk's (3 % for FSDP2), which holds the gradients across micro-batches; the third and fourth
  // micro-batches allocate and free exactly what the second does, so replaying two per step gives the same peaks as
  // replaying all of them (the cuBLAS workspace is allocated once, at the first matmul of the run).
  using namespace bwplan;
  const model_spec m = test::llama_8b();
  const gpu_spec g = b200_like();
  for (int recipe = 0; recipe < 3; ++recipe)
    for (bool full_ac : {false, true}) {
      training_config c = fsdp_ranks(8, 1, 4096, full_ac);
      if (recipe < 2) {
        c.world_size = 1;
        c.gpus_per_node = 1;
        c.shard = sharding::none;
        c.master = recipe == 0 ? master_weights::fp32 : master_weights::bf16;
      }
      INFO("recipe " << recipe << " full AC " << full_ac);
      c.grad_accum = 1;
      const memory_estimate one = estimate_memory(m, c, g);
      c.grad_accum = 4;
      const memory_terms t = compute_memory_terms(m, c, g);
      REQUIRE(t.replay.replayable);
      CHECK(t.replay.shape.grad_accum == 2);
      const memory_estimate e = compose_memory(t);
      CHECK(e.replayed);
      CHECK(e.peak_allocated >= one.peak_allocated);  // the gradients are held from the first micro-batch on
      allocator_settings st = t.replay.settings;
      st.budget = std::uint64_t{1} << 42;
      alloc::step_shape all = t.replay.shape;
      all.grad_accum = 4;
      caching_allocator a2(st), a4(st);
      const replay_result r2 = replay_step_trace(t.replay.shape, a2);
      const replay_result r4 = replay_step_trace(all, a4);
      // (FSDP2: 3 %, as across ranks without accumulation: the trace holds the prefetched block's unsharded parameters
      // from the all-gather on, one gathered block more than FSDP2 while a block runs backward)
      CHECK(std::abs(static_cast<double>(r2.peak_allocated) / e.peak_allocated.raw() - 1) < (recipe == 2 ? 0.03 : 0.015));
      CHECK(r4.peak_allocated == r2.peak_allocated);
      CHECK(r4.peak_reserved == r2.peak_reserved);
      CHECK(a4.allocated() == a2.allocated());
    }
}

TEST_CASE("allocator: q/k norms (Qwen3) are replayed op by op and agree with the liveness walk", "[allocator]") {
  // Qwen3's per-head q_norm / k_norm (transformers' eager Qwen3RMSNorm over head_dim, before RoPE) kept these models
  // from the step trace: their peak reserved and fit verdict came from the cheap bound. Now the trace runs the norms'
  // ops (fp32 copy, pow, mean, rsqrt, the normalized bf16 tensor, the weight's mul: fp32 under autocast, so RoPE runs
  // in fp32 and SDPA casts q and k back to bf16) and their backward. Checked against the liveness walk, which counts
  // the same bytes as per-token terms: peak allocated within 1.5 % under autocast, pure bf16 and FSDP2 on 8 ranks, each
  // checkpointing mode and both module settings; and without checkpointing what the norms add, by hand per block and
  // token: 6 B per element of q and k (fp32 copy + bf16 normalized) + 4 B per head of q and k (rstd).
  using namespace bwplan;
  const gpu_spec g = b200_like();
  for (const char* name : {"qwen3-0.6b", "qwen3-8b"}) {
    const model_spec m = bundled_model(name);
    REQUIRE(m.qk_norm);
    model_spec plain = m;
    plain.qk_norm = false;
    for (int recipe : {0, 1, 3})
      for (int ac = 0; ac < 3; ++ac)
        for (auto modules : {module_kernels::fused, module_kernels::transformers}) {
          training_config c = recipe_config(recipe, 2, 2048);
          c.ac = ac == 0 ? checkpointing{} : checkpointing::full(ac);  // none, every block, every second block
          c.modules = modules;
          INFO(name << " recipe " << recipe << " ac " << ac << " modules " << (modules == module_kernels::fused ? "fused" : "transformers"));
          CHECK(terms::replay_blocker(m, c) == nullptr);
          const memory_terms t = compute_memory_terms(m, c, g);
          REQUIRE(t.replay.replayable);
          CHECK(t.replay.shape.qk_norm);
          CHECK(compose_memory(t).replayed);
          const double traced = replay_peak(t.replay.shape, t.replay.settings), cheap = walk_peak(m, c, g);
          CHECK(std::abs(traced / cheap - 1) < 0.015);
          if (ac != 0) continue;
          step_shape without = t.replay.shape;
          without.qk_norm = false;
          const double added = traced - replay_peak(without, t.replay.settings);
          const double per_block_token = 6.0 * static_cast<double>(m.q_dim() + m.kv_dim()) + 4.0 * static_cast<double>(m.heads + m.kv_heads);
          CHECK(added == Approx(static_cast<double>(m.layers) * 4096 * per_block_token).epsilon(0.01));
          CHECK(added == Approx(cheap - walk_peak(plain, c, g)).epsilon(0.01));
        }
  }
}

TEST_CASE("allocator: the hf stack's chunked loss (the trainer's checkpointed chunks) is replayed and agrees with the liveness walk", "[allocator]") {
  // apps/train/bwtrain/loss.py `chunked_loss`: 8 chunks, each LM head + fp32 cross-entropy under a non-reentrant
  // checkpoint, recomputed last to first in backward. Such plans kept the cheap bound (it priced Liger's loss, which
  // the trainer does not run). The trace's peak allocated against the walk's on three models, one GPU under autocast
  // and in pure bf16, FSDP2 on one and on 8 ranks, every checkpointing mode, micro-batch 2 and 4 × 2048, with and
  // without gradient accumulation: within 3 % (with accumulation over 8 ranks the walk missed FSDP2's unsharded head
  // gradient, built anew each micro-batch while the chunks run: up to 12.6 % low before);
  // and it holds less than the standard loss wherever the loss sets the peak (no checkpointing, one GPU).
  using namespace bwplan;
  const gpu_spec g = b200_like();
  for (const char* name : {"llama-3.2-1b", "llama-3.1-8b", "qwen3-0.6b"}) {
    const model_spec m = bundled_model(name);
    for (int recipe = 0; recipe < 4; ++recipe)
      for (int ac = 0; ac < 3; ++ac)
        for (int mbs : {2, 4})
          for (int ga : {1, 4}) {
            training_config c = recipe_config(recipe, mbs, 2048);
            c.ac = ac == 0 ? checkpointing{} : checkpointing::full(ac);
            c.loss = loss_impl::chunked;
            c.grad_accum = ga;
            INFO(name << " recipe " << recipe << " ac " << ac << " mbs " << mbs << " grad accum " << ga);
            const memory_terms t = compute_memory_terms(m, c, g);
            REQUIRE(t.replay.replayable);
            CHECK(t.replay.shape.chunked_loss);
            CHECK(compose_memory(t).replayed);
            const double traced = replay_peak(t.replay.shape, t.replay.settings);
            CHECK(std::abs(traced / walk_peak(m, c, g) - 1) < 0.03);
            if (ac == 0 && recipe < 2 && ga == 1) {
              step_shape standard = t.replay.shape;
              standard.chunked_loss = false;
              CHECK(traced < replay_peak(standard, t.replay.settings));
            }
          }
  }
}

TEST_CASE("allocator: fp8 (torchao's eager Float8Linear, the reference trainer's) is replayed op by op and agrees with the liveness walk", "[allocator]") {
  // The trainer's fp8 is torchao 0.18's Float8Linear (apps/train/bwtrain/precision.py), whose forward saves the bf16
  // input, not its float8 cast (`matmul_with_hp_or_float8_args`, torchao/float8/float8_linear.py @v0.18.0), calls no
  // F.linear (under autocast no cached bf16 weight copy) and casts in eager ops (fp32 scaled tensor, clamp, float8).
  // fp8 plans kept the cheap bound ("low-precision GEMMs"), whose walk saved 1 B per linear input and held autocast
  // copies of every quantized block. Now the trace runs each linear's casts and GEMMs; its peak allocated against the
  // walk's on three models, one GPU under autocast and in pure bf16, FSDP2 on one and on 8 ranks, every checkpointing
  // mode, both module settings, micro-batch 1 and 4 × 2048, with and without gradient accumulation: within 3 %, and
  // within 1.5 % wherever the bf16 plan's trace and walk are within 1 %.
  using namespace bwplan;
  const gpu_spec g = b200_fp8_like();
  for (const char* name : {"llama-3.2-1b", "llama-3.1-8b", "qwen3-0.6b"}) {
    const model_spec m = bundled_model(name);
    for (int recipe = 0; recipe < 4; ++recipe)
      for (int ac = 0; ac < 3; ++ac)
        for (int mbs : {1, 4})
          for (int ga : {1, 4})
            for (auto modules : {module_kernels::fused, module_kernels::transformers}) {
              training_config c = recipe_config(recipe, mbs, 2048);
              c.ac = ac == 0 ? checkpointing{} : checkpointing::full(ac);
              c.grad_accum = ga;
              c.modules = modules;
              training_config bf = c;
              c.format = compute_format::fp8;
              INFO(name << " recipe " << recipe << " ac " << ac << " mbs " << mbs << " ga " << ga << " modules " << (modules == module_kernels::fused ? "fused" : "transformers"));
              const auto [traced, cheap, traced_bf, cheap_bf, mx] = low_precision_peaks(m, c, bf, g);
              CHECK_FALSE(mx);
              CHECK(std::abs(traced / cheap - 1) < 0.03);
              // where the fp8 plan's peak is a moment the walk already misses for bf16 at another checkpointing mode
              // (Llama 3.2 1B, one GPU, micro-batch 1: 2.97 % with every block checkpointed, bf16 or fp8) the fp8
              // plan inherits it
              // (FSDP2 on 8 ranks, micro-batch 1 with accumulation: the walk adds the gate's largest cast moment to the
              // whole block's bf16 weight gradients, where the trace's gate runs with the MLP's two before it only:
              // the walk is up to 1.7 % above)
              if (std::abs(traced_bf / cheap_bf - 1) < 0.01 && !(recipe == 0 && mbs == 1)) CHECK(std::abs(traced / cheap - 1) < (recipe == 3 ? 0.02 : 0.015));
            }
  }
}

TEST_CASE("allocator: fp8-rowwise (torchao's rowwise Float8Linear) is replayed with its fp32 backward rescale and agrees with the walk", "[allocator]") {
  // The trainer's fp8-rowwise is the same Float8Linear with `Float8LinearConfig.from_recipe_name("rowwise")`: axiswise
  // scales and both backward GEMMs without fast accumulation, which `addmm_float8_unwrapped` runs with unit scales and
  // then scales in place by an fp32 rows x cols tensor (torchao/float8/float8_ops.py @v0.18.0). Rowwise plans kept the
  // cheap bound ("low-precision GEMMs"), whose walk left the rescale tensors out. Now the trace runs them; its peak
  // allocated against the walk's: within 3 % on the grid of the tensorwise test (fused modules), and the rowwise peak
  // is not below the tensorwise one.
  using namespace bwplan;
  const gpu_spec g = b200_fp8_like();
  for_each_low_precision_case(0, [&](const model_spec& m, training_config c) {
    c.format = compute_format::fp8_rowwise;
    training_config tw = c;
    tw.format = compute_format::fp8;
    const memory_terms t = compute_memory_terms(m, c, g), tt = compute_memory_terms(m, tw, g);
    REQUIRE(t.replay.replayable);
    CHECK(t.replay.shape.float8_rowwise);
    CHECK_FALSE(tt.replay.shape.float8_rowwise);
    REQUIRE(t.replay.shape.float8.size() == static_cast<std::size_t>(m.layers));
    CHECK(compose_memory(t).replayed);
    const double traced = replay_peak(t.replay.shape, t.replay.settings), cheap = walk_peak(m, c, g);
    CHECK(std::abs(traced / cheap - 1) < 0.03);
    // (peak allocated counts whole blocks the allocator does not split, up to 1 MiB over the request each, so
    // two traces with other requests can differ by a few MiB that way)
    CHECK(traced >= replay_peak(tt.replay.shape, tt.replay.settings) - 4.0 * MiB);
  });
}

TEST_CASE("allocator: mxfp8 (torchao's MXFP8 linear, the reference trainer's) is replayed op by op and agrees with the walk", "[allocator]") {
  // The trainer's mxfp8 is torchao 0.18's MXFP8TrainingOpConfig: the weight wrapper's F.linear override runs mx_mm
  // (torchao/prototype/moe_training/mxfp8_linear.py @v0.18.0), which saves the bf16 input and the weight like
  // Float8Linear and casts in one kernel per tensor (e4m3 + one E8M0 scale per 32), both GEMMs copying their scales into
  // the blocked layout. mxfp8 plans kept the cheap bound ("low-precision GEMMs"). Now the trace runs each linear's
  // casts and GEMMs (step_shape::mxfp8); its peak allocated against the walk's (terms::mx_linear_casts) on three models,
  // pure bf16 on one GPU, FSDP2 on one and on 8 ranks (autocast is refused), every checkpointing mode, micro-batch 1 and
  // 4 × 2048, with and without accumulation: within 3 %, and within 1.5 % wherever the bf16 plan's are within 1 %.
  using namespace bwplan;
  const gpu_spec g = b200_fp8_like();
  for_each_low_precision_case(1, [&](const model_spec& m, training_config c) {
    training_config bf = c;
    c.format = compute_format::mxfp8;
    const auto [traced, cheap, traced_bf, cheap_bf, mx] = low_precision_peaks(m, c, bf, g);
    CHECK(mx);
    CHECK(std::abs(traced / cheap - 1) < 0.03);
    if (std::abs(traced_bf / cheap_bf - 1) < 0.01) CHECK(std::abs(traced / cheap - 1) < 0.015);
  });
}

TEST_CASE("bug: fp8-rowwise left out the fp32 rescale of its backward GEMMs", "[memory][bugs]") {
  // torchao's rowwise recipe runs grad_input and grad_weight without fast accumulation: `addmm_float8_unwrapped` calls
  // `torch._scaled_mm` with unit scales and multiplies the bf16 output in place by `post_inverse_scale`, the fp32 outer
  // product of the row and column scales (rows x in, then out x in). The walk priced the tensorwise casts only.
  // Hand-derived on Llama 3.1 8B, one GPU under autocast, 1 x 3072 tokens (T), where the gate's (h -> F) weight-gradient
  // moment is the largest: its gradient cast twice (2·T·F), the weight cast (F·h), the saved input cast (T·h), grad_input
  // (2·T·h), the two layout copies (T·F + T·h), the rescale (4·F·h) and the weight gradient (2·F·h), held against a
  // bf16 linear's 2·T·h + 2·F·h: 3·T·F + 5·F·h + 2·T·h. Tensorwise has no rescale, and its largest moment is the
  // gate's fp32 weight cast (9·F·h beside the gradient's float8 T·F): T·F + 7·F·h − 2·T·h.
  using namespace bwplan;
  const double T = 3072, h = 4096, F = 14336;
  CHECK(llama8b_autocast_terms(compute_format::fp8_rowwise, 3072).weights.quantized_block.raw() ==
        Approx(3 * T * F + 5 * F * h + 2 * T * h));
  CHECK(llama8b_autocast_terms(compute_format::fp8, 3072).weights.quantized_block.raw() == Approx(T * F + 7 * F * h - 2 * T * h));
}

TEST_CASE("allocator: a replay asked only for the verdict stops past the threshold with the whole replay's verdict", "[allocator]") {
  // search_plans replays near-the-line candidates only to learn whether the device peak stays under its headroom
  // limit; peak reserved only grows, so once it passes the limit (or a request runs out of memory) the rest of the
  // step cannot change the answer. Against whole replays of fp8 and bf16 plans: stopped exactly when the whole
  // replay's peak passes the threshold, and an unstopped replay gives the whole replay's peaks.
  using namespace bwplan;
  const gpu_spec g = b200_fp8_like();
  const model_spec m = bundled_model("llama-3.1-8b");
  for (int recipe : {0, 3})
    for (auto f : {compute_format::bf16, compute_format::fp8}) {
      training_config c = recipe_config(recipe, 2, 4096);
      c.format = f;
      const memory_terms t = compute_memory_terms(m, c, g);
      REQUIRE(t.replay.replayable);
      allocator_settings st = t.replay.settings;
      st.budget = std::uint64_t{1} << 42;
      caching_allocator whole_a(st);
      const replay_result whole = replay_step_trace(t.replay.shape, whole_a);
      CHECK_FALSE(whole.stopped);
      for (double share : {0.5, 0.9, 0.999, 1.0, 1.2}) {
        step_shape s = t.replay.shape;
        s.stop_reserved_above = static_cast<std::uint64_t>(share * static_cast<double>(whole.peak_reserved));
        caching_allocator a(st);
        const replay_result r = replay_step_trace(s, a);
        INFO("recipe " << recipe << " " << to_string(f) << " threshold " << share);
        CHECK(r.stopped == (whole.peak_reserved > s.stop_reserved_above));
        if (r.stopped) CHECK(r.peak_reserved > s.stop_reserved_above);
        else CHECK(r.peak_reserved == whole.peak_reserved);
        if (!r.stopped) CHECK(r.peak_allocated == whole.peak_allocated);
      }
    }
}

TEST_CASE("allocator: a replay asked only for the verdict stops in the first step once its requests and the states to come pass the threshold", "[allocator]") {
  // The second step makes the first one's requests with the AdamW states held, and reserved >= allocated >= the live
  // requests, so during the first step's micro-batches `requested() + states` bounds the replay's peak from below: a
  // threshold between the first step's own peak and the whole replay's is often passed there, before the step ends. The
  // bound never exceeds the whole replay's peak (it is a lower bound) and the verdict is the whole replay's, on one GPU
  // under autocast and across 8 FSDP2 ranks, default and expandable segments, with and without accumulation.
  using namespace bwplan;
  const gpu_spec g = b200_fp8_like();
  const model_spec m = bundled_model("llama-3.1-8b");
  int configs = 0, configs_early = 0;
  for (int recipe : {0, 3})
    for (bool expandable : {false, true})
      for (int accum : {1, 2}) {
        training_config c = recipe_config(recipe, 1, 4096);
        c.expandable_segments = expandable;
        c.grad_accum = accum;
        const memory_terms t = compute_memory_terms(m, c, g);
        REQUIRE(t.replay.replayable);
        allocator_settings st = t.replay.settings;
        st.budget = std::uint64_t{1} << 42;
        caching_allocator whole_a(st), first_a(st);
        const replay_result whole = replay_step_trace(t.replay.shape, whole_a);
        step_shape one = t.replay.shape;
        one.steps = 1;  // the first step alone: its own peak
        const replay_result first = replay_step_trace(one, first_a);
        INFO("recipe " << recipe << " expandable " << expandable << " accum " << accum);
        REQUIRE(whole.peak_reserved > first.peak_reserved);
        int early = 0;
        for (double f : {0.0, 0.25, 0.5, 0.75, 0.999}) {
          step_shape s = t.replay.shape;
          s.stop_reserved_above = first.peak_reserved +
                                  static_cast<std::uint64_t>(f * static_cast<double>(whole.peak_reserved - first.peak_reserved));
          caching_allocator a(st);
          const replay_result r = replay_step_trace(s, a);
          INFO("threshold share " << f);
          CHECK(r.stopped);  // the whole replay passes it
          CHECK(r.peak_reserved > s.stop_reserved_above);
          CHECK(r.peak_reserved <= whole.peak_reserved);  // a lower bound of the whole replay's peak
          early += r.steps == 0 ? 1 : 0;  // stopped in the first step, whose own peak is under the threshold
        }
        ++configs;
        configs_early += early > 0 ? 1 : 0;
      }
  CHECK(configs_early >= configs / 2);  // 5 of the 8 (where the allocator's own reserved does not already exceed it)
}

TEST_CASE("allocator: best fit across the pool's size bins is the smallest free block, then the lowest address", "[allocator]") {
  // The pools are cut into bins of size ranges; a request takes the free block of its pool and stream with the
  // smallest (size, address) at or above its rounded size, which the allocator's state (every block, address order)
  // shows: 4,000 random requests and frees from 1 B to 4 GiB on two streams. requested() is the sum of the live
  // rounded requests, at most allocated(), at most reserved().
  caching_allocator a;
  std::uint64_t seed = 12345;
  auto next = [&] { seed = seed * 6364136223846793005ULL + 1442695040888963407ULL; return seed >> 33; };
  std::vector<std::pair<int, std::uint64_t>> live;  // handle, rounded request
  int reused = 0, fresh = 0;
  for (int op = 0; op < 4000; ++op) {
    if (live.empty() || next() % 100 < 55) {
      const std::uint64_t bytes = std::uint64_t{1} << (next() % 32), n = bytes + next() % bytes;
      const std::uint64_t size = round_size(n);
      const int stream = static_cast<int>(next() % 2);
      const bool small = size <= kSmallSize;
      const std::vector<std::uint64_t> st = a.state();
      std::uint64_t best_size = 0, best_addr = 0;
      bool found = false;
      for (std::size_t i = 4; i + 3 < st.size(); i += 4) {
        const std::uint64_t addr = st[i], sz = st[i + 1], fl = st[i + 3];
        if ((fl & 2u) || ((fl & 1u) != 0) != small || static_cast<int>(fl >> 4) != stream || sz < size) continue;
        if (!found || sz < best_size || (sz == best_size && addr < best_addr)) { best_size = sz; best_addr = addr; found = true; }
      }
      const int h = a.malloc(n, stream);
      live.emplace_back(h, size);
      const std::vector<std::uint64_t> after = a.state();
      if (found) {
        bool taken = false;
        for (std::size_t i = 4; i + 3 < after.size(); i += 4)
          if (after[i] == best_addr) taken = (after[i + 3] & 2u) != 0;
        INFO("request " << size << " stream " << stream << " best fit " << best_size << " at " << best_addr);
        CHECK(taken);
        CHECK(after[2] == st[2]);  // no new segment
        ++reused;
      } else {
        CHECK(after[2] > st[2]);
        ++fresh;
      }
    } else {
      const std::size_t i = next() % live.size();
      a.free(live[i].first);
      live.erase(live.begin() + static_cast<std::ptrdiff_t>(i));
    }
    std::uint64_t req = 0;
    for (const auto& [h, size] : live) req += size;
    REQUIRE(a.requested() == req);
    REQUIRE(a.requested() <= a.allocated());
    REQUIRE(a.allocated() <= a.reserved());
  }
  CHECK(reused > 500);
  CHECK(fresh > 50);
}

TEST_CASE("bug: fp8 on the hf stack saved 1 B per linear input and kept autocast weight copies torchao's Float8Linear never makes", "[memory][bugs]") {
  // torchao >= 0.9 (pytorch/ao 2ec9bc15d) saves the bf16 input of each Float8Linear and casts it again in backward, and
  // the module calls no F.linear, so autocast caches no bf16 weight copy. The walk priced torchao's older fp8-saving
  // path: a block's saved bytes per token were 5h + q + f lower than bf16's under autocast, and every quantized block
  // kept 2 B per weight after the forward. Hand-derived here on Llama 3.1 8B, one GPU under autocast, 1 × 4096.
  using namespace bwplan;
  const gpu_spec g = b200_fp8_like();
  const model_spec m = bundled_model("llama-3.1-8b");
  const memory_terms t = llama8b_autocast_terms(compute_format::fp8, 4096);
  // the saved bytes of a quantized block are the bf16 block's
  CHECK(t.activations.low_precision.block_saved == Approx(t.activations.high_precision.block_saved));
  // no autocast copies of the quantized blocks: after the forward only the head's is left (not in this term)
  CHECK(t.weights.autocast_after_forward.raw() == 0);
  CHECK(t.weights.autocast_block_low.raw() == 0);
  // the largest cast moment of one linear's backward, beyond a bf16 linear's grad_input and weight gradient: the gate's
  // (h → F) second cast of its gradient, 10·T·F + F·h + 2·T·h held against 2·T·h + 2·F·h, that is 10·T·F − F·h
  const double T = 4096, h = 4096, F = 14336;
  CHECK(t.weights.quantized_block.raw() == Approx(10 * T * F - F * h));
  // and the forward's: the down projection's (F → h) fp32 weight cast, 9·F·h, while its float8 input T·F lives,
  // against its bf16 output 2·T·h
  CHECK(t.weights.quantized_block_forward.raw() == Approx(T * F + 9 * F * h - 2 * T * h));
  // FSDP2 (no autocast): the bf16 weight cast holds a fp32 copy first, and the terms are the same
  training_config f = recipe_config(3, 1, 4096);
  f.format = compute_format::fp8;
  const memory_terms tf = compute_memory_terms(m, f, g);
  CHECK(tf.shape.f8_linear);
  CHECK(tf.activations.low_precision.block_saved == Approx(tf.activations.high_precision.block_saved));
  // other stacks keep the inventory of their validated runs (the float8 input saved)
  training_config tt = f;
  tt.stack = training_stack::torchtitan;
  const memory_terms ttt = compute_memory_terms(m, tt, g);
  CHECK_FALSE(ttt.shape.f8_linear);
  CHECK(ttt.activations.low_precision.block_saved < ttt.activations.high_precision.block_saved);
}

TEST_CASE("bug: expandable segments with max_split_size: a free tail larger than the request underflowed the mapping", "[allocator][bugs]") {
  // max_split_size 30 MiB keeps a 10 MiB request from the free 100 MiB tail (an oversize block); the expandable segment
  // then found that tail too small by a negative amount: reserved wrapped to 24 MiB. It maps nothing and stays 100 MiB.
  allocator_settings s;
  s.max_split_size = 30 * MiB;
  caching_allocator a = expandable_with_free_block(s, 100 * MiB);
  CHECK(a.reserved() == 100 * MiB);
  a.malloc(10 * MiB);
  CHECK(a.reserved() == 100 * MiB);
  CHECK(a.allocated() == 10 * MiB);
  CHECK_FALSE(a.oom());
}

TEST_CASE("allocator: replay_blocker names what keeps a plan from the step trace, and nothing for a traced one", "[allocator]") {
  using namespace bwplan;
  const model_spec m = test::llama_8b();
  const training_config fsdp = fsdp_ranks(16, 1, 2048, true);
  CHECK(terms::replay_blocker(m, fsdp) == nullptr);
  CHECK(terms::replayable(m, fsdp));
  auto blocker = [&](auto&& change) {
    training_config c = fsdp;
    change(c);
    const char* b = terms::replay_blocker(m, c);
    CHECK(terms::replayable(m, c) == (b == nullptr));
    return std::string(b ? b : "");
  };
  CHECK(blocker([](training_config& c) { c.loss = loss_impl::liger; }) == "Liger's fused linear cross-entropy");
  CHECK(blocker([](training_config& c) { c.loss = loss_impl::chunked; }).empty());  // the trainer's chunks are traced
  CHECK(blocker([](training_config& c) { c.shard = sharding::none; }).empty());  // DDP is traced
  CHECK(blocker([](training_config& c) { c.shard = sharding::grad_op; }).empty());  // FSDP2 without reshard after forward
  CHECK(blocker([](training_config& c) { c.world_size = 1; c.gpus_per_node = 1; c.shard = sharding::grad_op; }).empty());
  CHECK(blocker([](training_config& c) { c.shard = sharding::grad_op; c.shard_group = 8; }).empty());  // (ignored: shards over the mesh)
  CHECK(blocker([](training_config& c) { c.shard = sharding::optimizer; }) == "the distributed optimizer");
  CHECK(blocker([](training_config& c) { c.tp = 2; }) == "tensor, context or pipeline parallelism");
  CHECK(blocker([](training_config& c) { c.format = compute_format::fp8; }).empty());  // torchao's Float8Linear is traced
  CHECK(blocker([](training_config& c) { c.format = compute_format::fp8_rowwise; }).empty());  // and its rowwise recipe
  CHECK(blocker([](training_config& c) { c.format = compute_format::mxfp8; }).empty());  // torchao's MXFP8 linear on bf16 weights
  CHECK(blocker([](training_config& c) { c.format = compute_format::mxfp8; c.world_size = 1; c.gpus_per_node = 1; c.shard = sharding::none; }) ==
        "low-precision GEMMs");  // (under autocast: refused by violations, not traced)
  CHECK(blocker([](training_config& c) { c.format = compute_format::nvfp4; }) == "low-precision GEMMs");
  CHECK(blocker([](training_config& c) { c.format = compute_format::fp8; c.fp8_all_gather = true; }) == "the FP8 all-gather");
  CHECK(blocker([](training_config& c) { c.ac = checkpointing::selective_op(); }) == "per-op checkpointing");
  CHECK(blocker([](training_config& c) { c.master = master_weights::bf16; }) == "FSDP2 with bf16 master weights");
  CHECK(blocker([](training_config& c) { c.stack = training_stack::torchtitan; }) == "another stack than hf");
  CHECK(blocker([](training_config& c) { c.shard = sharding::hybrid; }).empty());
  CHECK(blocker([](training_config& c) { c.world_size = 1; c.gpus_per_node = 1; c.shard = sharding::none; }).empty());
}

TEST_CASE("allocator: the state is the block layout, whatever the history of handles", "[allocator]") {
  // Three 3 MiB blocks split from one 20 MiB segment and freed (two records merged away) leave what one 3 MiB block
  // allocated and freed leaves: one free 20 MiB segment. A different layout differs.
  caching_allocator a, b, c;
  int x[3];
  for (int& h : x) h = a.malloc(3 * MiB);
  for (int& h : x) a.free(h);
  b.free(b.malloc(3 * MiB));
  CHECK(a.state() == b.state());
  c.free(c.malloc(30 * MiB));
  CHECK(c.state() != b.state());
  b.malloc(3 * MiB);  // allocated again: no longer equal
  CHECK(a.state() != b.state());
}

TEST_CASE("allocator: a replay stops at the steady state with the peaks of every step", "[allocator]") {
  // From the second step on a step makes the same requests; once one leaves the allocator as the one before it did,
  // the replay stops. Peaks, the reserved bytes at the end, the out-of-memory verdict and the allocator's final state are
  // those of replaying all five steps, on one GPU and across FSDP2 ranks (Llama-3.1-8B, 1 x 2048), with and without
  // checkpointing, accumulation, expandable segments or a 40 GiB budget that some of them exceed.
  using namespace bwplan;
  const model_spec m = test::llama_8b();
  const gpu_spec g = b200_like();
  int stopped_early = 0;
  for (int ranks : {1, 16})
    for (bool full_ac : {false, true})
      for (int accum : {1, 4})
        for (int budget_gib : {0, 40})
          for (bool expandable : {false, true}) {
            training_config c = fsdp_ranks(ranks, 1, 2048, full_ac);
            if (ranks == 1) { c.shard = sharding::none; c.gpus_per_node = 1; }
            c.grad_accum = accum;
            c.expandable_segments = expandable;
            const memory_terms t = compute_memory_terms(m, c, g);
            REQUIRE(t.replay.replayable);
            allocator_settings st = t.replay.settings;
            if (budget_gib > 0) st.budget = static_cast<std::uint64_t>(budget_gib) << 30;
            alloc::step_shape every = t.replay.shape;
            every.stop_at_steady_state = false;
            caching_allocator a(st), b(st);
            const replay_result r = replay_step_trace(t.replay.shape, a);
            const replay_result all = replay_step_trace(every, b);
            INFO("ranks " << ranks << " full AC " << full_ac << " accum " << accum << " budget " << budget_gib << " expandable " << expandable);
            CHECK(all.steps == 5);
            CHECK(r.steps >= 2);
            stopped_early += r.steps < 5 ? 1 : 0;
            if (!all.oom) CHECK(r.steps <= 4);  // (past the budget the cache is released over and over: it may not settle)
            CHECK(r.peak_reserved == all.peak_reserved);
            CHECK(r.peak_allocated == all.peak_allocated);
            CHECK(r.reserved == all.reserved);
            CHECK(r.oom == all.oom);
            CHECK(r.oom_request == all.oom_request);
            CHECK(a.state() == b.state());
          }
  // the 24 that fit stop after three or four steps (checked above), and 3 of the 8 past the 40 GiB budget (4 before the
  // expandable-segment replay mapped only the pages under a request: past the budget whether the releases settle
  // depends on the requests)
  CHECK(stopped_early >= 27);
}

TEST_CASE("memory: FSDP2 reshards the root before its reduce-scatter input exists", "[allocator][memory]") {
  // FSDPParamGroup.post_backward takes the unsharded gradients, reshards, drops the previous group's reduce-scatter
  // input and only then foreach_reduce allocates the fp32 one. Llama-3.1-8B on 16 ranks, 1 × 2048, full AC: the end of
  // backward is the step's peak — the sharded gradients, the bf16 root gradients and their fp32 copy; the gathered root
  // (2 · (2·V·h + h) B) and block 0's reduce-scatter input are gone (the former walk added the gathered root), and
  // the root's own sharded gradient is not yet allocated (the former walk counted it).
  using namespace bwplan;
  const model_spec m = test::llama_8b();
  const training_config c = fsdp_ranks(16, 1, 2048, true);
  const memory_terms t = compute_memory_terms(m, c, b200_like());
  const memory_estimate e = compose_memory(t);
  const double Vh = 128256.0 * 4096, root = 2 * Vh + 4096;
  CHECK(t.transient.root_reduce_scatter.raw() == 6 * root);
  const double Pb = 218'112'000.0;  // one block's parameters: block 0's fp32 reduce-scatter input is all of them
  CHECK(t.transient.root_before_reshard.raw() == Approx(2 * root + 4 * Pb).epsilon(1e-12));
  CHECK(t.weights.fsdp_root.raw() == 2 * root);
  // the root's sharded gradient is the reduce-scatter's output, allocated after that input: not yet there (one
  // micro-batch), 4·root/16 below the gradients after backward
  const double end = (e.after_backward + t.transient.root_reduce_scatter).raw() - 4 * root / 16;
  CHECK(e.backward_peak.raw() == Approx(end).epsilon(1e-12));
  CHECK(e.peak_allocated.raw() == Approx(end).epsilon(1e-12));
  // and the step trace's peak is that moment (within its small tensors)
  CHECK(replay_peak(t.replay.shape, t.replay.settings) == Approx(end).epsilon(0.001));
}

TEST_CASE("allocator: with expandable segments the free pages are unmapped on every retry and mapped again only under a request", "[allocator]") {
  // Llama-3.1-8B, mbs 8, full AC on p5 with --expandable-segments read 84.42 GiB reserved, "does not fit", where the
  // default allocator fits at 78.04: the replay (1) unmapped free pages only for large requests, while
  // release_cached_blocks does it on every out-of-memory path (A:2850-2915), and (2) mapped every unmapped page of a
  // reused block (a 47 GiB "request"), while map_block maps the requested size and leaves the rest unmapped (A:2297-2328)
  allocator_settings s;
  s.budget = 1001 * MiB;
  caching_allocator a = expandable_with_free_block(s, 1000 * MiB);
  CHECK(a.reserved() == 1000 * MiB);
  a.malloc(1024);  // (1) a small-pool segment of 2 MiB at the line: every whole page of the free 1000 MiB block unmapped
  CHECK_FALSE(a.oom());
  CHECK(a.reserved() == 2 * MiB);
  a.malloc(100 * MiB);  // (2) the reused block maps the 100 MiB under the request, not its 1000 MiB
  CHECK_FALSE(a.oom());
  CHECK(a.reserved() == 102 * MiB);
  a.malloc(100 * MiB);  // the remainder kept its unmapped pages until a request covers them
  CHECK_FALSE(a.oom());
  CHECK(a.reserved() == 202 * MiB);
}

TEST_CASE("allocator: --expandable-segments does not turn a plan that fits with the default allocator into out of memory", "[allocator][cli]") {
  // Llama-3.1-8B, mbs 8, full AC on p5: 78.04 GiB reserved, fits; with --expandable-segments 84.42, "DOES NOT FIT": the
  // replay mapped every unmapped page of a reused block and kept the mapped pages of the block being handed out
  for (const std::vector<std::string>& base : {std::vector<std::string>{"Llama-3.1-8B", "--instance", "ml.p5.48xlarge", "--mbs", "8", "--ac", "full"},
                                              std::vector<std::string>{"Qwen2.5-32B", "--instance", "ml.p5.48xlarge", "--mbs", "2", "--ac", "full"}}) {
    auto es = base;
    es.emplace_back("--expandable-segments");
    const auto d = bwplan::test::estimate_json(base), e = bwplan::test::estimate_json(es);
    INFO(base.front());
    REQUIRE(d["fits"].get<bool>());
    CHECK(e["fits"].get<bool>());
    CHECK(e["memory"]["peak_reserved_bytes"].get<double>() <= d["memory"]["peak_reserved_bytes"].get<double>() * 1.01);
  }
}

TEST_CASE("allocator: torch.compile on the hf stack takes the eager step's replayed slack, not the cheap bound", "[allocator][cli]") {
  // bug (a helper's sweep): Llama-3.1-8B, mbs 4 x 4096, full AC on one H200 read 142.10 GiB reserved, "does not fit",
  // and with --compile 136.49, "fits", at the same 131.73 GiB allocated: compile (which changes no tensor a checkpointed
  // block keeps) left the replay for the cheap bound, 5.6 GiB lower
  const std::vector<std::string> base{"Llama-3.1-8B", "--gpu", "h200", "--mbs", "4", "--seq", "4096", "--ac", "full"};
  auto compiled = base;
  compiled.emplace_back("--compile");
  const auto d = bwplan::test::estimate_json(base), c = bwplan::test::estimate_json(compiled);
  REQUIRE(d["memory"]["replayed"].get<bool>());
  CHECK(c["memory"]["replayed"].get<bool>());
  CHECK(c["memory"]["replayed_without"] == "torch.compile");
  CHECK(c["memory"]["peak_allocated_bytes"].get<double>() == Approx(d["memory"]["peak_allocated_bytes"].get<double>()));
  CHECK(c["memory"]["peak_reserved_bytes"].get<double>() == Approx(d["memory"]["peak_reserved_bytes"].get<double>()));
  CHECK(c["fits"] == d["fits"]);
  CHECK_THAT(c["memory"]["reserved_note"].get<std::string>(), Catch::Contains("without torch.compile"));
  // without checkpointing compile saves less (no act(gate), one autocast cast per input): less allocated, never more reserved
  const std::vector<std::string> none{"Llama-3.2-1B", "--gpu", "h200", "--mbs", "4", "--seq", "4096", "--ac", "none"};
  auto none_c = none;
  none_c.emplace_back("--compile");
  const auto dn = bwplan::test::estimate_json(none), cn = bwplan::test::estimate_json(none_c);
  CHECK(cn["memory"]["replayed_without"] == "torch.compile");
  CHECK(cn["memory"]["peak_allocated_bytes"].get<double>() < dn["memory"]["peak_allocated_bytes"].get<double>());
  CHECK(cn["memory"]["peak_reserved_bytes"].get<double>() < dn["memory"]["peak_reserved_bytes"].get<double>());
  CHECK(cn["memory"]["peak_reserved_bytes"].get<double>() >= cn["memory"]["peak_allocated_bytes"].get<double>());
  // other stacks compile the loss too (torchtitan, torchtune): no stand-in, the cheap bound
  auto tt = compiled;
  tt.insert(tt.end(), {"--stack", "torchtitan", "--sharding", "full"});
  const auto t = bwplan::test::estimate_json(tt);
  CHECK_FALSE(t["memory"]["replayed"].get<bool>());
  CHECK_FALSE(t["memory"].contains("replayed_without"));
}

TEST_CASE("planner: a compiled plan near the line is replayed through its eager stand-in, as estimate prices it", "[allocator][planner]") {
  const bwplan::model_spec m = bwplan::io::load_model(std::string(BWPLAN_SOURCE_DIR) + "/configs/models/llama-3.1-8b.json");
  bwplan::hardware_catalog cat;
  bwplan::io::load_catalog(cat, std::string(BWPLAN_SOURCE_DIR) + "/configs/hardware/catalog.json");
  const bwplan::gpu_spec& g = cat.gpu("h200");
  auto search = [&](std::int64_t mbs) {
    bwplan::plan_request req;
    req.shardings = {bwplan::sharding::none};
    req.seq_lens = {4096};
    req.checkpointings = {bwplan::checkpointing::full()};
    req.losses = {bwplan::loss_impl::standard};
    req.compile = true;
    req.headroom = 0;
    req.min_micro_batch = req.max_micro_batch = mbs;  // one micro-batch per step (no accumulated fp32 gradients)
    req.global_batch_tokens = mbs * 4096;
    req.allow_expandable_segments = false;  // (the default allocator's verdict)
    return bwplan::search_plans(m, g, nullptr, req, 3);
  };
  // micro-batch 2 fits (131.5 GiB reserved), ranked with the replayed verdict and memory estimate gives it
  const auto two = search(2);
  REQUIRE(two.ranked.size() == 1);
  const bwplan::memory_estimate e = bwplan::estimate_memory(m, two.ranked[0].config, g);
  CHECK(e.replay_stand_in != nullptr);
  CHECK(two.ranked[0].memory.replay_stand_in != nullptr);
  CHECK(two.ranked[0].memory.peak_reserved.raw() == Approx(e.peak_reserved.raw()));
  // micro-batch 4 (131.73 GiB allocated, 142.10 reserved: past the H200's 139.80) is not ranked; the cheap bound,
  // 136.49, ranked it before
  CHECK(search(4).ranked.empty());
}

TEST_CASE("allocator: SGD with momentum and Adafactor (the reference trainer's other optimizers) are replayed with their states", "[allocator]") {
  // Hand-derived on the small layout of the FSDP2 test, one GPU under autocast (fp32 weights, gradients and states;
  // every tensor a multiple of 512 B): after the last step the allocator holds the parameters, the states and what the
  // optimizer does not touch, so the states alone separate the optimizers. 39 parameters (embedding, 4 × 9 per block,
  // final norm, untied head), P elements.
  step_shape m;
  m.hidden = 1024; m.layers = 4; m.heads = 8; m.kv_heads = 8; m.head_dim = 128; m.intermediate = 4096;
  m.vocab = 32768; m.micro_batch = 1; m.seq = 1024; m.tied = false; m.amp = true;
  m.checkpointed.assign(4, false);
  const std::uint64_t P = 4 * (2 * 1024 + 4 * 1024 * 1024 + 3 * 1024 * 4096) + 2 * 32768 * 1024 + 1024;
  auto end_allocated = [&](step_shape::optimizer_kind o) {
    step_shape s = m;
    s.optimizer = o;
    caching_allocator a;
    const replay_result r = replay_step_trace(s, a);
    CHECK_FALSE(r.oom);
    return a.allocated();
  };
  const std::uint64_t adamw = end_allocated(step_shape::optimizer_kind::adamw);
  const std::uint64_t sgd = end_allocated(step_shape::optimizer_kind::sgd);
  const std::uint64_t adafactor = end_allocated(step_shape::optimizer_kind::adafactor);
  // AdamW (fused): a 4-byte step (512 B rounded) and two fp32 moments per parameter; SGD: one fp32 momentum buffer
  CHECK(adamw - sgd == 39 * 512 + 4 * P);
  // Adafactor: per block 4 attention matrices 1024 × 1024 (row and column factors 4 KiB each), gate and up 4096 × 1024
  // (16 KiB + 4 KiB), down 1024 × 4096 (4 KiB + 16 KiB), two norms (4 KiB each): 102,400 B; the embedding and the head
  // 32768 × 1024 (128 KiB + 4 KiB each); the final norm 4 KiB
  CHECK(sgd - adafactor == 4 * P - (4 * 102400 + 2 * (131072 + 4096) + 4096));
  // Adafactor's loop: with the activations small (micro-batch 1 × 64) the last step peaks in the optimizer, at the
  // untied head's estimate (the last parameter, 128 MiB), with its row and column means (128 KiB, 4 KiB) and the final
  // norm's estimate and grad_squared (4 KiB each) alive beside every gradient; SGD's step allocates nothing, so its last
  // step peaks in the backward, at most a few activations above the gradients. Against the bytes each holds after the
  // step (parameters, states, workspace):
  m.seq = 64;
  auto above_end = [&](step_shape::optimizer_kind o) {
    step_shape s = m;
    s.optimizer = o;
    caching_allocator a;
    const replay_result r = replay_step_trace(s, a);
    return static_cast<double>(r.peak_allocated) - static_cast<double>(a.allocated());
  };
  const double loop = 4.0 * 32768 * 1024 + 131072 + 3 * 4096;
  const double extra = above_end(step_shape::optimizer_kind::adafactor) - above_end(step_shape::optimizer_kind::sgd);
  CHECK(extra <= loop);
  CHECK(extra >= loop - 1048576);
}

TEST_CASE("allocator: SGD and Adafactor plans replay and agree with the liveness walk", "[allocator]") {
  // Before, any optimizer but AdamW kept the cheap bound, which reads GiBs off the replay at the same allocated bytes,
  // so choosing SGD or Adafactor could flip the verdict of a plan near the line (a helper's sweep). The trace's peak
  // allocated against the walk's: one GPU under autocast and in pure bf16, FSDP2 on one and on 8 ranks, with and
  // without checkpointing and accumulation: within 3 %.
  using namespace bwplan;
  const gpu_spec g = b200_like();
  for (const char* name : {"llama-3.2-1b", "qwen3-0.6b"}) {
    const model_spec m = bundled_model(name);
    for (const optimizer_kind o : {optimizer_kind::sgd, optimizer_kind::adafactor})
      for (int recipe = 0; recipe < 4; ++recipe)
        for (int ac = 0; ac < 2; ++ac)
          for (auto [mbs, ga] : {std::pair{1, 1}, std::pair{4, 4}}) {
            training_config c = recipe_config(recipe, mbs, 2048);
            c.ac = ac == 0 ? checkpointing{} : checkpointing::full();
            c.grad_accum = ga;
            c.optim = o;
            INFO(name << " " << to_string(o) << " recipe " << recipe << " ac " << ac << " mbs " << mbs << " ga " << ga);
            if (o == optimizer_kind::adafactor && recipe >= 2) {  // FSDP2: replicated DTensor factors, not traced (a review)
              CHECK(std::string(terms::replay_blocker(m, c)) == "Adafactor under FSDP2 (replicated DTensor factors)");
              continue;
            }
            const memory_terms t = compute_memory_terms(m, c, g);
            REQUIRE(t.replay.replayable);
            CHECK(compose_memory(t).replayed);
            CHECK(std::abs(replay_peak(t.replay.shape, t.replay.settings) / walk_peak(m, c, g) - 1) < 0.03);
          }
  }
  // 8-bit AdamW and Lion (bitsandbytes; the trainer refuses them) keep the cheap bound
  training_config lion = recipe_config(0, 1, 2048);
  lion.optim = optimizer_kind::lion;
  CHECK(std::string(terms::replay_blocker(bundled_model("llama-3.2-1b"), lion)) == "8-bit AdamW or Lion");
}

TEST_CASE("bug: the walk missed the embedding's gradient beside a tied head's at the end of backward", "[memory][bugs]") {
  // Llama-3.2-1B (tied embeddings), 1 × 2048 under autocast with full checkpointing on one GPU: the step peaks in the
  // embedding's backward, where embedding_dense_backward's fp32 gradient (0.98 GiB) is allocated beside the head's,
  // which waits in the AccumulateGrad node's input buffer; the walk's peak was 3.1 % under the replay's (a moment it
  // did not have). Untied with gradient accumulation the same moment comes from the second micro-batch on (the
  // embedding's `.grad` exists).
  using namespace bwplan;
  const gpu_spec g = b200_like();
  runtime_overheads walk;
  walk.replay = runtime_overheads::replay_policy::never;
  {
    const model_spec m = bundled_model("llama-3.2-1b");
    REQUIRE(m.tied_embeddings);
    training_config c = recipe_config(0, 1, 2048);
    c.ac = checkpointing::full();
    const memory_terms t = compute_memory_terms(m, c, g);
    CHECK(std::abs(replay_peak(t.replay.shape, t.replay.settings) / walk_peak(m, c, g) - 1) < 0.005);
    const memory_estimate e = estimate_memory(m, c, g, walk);
    CHECK(e.peak_phase == step_phase::backward);
    // the moment: every gradient (after backward) + the embedding's gradient + block 0's fp32 input gradient
    const double V = static_cast<double>(m.vocab), h = static_cast<double>(m.hidden);
    CHECK(e.backward_peak.raw() == Approx(e.after_backward.raw() + 4 * V * h + 4 * 2048 * h));
  }
  {
    const model_spec m = bundled_model("llama-3.1-8b");
    REQUIRE_FALSE(m.tied_embeddings);
    training_config c = recipe_config(0, 1, 2048);
    c.ac = checkpointing::full();
    c.grad_accum = 2;
    const memory_terms t = compute_memory_terms(m, c, g);
    CHECK(std::abs(replay_peak(t.replay.shape, t.replay.settings) / walk_peak(m, c, g) - 1) < 0.005);
  }
}

TEST_CASE("allocator: Liger's loss, 8-bit AdamW, Lion and FSDP embedding units take a traced neighbour's replayed slack", "[allocator][cli]") {
  // bug (a helper's sweep): Llama-3.1-70B on 2 p6-b200 fits with the trainer's chunked loss (replayed: 177.18 GiB
  // reserved) and did not with Liger's (the cheap bound: 182.84) at the same 165.08 GiB allocated. Such plans now replay
  // the plan with a traced part in place of each untraced one and take its slack, like a compiled plan.
  const std::vector<std::string> base{"Llama-3.1-70B", "--instance", "ml.p6-b200.48xlarge", "--nodes", "2"};
  auto with = [&](std::initializer_list<const char*> extra) {
    auto a = base;
    for (const char* x : extra) a.emplace_back(x);
    return bwplan::test::estimate_json(a);
  };
  const auto chunked = with({"--loss", "chunked"}), liger = with({"--loss", "liger"});
  REQUIRE(chunked["memory"]["replayed"].get<bool>());
  CHECK(liger["memory"]["replayed"].get<bool>());
  CHECK_THAT(liger["memory"]["replayed_without"].get<std::string>(), Catch::Contains("Liger"));
  CHECK(liger["fits"] == chunked["fits"]);
  CHECK(liger["memory"]["peak_reserved_bytes"].get<double>() - liger["memory"]["peak_allocated_bytes"].get<double>() ==
        Approx(chunked["memory"]["peak_reserved_bytes"].get<double>() - chunked["memory"]["peak_allocated_bytes"].get<double>()).epsilon(0.01));
  CHECK_THAT(liger["memory"]["reserved_note"].get<std::string>(), Catch::Contains("without Liger's fused linear cross-entropy"));
  // 8-bit AdamW and Lion: SGD's momentum buffers stand in (one state per parameter, made in the first step)
  const auto sgd = with({"--optimizer", "sgd"}), lion = with({"--optimizer", "lion"});
  REQUIRE(sgd["memory"]["replayed"].get<bool>());
  CHECK_FALSE(sgd["memory"].contains("replayed_without"));  // SGD itself is traced
  CHECK(lion["memory"]["replayed"].get<bool>());
  CHECK_THAT(lion["memory"]["replayed_without"].get<std::string>(), Catch::Contains("Lion"));
  // Lion's fp32 exp_avg is SGD's momentum byte for byte here: the same allocated, the same slack
  auto slack = [](const nlohmann::json& j) {
    return j["memory"]["peak_reserved_bytes"].get<double>() - j["memory"]["peak_allocated_bytes"].get<double>();
  };
  CHECK(lion["memory"]["peak_allocated_bytes"].get<double>() == Approx(sgd["memory"]["peak_allocated_bytes"].get<double>()));
  CHECK(slack(lion) == Approx(slack(sgd)).epsilon(0.01));
  // several at once: one stand-in replaces each
  const auto both = with({"--compile", "--optimizer", "adamw-8bit", "--fsdp-embedding-units"});
  CHECK(both["memory"]["replayed"].get<bool>());
  const std::string w = both["memory"]["replayed_without"].get<std::string>();
  CHECK_THAT(w, Catch::Contains("torch.compile") && Catch::Contains("8-bit") && Catch::Contains("embedding and head"));
  CHECK(slack(both) > 0);  // the stand-in's slack, not the cheap bound's
  CHECK(both["memory"]["reserved_note"].get<std::string>().find("cheap bound") == std::string::npos);
  // what no traced part stands in for keeps the cheap bound: per-op checkpointing
  const auto sac = with({"--loss", "liger", "--ac", "selective-op"});
  CHECK_FALSE(sac["memory"]["replayed"].get<bool>());
  CHECK_FALSE(sac["memory"].contains("replayed_without"));
}

TEST_CASE("bug: Adafactor's estimate under FSDP2 was a shard, and the embedding's estimate beside q_proj's was left out", "[memory][bugs]") {
  // a review: under FSDP2 torch.optim.Adafactor's factors are DTensors of a new shape, which DTensor replicates
  // (`new_factory_strategy`), so `row_var @ col_var` is whole on every rank, not a shard (and the trace, which had
  // shards, no longer describes such plans); in transformers' parameter order (embedding, then q, k, v, o, gate, up,
  // down, the norms) the embedding's estimate is alive while q_proj's is made
  using namespace bwplan;
  const model_spec m = test::llama_8b();
  const gpu_spec g = b200_like();
  const double V = static_cast<double>(m.vocab), h = static_cast<double>(m.hidden), q = static_cast<double>(m.q_dim()),
               F = static_cast<double>(m.intermediate);
  training_config sharded = fsdp_ranks(8, 1, 2048, true);
  sharded.optim = optimizer_kind::adafactor;
  CHECK(compute_memory_terms(m, sharded, g).transient.optimizer.raw() == Approx(4 * std::max(V * h + h * q, 2 * h * F)));
  CHECK_FALSE(terms::replayable(m, sharded));
  training_config one = recipe_config(0, 1, 2048);
  one.optim = optimizer_kind::adafactor;
  CHECK(compute_memory_terms(m, one, g).transient.optimizer.raw() == Approx(4 * (V * h + h * q)));
  CHECK(terms::replayable(m, one));
}

TEST_CASE("bug: with the optimizer step in backward the walk skipped the tied embedding's last moment", "[memory][bugs]") {
  // a review: a tied head's gradient waits in the AccumulateGrad node's input buffer until the embedding's backward is
  // done (its hook steps it only then), so that backward holds it, the embedding's own gradient and block 0's input
  // gradient; the walk skipped the moment under optimizer in backward (torchtune's optimizer_in_bwd)
  using namespace bwplan;
  const model_spec m = bundled_model("llama-3.2-1b");
  REQUIRE(m.tied_embeddings);
  training_config c = recipe_config(1, 1, 256);  // one GPU, pure bf16
  c.stack = training_stack::torchtune;
  c.optimizer_in_backward = true;
  runtime_overheads walk;
  walk.replay = runtime_overheads::replay_policy::never;
  const memory_estimate e = estimate_memory(m, c, b200_like(), walk);
  const double V = static_cast<double>(m.vocab), h = static_cast<double>(m.hidden);
  CHECK(e.backward_peak.raw() >= e.after_backward.raw() + 2 * 2 * V * h + 2 * 256 * h - 1);
}
