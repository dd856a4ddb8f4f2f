// Memory model: hand-derived values for small cases, and the behaviour each knob must have.
#include "test_util.hpp"

#include <bwplan/io/json.hpp>

#include <catch2/catch.hpp>

using namespace bwplan;

namespace {
gpu_spec test_gpu() {
  gpu_spec g;
  g.id = "test";
  g.hbm_total = 100 * gib;
  g.hbm_bandwidth = 4 * tb_per_s;
  g.nvlink_per_direction = 450 * gb_per_s;
  g.dense_flops["bf16"] = 1000 * tflop_per_s;
  return g;
}
model_spec tiny() {
  model_spec m;
  m.name = "tiny";
  m.family = "llama";
  m.hidden = 64;
  m.layers = 2;
  m.heads = 4;
  m.kv_heads = 2;
  m.head_dim = 16;
  m.intermediate = 128;
  m.vocab = 512;
  m.max_context = 4096;
  m.tied_embeddings = true;
  return m;
}
}  // namespace

TEST_CASE("memory: static state before forward is 12 B/param (fp32 master) or 6 B/param (bf16)", "[memory]") {
  const model_spec m = tiny();
  const double P = static_cast<double>(count_parameters(m).total());
  // tiny: block = 2·64·64 + 2·64·32 + 3·64·128 + 2·64 = 8192 + 4096 + 24576 + 128 = 36992; total = 2·36992 + 512·64 + 64
  REQUIRE(P == 2 * 36992 + 512 * 64 + 64);
  training_config c;
  c.seq_len = 32;
  const runtime_overheads rt{};
  const auto e = estimate_memory(m, c, test_gpu(), rt);
  CHECK(e.before_forward.raw() == Approx(12 * P + rt.cublas_workspace.raw()));
  c.master = master_weights::bf16;
  CHECK(estimate_memory(m, c, test_gpu(), rt).before_forward.raw() == Approx(6 * P + rt.cublas_workspace.raw()));
}

TEST_CASE("memory: the standard loss holds 10·T·V bytes at the forward peak and 8·T·V more at the backward start", "[memory]") {
  const model_spec m = tiny();
  training_config c;
  c.seq_len = 1024;
  c.micro_batch = 2;
  const auto e = estimate_memory(m, c, test_gpu());
  const double TV = 2048.0 * 512;
  // after forward: the fp32 log-softmax (4TV) is saved; the forward peak adds bf16 + fp32 logits (6TV)
  CHECK(e.forward_peak.raw() >= e.after_forward.raw() + 6 * TV);
  CHECK(e.backward_peak.raw() >= e.after_forward.raw() + 8 * TV);
  c.loss = loss_impl::chunked;
  const auto ch = estimate_memory(m, c, test_gpu());
  CHECK(ch.peak_allocated < e.peak_allocated);
}

TEST_CASE("memory: full checkpointing keeps only block inputs", "[memory]") {
  const model_spec m = tiny();
  training_config c;
  c.seq_len = 4096;
  c.master = master_weights::bf16;
  const auto none = estimate_memory(m, c, test_gpu());
  c.ac = checkpointing::full();
  const auto full = estimate_memory(m, c, test_gpu());
  // bf16: one saved block input is 2·h bytes per token; un-checkpointed block saves far more
  const auto t = detail::activation_bytes_per_token(m, false);
  CHECK(t.checkpoint == 2 * 64);
  CHECK(none.after_forward.raw() - full.after_forward.raw() == Approx(2 * 4096 * (t.block_saved - t.checkpoint)));
}

TEST_CASE("memory: FSDP full shard divides parameters, gradients and optimizer states by the world size", "[memory]") {
  model_spec m = tiny();
  m.layers = 32;
  training_config c;
  c.seq_len = 128;
  c.shard = sharding::full;
  c.world_size = 1;
  const auto one = estimate_memory(m, c, test_gpu());
  c.world_size = 8;
  const auto eight = estimate_memory(m, c, test_gpu());
  const double P = static_cast<double>(count_parameters(m).total());
  CHECK(one.at_peak.optimizer_states.raw() == Approx(8 * P));
  CHECK(eight.before_forward.raw() - eight.at_peak.workspace.raw() == Approx(12 * P / 8));
}

TEST_CASE("memory: foreach AdamW adds one full-size temporary in the optimizer step", "[memory]") {
  const model_spec m = tiny();
  training_config c;
  c.seq_len = 16;
  const auto fused = estimate_memory(m, c, test_gpu());
  c.optimizer = optimizer_impl::foreach;
  const auto fe = estimate_memory(m, c, test_gpu());
  const double P = static_cast<double>(count_parameters(m).total());
  CHECK(fe.optimizer_peak.raw() - fused.optimizer_peak.raw() == Approx(4 * P));
}

TEST_CASE("memory: invalid configurations throw", "[memory]") {
  const model_spec m = tiny();
  training_config c;
  c.micro_batch = 0;
  CHECK_THROWS_AS(estimate_memory(m, c, test_gpu()), invalid_request);
  c.micro_batch = 1;
  c.ac = checkpointing::full(0);
  CHECK_THROWS_AS(estimate_memory(m, c, test_gpu()), invalid_request);
}

TEST_CASE("memory: per-phase breakdowns add up to the phase peaks, and the peak phase's is the peak", "[memory]") {
  const model_spec m = tiny();
  training_config c;
  c.seq_len = 1024;
  c.micro_batch = 2;
  for (const auto opt : {optimizer_impl::fused, optimizer_impl::foreach}) {
    c.optimizer = opt;
    const auto e = estimate_memory(m, c, test_gpu());
    CHECK(e.at_forward_peak.total().raw() == Approx(e.forward_peak.raw()));
    CHECK(e.at_backward_peak.total().raw() == Approx(e.backward_peak.raw()));
    CHECK(e.at_optimizer_peak.total().raw() == Approx(e.optimizer_peak.raw()));
    CHECK(e.at_phase_peak(e.peak_phase).total().raw() == Approx(e.peak_allocated.raw()));
    // the optimizer step holds no activations and no logits; the forward peak holds the loss buffers
    CHECK(e.at_optimizer_peak.activations.raw() == 0);
    CHECK(e.at_optimizer_peak.logits.raw() == 0);
    CHECK(e.at_forward_peak.logits.raw() == Approx(10.0 * 2048 * 512));
  }
  c.optimizer = optimizer_impl::foreach;
  const double P = static_cast<double>(count_parameters(m).total());
  CHECK(estimate_memory(m, c, test_gpu()).at_optimizer_peak.transient.raw() == Approx(4 * P));
}

TEST_CASE("memory: a q/k norm saves 6 B per element of q and k (Qwen3), with and without autocast", "[memory]") {
  // Qwen3RMSNorm on q_proj/k_proj outputs: the fp32 copy of its input (4 B) and the bf16 normalized tensor (2 B);
  // under autocast the fp32 weight promotes its return to fp32, RoPE then saves only cos/sin and SDPA saves its
  // bf16 casts of q and k, which the inventory already counts (reference/stacks.md §1)
  model_spec m = tiny();
  const double q = static_cast<double>(m.q_dim()), kv = static_cast<double>(m.kv_dim());
  for (const bool amp : {true, false}) {
    const double without = terms::activation_bytes_per_token(m, amp).block_saved;
    model_spec mq = m;
    mq.qk_norm = true;
    const double with = terms::activation_bytes_per_token(mq, amp).block_saved;
    CHECK(with - without == Approx(6 * (q + kv)));
  }
}
