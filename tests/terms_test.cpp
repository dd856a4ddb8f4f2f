// The terms of the memory and throughput models (bwplan::terms) against hand-derived values for Llama-3.2-1B,
// and the terms composing to the estimates' totals.
#include "test_util.hpp"

#include <bwplan/bwplan.hpp>

#include <catch2/catch.hpp>

#include <vector>

using namespace bwplan;
using test::llama_1b;

namespace {

// test::llama_1b (Llama-3.2-1B): h 2048, L 16, a 32, g 8, d 64, F 8192, V 128256, tied embeddings.
// Per block: Q, O 2·2048·2048 = 8,388,608; K, V 2·2048·512 = 2,097,152; MLP 3·2048·8192 = 50,331,648 → linear
// 60,817,408; norms 2·2048 → block 60,821,504. Embedding 128256·2048 = 262,668,288; final norm 2048.
// Total 16·60,821,504 + 262,668,288 + 2048 = 1,235,814,400.
constexpr double P = 1'235'814'400;
constexpr double Pb = 60'821'504;
constexpr double lin = 60'817'408;
constexpr double emb = 262'668'288;
constexpr double V = 128256, h = 2048, F = 8192, L = 16;

gpu_spec h100() {
  gpu_spec g;
  g.id = "h100";
  g.architecture = "hopper";
  g.hbm_total = 80 * gib;
  g.hbm_bandwidth = 3.35 * tb_per_s;
  g.nvlink_per_direction = 450 * gb_per_s;
  g.dense_flops["bf16"] = 989 * tflop_per_s;
  g.dense_flops["fp8"] = 1979 * tflop_per_s;
  return g;
}

instance_spec p5() {
  instance_spec i;
  i.id = "ml.p5.48xlarge";
  i.gpu = "h100";
  i.gpus_per_node = 8;
  i.efa_per_node = 400 * gb_per_s;
  return i;
}

training_config one_gpu(master_weights mw = master_weights::fp32) {
  training_config c;
  c.seq_len = 2048;
  c.master = mw;
  return c;
}

/// One GPU, bf16 master weights, every block in fp8 (the weight-cast tests).
training_config fp8_gpu() {
  training_config c = one_gpu(master_weights::bf16);
  c.format = compute_format::fp8;
  return c;
}

training_config fsdp8(master_weights mw = master_weights::fp32) {
  training_config c = one_gpu(mw);
  c.world_size = 8;
  c.shard = sharding::full;
  return c;
}

}  // namespace

TEST_CASE("terms: the hand-derived model matches count_parameters", "[terms]") {
  const parameter_count pc = count_parameters(llama_1b());
  CHECK(static_cast<double>(pc.total()) == P);
  CHECK(static_cast<double>(pc.block()) == Pb);
  CHECK(static_cast<double>(pc.block_linear) == lin);
  CHECK(static_cast<double>(pc.embedding) == emb);
}

// Issue 13: under FSDP × TP each block's backward adds a gradient shard of w·P_block/(tp·N): every tp rank
// reduce-scatters its own 1/tp slice over the N = world/tp shard group. Llama-2-13B on 8 GPUs (h 5120, L 40,
// a 40, F 13824, V 32000): 40 blocks of 314,583,040 parameters, 4·40·314,583,040/8 = 6.29e9 bytes = 5.86 GiB of
// fp32 block gradients at the end of backward whatever tp is (before the fix: 0.3 / 11.7 / 23.1 / 46.1 GiB of
// gradients at the peak for tp 1 / 2 / 4 / 8).
TEST_CASE("terms: FSDP block gradients under tensor parallelism do not grow with tp", "[terms][memory]") {
  model_spec m;
  m.name = "llama-2-13b";
  m.family = "llama";
  m.hidden = 5120;
  m.layers = 40;
  m.heads = 40;
  m.kv_heads = 40;
  m.head_dim = 128;
  m.intermediate = 13824;
  m.vocab = 32000;
  m.max_context = 4096;
  const double Pb13 = 4.0 * 5120 * 5120 + 3.0 * 5120 * 13824 + 2 * 5120;  // 314,583,040
  for (int tp : {1, 2, 4, 8}) {
    training_config c;
    c.world_size = 8;
    c.gpus_per_node = 8;
    c.shard = sharding::full;
    c.tp = tp;
    c.micro_batch = 1;
    c.seq_len = 4096;
    c.ac = checkpointing::full();
    const auto ms = terms::model_state_bytes(terms::memory_shape_of(m, c, h100()));
    INFO("tp " << tp);
    CHECK(ms.block_gradient.raw() == Approx(4 * Pb13 / 8));
    CHECK(40 * ms.block_gradient.raw() / gib.raw() == Approx(5.86).epsilon(0.01));
    // the composed peak holds at most every block's shard and the root's bf16 head gradient (0.3 GiB at tp 1)
    const auto e = estimate_memory(m, c, h100());
    CHECK(e.at_peak.gradients.in(gib) < 7.0);
  }
}

TEST_CASE("terms: model states of a 1B model, fp32 master vs bf16, unsharded and sharded over 8", "[terms][memory]") {
  const model_spec m = llama_1b();
  const gpu_spec g = h100();
  SECTION("fp32 master, one GPU: 4 + 8 + 4 bytes per parameter") {
    const auto ms = terms::model_state_bytes(terms::memory_shape_of(m, one_gpu(), g));
    CHECK(ms.parameters.raw() == 4 * P);
    CHECK(ms.optimizer_states.raw() == 8 * P);
    CHECK(ms.gradients.raw() == 4 * P);
    CHECK(ms.accumulated_gradients.raw() == 0);
    CHECK(ms.block_gradient.raw() == 4 * Pb);
    CHECK(ms.head_gradient.raw() == 4 * V * h);
  }
  SECTION("bf16, one GPU: 2 + 4 + 2 bytes per parameter") {
    const auto ms = terms::model_state_bytes(terms::memory_shape_of(m, one_gpu(master_weights::bf16), g));
    CHECK(ms.parameters.raw() == 2 * P);
    CHECK(ms.optimizer_states.raw() == 4 * P);
    CHECK(ms.gradients.raw() == 2 * P);
    CHECK(ms.block_gradient.raw() == 2 * Pb);
    CHECK(ms.head_gradient.raw() == 2 * V * h);
  }
  SECTION("fp32 master, FSDP over 8: everything / 8; the head's unsharded gradient is bf16") {
    const auto ms = terms::model_state_bytes(terms::memory_shape_of(m, fsdp8(), g));
    CHECK(ms.parameters.raw() == 4 * P / 8);
    CHECK(ms.optimizer_states.raw() == 8 * P / 8);
    CHECK(ms.gradients.raw() == 4 * P / 8);
    CHECK(ms.block_gradient.raw() == 4 * Pb / 8);
    CHECK(ms.head_gradient.raw() == 2 * V * h);
  }
  SECTION("bf16, FSDP over 8") {
    const auto ms = terms::model_state_bytes(terms::memory_shape_of(m, fsdp8(master_weights::bf16), g));
    CHECK(ms.parameters.raw() == 2 * P / 8);
    CHECK(ms.optimizer_states.raw() == 4 * P / 8);
    CHECK(ms.gradients.raw() == 2 * P / 8);
  }
  SECTION("accumulation keeps the gradients across micro-batches; blocks add none in backward") {
    training_config c = fsdp8();
    c.grad_accum = 4;
    const auto ms = terms::model_state_bytes(terms::memory_shape_of(m, c, g));
    CHECK(ms.accumulated_gradients.raw() == 4 * P / 8);
    CHECK(ms.block_gradient.raw() == 0);
  }
}

TEST_CASE("terms: saved activations per block and per checkpointing mode", "[terms][memory]") {
  const model_spec m = llama_1b();
  const gpu_spec g = h100();
  // bf16 (no autocast), per token: norms 2·(2h + 2h) = 16384; attention 2q + 4kv + 2q + 4a = 10368;
  // SwiGLU 8F = 65536; rstd 8 → 92296. Per-op SAC: 2h + 2q + 4a + 8 + (2q + 2kv + 2F + 2h) = 33928.
  const auto bf = terms::activation_bytes_per_token(m, false);
  CHECK(bf.block_saved == 92296);
  CHECK(bf.selective_op == 33928);
  CHECK(bf.checkpoint == 2 * h);
  CHECK(bf.final_saved == 4 * h);
  CHECK(bf.grad_temp == 4 * h + 4 * F);
  CHECK(bf.lse == 4 * 32);
  // autocast over fp32 weights: fp32 norm inputs 2·4h and five bf16 casts 5·2h = 18h instead of 8h
  const auto amp = terms::activation_bytes_per_token(m, true);
  CHECK(amp.block_saved == 92296 + 10 * h);
  CHECK(amp.checkpoint == 4 * h);
  // the former name still answers
  CHECK(detail::activation_bytes_per_token(m, false).block_saved == bf.block_saved);

  const double T = 2048;
  training_config c = one_gpu(master_weights::bf16);
  SECTION("no checkpointing: every block saves its inventory") {
    const auto a = terms::saved_activation_bytes(m, terms::memory_shape_of(m, c, g));
    CHECK(a.block(0) == 92296 * T);
    CHECK(a.all_blocks.raw() == L * 92296 * T);
    CHECK(a.final_saved.raw() == 4 * h * T);
    CHECK(terms::recompute(a, 0) == 0);
  }
  SECTION("every-2: blocks 0, 2, …, 14 keep their input and recompute the rest") {
    c.ac = checkpointing::full(2);
    const auto a = terms::saved_activation_bytes(m, terms::memory_shape_of(m, c, g));
    CHECK(a.block(0) == 2 * h * T);
    CHECK(a.block(1) == 92296 * T);
    CHECK(a.all_blocks.raw() == 8 * 2 * h * T + 8 * 92296 * T);
    CHECK(terms::recompute(a, 0) == (92296 - 2 * h) * T);
    CHECK(terms::recompute(a, 1) == 0);
  }
  SECTION("per-op SAC and Megatron selective recompute") {
    c.ac = checkpointing::selective_op();
    CHECK(terms::saved_activation_bytes(m, terms::memory_shape_of(m, c, g)).block(3) == 33928 * T);
    c.ac = checkpointing::selective_attn();
    CHECK(terms::saved_activation_bytes(m, terms::memory_shape_of(m, c, g)).block(3) == (92296 - 128) * T);
  }
  SECTION("fp8 blocks save their linear inputs in 1 byte (torchtitan's runs), in bf16 under the hf stack's Float8Linear") {
    c.format = compute_format::fp8;
    c.stack = training_stack::torchtitan;
    const auto a = terms::saved_activation_bytes(m, terms::memory_shape_of(m, c, g));
    // shared norm outputs 2·2h → 1·2h (−4096); the O-projection input + 1·q (+2048); down input 2F → 1F (−8192)
    CHECK(a.low_precision.block_saved == 82056);
    CHECK(a.block(0) == a.low_precision.block_saved * T);
    // torchao 0.18's eager Float8Linear saves the bf16 input (matmul_with_hp_or_float8_args): the bf16 block's bytes
    c.stack = training_stack::hf;
    const auto b = terms::saved_activation_bytes(m, terms::memory_shape_of(m, c, g));
    CHECK(b.low_precision.block_saved == 92296);
    CHECK(b.block(0) == 92296 * T);
  }
  SECTION("torchao's MXFP8 linear saves the bf16 input the block holds (no autocast): the bf16 block's bytes") {
    c.master = master_weights::bf16;  // no autocast
    const double bf = terms::saved_activation_bytes(m, terms::memory_shape_of(m, c, g)).high_precision.block_saved;
    c.format = compute_format::mxfp8;
    const auto a = terms::saved_activation_bytes(m, terms::memory_shape_of(m, c, g));
    // (it counted the O projection's input a second time, 2·q B per token, as if it were a copy of its own)
    CHECK(a.low_precision.block_saved == bf);
    c.stack = training_stack::megatron;  // Transformer Engine keeps its own copy of the O input: the 2 B inventory
    const auto mg = terms::saved_activation_bytes(m, terms::memory_shape_of(m, c, g));
    CHECK(mg.low_precision.block_saved == mg.high_precision.block_saved + 2 * 2048);
  }
}

TEST_CASE("bug: NVFP4Linear's saved FP4 weights were not held, and autocast copies were counted for its blocks", "[terms][memory][precision]") {
  // torchao's NVFP4Linear (nvfp4_mm_triton.forward, nvfp4_linear.py @v0.18.0) saves the transposed FP4 weight, its
  // E4M3 scales and amax for backward: 0.5625 B per weight of each quantized block, kept from its forward to its
  // backward. It calls nvfp4_linear, not F.linear, so autocast caches no bf16 copy of its weight. Llama-3.2-1B: the
  // last 15 % of blocks stay bf16 (ceil(2.4) = 3), 13 NVFP4 blocks. Before, no saved weight was counted and under
  // autocast every NVFP4 block held autocast's 2·lin copy.
  const model_spec m = llama_1b();
  const gpu_spec g = h100();
  const double saved = 0.5625 * lin;  // 34,209,792 B
  training_config c = one_gpu(master_weights::bf16);
  c.format = compute_format::nvfp4;
  auto wc = [&] { return terms::weight_copy_bytes(terms::memory_shape_of(m, c, g)); };
  CHECK(wc().saved_quantized_block.raw() == saved);
  CHECK(wc().autocast_block_low.raw() == 0);
  CHECK(wc().autocast_after_forward.raw() == 13 * saved);  // 444,727,296 B
  // under autocast (fp32 masters, no FSDP): the 3 bf16 blocks keep autocast's copies, the NVFP4 blocks their FP4 weights
  c.master = master_weights::fp32;
  CHECK(wc().autocast_block_low.raw() == 0);
  CHECK(wc().autocast_after_forward.raw() == 13 * saved + 3 * 2 * lin);  // 809,631,744 B
  // full checkpointing: nothing kept after the forward (each recompute makes its block's copy again)
  c.ac.mode = ac_mode::full;
  CHECK(wc().autocast_after_forward.raw() == 0);
  CHECK(wc().saved_quantized_block.raw() == saved);
  // per-op SAC recomputes the quantize kernels (not in the save list); Megatron's Transformer Engine caches its own
  c.ac.mode = ac_mode::selective_op;
  CHECK(wc().saved_quantized_block.raw() == 0);
  c.ac.mode = ac_mode::none;
  c.stack = training_stack::megatron;
  CHECK(wc().saved_quantized_block.raw() == 0);
  // the walk holds them: the moment after the forward rises by exactly the 13 blocks' saved weights
  c.stack = training_stack::hf;
  c.master = master_weights::bf16;
  const memory_terms t = compute_memory_terms(m, c, g);
  memory_terms t0 = t;
  t0.weights.saved_quantized_block = bytes{};
  t0.weights.autocast_after_forward = bytes{};
  CHECK(compose_memory(t).after_forward.raw() - compose_memory(t0).after_forward.raw() == Approx(13 * saved));
}

TEST_CASE("terms: torchao's MXFP8 linear holds its casts per linear, not a block's weights in two layouts", "[terms][memory][precision]") {
  // mx_mm (torchao/prototype/moe_training/mxfp8_linear.py @v0.18.0) casts per linear, 1 + 1/32 B per element, and the
  // GEMM copies the scales into the blocked layout (1/32 B). Llama-3.2-1B at 2048 tokens: forward, the down projection
  // (ri = W = 2048·8192 = 16,777,216): 1.0625·(ri + W) = 35,651,584 B; backward, the gate (ro = W = 16,777,216, ri =
  // 4,194,304): 1.03125·(2ro + ri + W) + (ro + ri)/32 = 56,229,888 + 655,360 = 56,885,248 B. The generic copies (both
  // layouts of the block's weights, 2.0625·lin = 125,435,904 B) stay for the other stacks' MXFP8.
  const model_spec m = llama_1b();
  const gpu_spec g = h100();
  training_config c = one_gpu(master_weights::bf16);
  c.format = compute_format::mxfp8;
  const auto wc = terms::weight_copy_bytes(terms::memory_shape_of(m, c, g));
  CHECK(wc.quantized_block_forward.raw() == 35'651'584);
  CHECK(wc.quantized_block.raw() == 56'885'248);
  c.stack = training_stack::torchtitan;
  const auto tt = terms::weight_copy_bytes(terms::memory_shape_of(m, c, g));
  CHECK(tt.quantized_block.raw() == Approx(2.0625 * lin));
  CHECK(tt.quantized_block_forward.raw() == Approx(2.0625 * lin));
}

TEST_CASE("terms: loss buffers, standard vs chunked", "[terms][memory]") {
  const model_spec m = llama_1b();
  const gpu_spec g = h100();
  const double T = 2048;
  training_config c = one_gpu();
  const auto st = terms::loss_buffer_bytes(terms::memory_shape_of(m, c, g));
  CHECK(st.saved.raw() == 4 * T * V);
  CHECK(st.forward_transient.raw() == 6 * T * V);
  CHECK(st.backward_transient.raw() == 8 * T * V);
  CHECK(st.head_gradient.raw() == 0);
  c.loss = loss_impl::liger;  // Liger's fused linear cross-entropy
  // chunk = next_pow2(ceil(2048 / ceil(128256 / 2048))) = next_pow2(ceil(2048 / 63)) = next_pow2(33) = 64
  const auto ch = terms::loss_buffer_bytes(terms::memory_shape_of(m, c, g));
  CHECK(ch.saved.raw() == 2 * T * h);
  CHECK(ch.forward_transient.raw() == 6 * 64 * V);
  CHECK(ch.backward_transient.raw() == 0);
  CHECK(ch.head_gradient.raw() == 4 * V * h);  // fp32 gradient of the head, computed in forward
  training_config f = fsdp8();
  f.loss = loss_impl::liger;
  CHECK(terms::loss_buffer_bytes(terms::memory_shape_of(m, f, g)).head_gradient.raw() == 2 * V * h);
  f.grad_accum = 2;
  CHECK(terms::loss_buffer_bytes(terms::memory_shape_of(m, f, g)).head_gradient.raw() == 0);
}

TEST_CASE("terms: the hf stack's chunked loss is the reference trainer's 8 checkpointed chunks, hand-derived", "[terms][memory]") {
  // apps/train/bwtrain/loss.py `chunked_loss`: 8 chunks of Tc = 2048 / 8 = 256 tokens, each LM head + fp32 cross-entropy
  // under a non-reentrant checkpoint. Before, bwplan priced Liger's fused linear cross-entropy for `loss chunked`, which
  // the trainer does not run (its head gradient in forward, 64-token chunks, no recompute).
  const model_spec m = llama_1b();
  const gpu_spec g = h100();
  const double T = 2048, Tc = 256, Vh = V * h;
  training_config c = one_gpu();  // autocast over fp32 weights
  c.loss = loss_impl::chunked;
  const auto a = terms::loss_buffer_bytes(terms::memory_shape_of(m, c, g));
  CHECK(a.saved.raw() == 2 * T * h);               // the fp32 head input kept by the checkpoints, not its bf16 cast
  CHECK(a.forward_transient.raw() == 8 * Tc * V);  // one chunk's fp32 upcast and log-softmax
  CHECK(a.head_gradient.raw() == 0);               // the head's gradient comes in backward, as standard
  // the last chunk: the bf16 sum of the earlier chunks' head gradients (2·V·h, in the input buffer of the one cast's
  // ToCopyBackward0), 7 chunks' fp32 input gradients, and the larger of the chunk's loss backward (log-softmax + 2
  // gradients, 12·Tc·V, with the recompute's bf16 weight and input casts) and its head backward (its bf16 weight
  // gradient 2·V·h, the input cast and the input gradient); after it, the sum and its one fp32 cast, 6·V·h
  const double last = 2 * Vh + 4 * (T - Tc) * h;
  CHECK(a.backward_transient.raw() ==
        std::max({last + 12 * Tc * V + 2 * Vh + 2 * Tc * h, last + 2 * Tc * h + 2 * Tc * h + 2 * Vh, 6 * Vh}));
  training_config f = fsdp8();  // bf16 compute: no casts, the unsharded bf16 gradient accumulates
  f.loss = loss_impl::chunked;
  const auto b = terms::loss_buffer_bytes(terms::memory_shape_of(m, f, g));
  CHECK(b.saved.raw() == 0);
  CHECK(b.forward_transient.raw() == 8 * Tc * V);
  CHECK(b.backward_transient.raw() == 2 * Vh + 2 * (T - Tc) * h + std::max(12 * Tc * V, 2 * Tc * h + 2 * Vh));
  // with accumulation the buffer's sum is the same bytes (it is added into the .grad, or FSDP2's unsharded gradient
  // built anew each micro-batch, after the last chunk)
  f.grad_accum = 2;
  CHECK(terms::loss_buffer_bytes(terms::memory_shape_of(m, f, g)).backward_transient.raw() == b.backward_transient.raw());
  c.grad_accum = 2;
  CHECK(terms::loss_buffer_bytes(terms::memory_shape_of(m, c, g)).backward_transient.raw() == a.backward_transient.raw());
  c.grad_accum = 1;
  // against Liger's at the same point: the trainer's loss holds more in backward and runs the head GEMM again
  training_config l = c;
  l.loss = loss_impl::liger;
  const auto tc = estimate_throughput(m, c, g), tl = estimate_throughput(m, l, g);
  CHECK(tc.gemm.raw() > tl.gemm.raw());
  CHECK(tc.memory_bound.raw() > tl.memory_bound.raw());  // 70 against 8 bytes per logit
  CHECK(tc.tokens_per_s < tl.tokens_per_s);
}

TEST_CASE("terms: weight copies and communication buffers", "[terms][memory]") {
  const model_spec m = llama_1b();
  const gpu_spec g = h100();
  SECTION("FSDP2: the root and the current + prefetched block gathered in bf16") {
    const auto w = terms::weight_copy_bytes(terms::memory_shape_of(m, fsdp8(), g));
    CHECK(w.fsdp_root.raw() == 2 * (emb + h));
    CHECK(w.fsdp_gathered.raw() == 2 * 2 * Pb);
    CHECK(w.autocast_all.raw() == 0);
    CHECK(w.ddp_buckets.raw() == 0);
  }
  SECTION("FP8 all-gather halves the gathered blocks") {
    training_config c = fsdp8();
    c.format = compute_format::fp8;
    c.fp8_all_gather = true;
    c.stack = training_stack::torchtitan;
    const auto w = terms::weight_copy_bytes(terms::memory_shape_of(m, c, g));
    CHECK(w.fsdp_gathered.raw() == 2 * 1 * Pb);
    CHECK(w.quantized_block.raw() == 2 * lin);  // Hopper keeps the fp8 weight and its transpose
  }
  SECTION("grad-op keeps every block gathered") {
    training_config c = fsdp8();
    c.shard = sharding::grad_op;
    const auto w = terms::weight_copy_bytes(terms::memory_shape_of(m, c, g));
    CHECK(w.fsdp_gathered.raw() == 0);
    CHECK(w.grad_op_block.raw() == 2 * Pb);
    CHECK(w.grad_op_all.raw() == L * 2 * Pb);
  }
  SECTION("autocast caches a bf16 copy of every GEMM weight; DDP holds gradient buckets") {
    training_config c = one_gpu();
    c.world_size = 8;
    const auto w = terms::weight_copy_bytes(terms::memory_shape_of(m, c, g));
    CHECK(w.autocast_block.raw() == 2 * lin);
    CHECK(w.autocast_head.raw() == 2 * V * h);
    CHECK(w.autocast_blocks.raw() == 2 * lin * L);
    CHECK(w.autocast_all.raw() == 2 * (L * lin + emb));
    CHECK(w.autocast_after_forward.raw() == L * 2 * lin);
    CHECK(w.ddp_buckets.raw() == 4 * P);
    c.ac = checkpointing::full();  // checkpointed blocks drop their copies after the forward
    CHECK(terms::weight_copy_bytes(terms::memory_shape_of(m, c, g)).autocast_after_forward.raw() == 0);
  }
}

TEST_CASE("terms: transient working sets and the allocator", "[terms][memory]") {
  const model_spec m = llama_1b();
  const gpu_spec g = h100();
  const double T = 2048;
  training_config c = fsdp8();
  c.optimizer = optimizer_impl::foreach;
  const memory_terms t = compute_memory_terms(m, c, g);
  CHECK(t.transient.activation_gradients.raw() == (4 * h + 4 * F) * T);
  // unsharded bf16 gradient 2·Pb + the previous block's fp32 reduce-scatter input 4·Pb + the gathered blocks 4·Pb
  CHECK(t.transient.block_gradient_buffers.raw() == 2 * Pb + 4 * Pb + 4 * Pb);
  CHECK(t.transient.root_reduce_scatter.raw() == 6 * (emb + h));
  CHECK(t.transient.optimizer.raw() == 4 * P / 8);
  CHECK(t.transient.checkpointed_forward.raw() == 6 * F * T);
  const runtime_overheads rt{};
  CHECK(t.allocator.logits_segment.raw() == 2 * T * V);
  CHECK(t.allocator.non_pytorch == rt.cuda_context + rt.nccl);
  CHECK(t.allocator.capacity == g.cuda_capacity());
  CHECK(t.allocator.stream_pool);
  const memory_terms one = compute_memory_terms(m, one_gpu(), g);
  CHECK(one.allocator.non_pytorch == rt.cuda_context);
  CHECK_FALSE(one.allocator.stream_pool);
  CHECK(one.transient.optimizer.raw() == 0);  // fused AdamW
}

TEST_CASE("terms: the memory terms compose to the estimate", "[terms][memory]") {
  const model_spec m = llama_1b();
  const gpu_spec g = h100();
  for (const training_config& c0 : {one_gpu(), fsdp8(), fsdp8(master_weights::bf16)}) {
    training_config c = c0;
    c.optimizer = optimizer_impl::foreach;
    const memory_terms t = compute_memory_terms(m, c, g);
    const memory_estimate e = estimate_memory(m, c, g);
    const memory_estimate e2 = compose_memory(t);
    CHECK(e.peak_reserved == e2.peak_reserved);
    CHECK(e.peak_allocated == e2.peak_allocated);
    // before the forward: model states + workspace + DDP buckets
    CHECK(e.before_forward == t.states.parameters + t.states.optimizer_states + t.states.accumulated_gradients +
                                  t.allocator.workspace + t.weights.ddp_buckets);
    // after the backward every gradient is held
    CHECK(e.after_backward ==
          t.states.parameters + t.states.optimizer_states + t.states.gradients + t.allocator.workspace + t.weights.ddp_buckets);
    // the optimizer step adds its temporaries
    CHECK(e.optimizer_peak.raw() == Approx((e.after_backward + t.transient.optimizer).raw()));
    // after the forward: saved activations, the final norm/head input, the saved loss buffer, the weight copies kept
    CHECK(e.after_forward.raw() == Approx((e.before_forward + t.activations.all_blocks + t.activations.final_saved +
                                           t.loss.saved + t.weights.fsdp_root + t.weights.autocast_head +
                                           t.weights.autocast_after_forward).raw()));
    // the loss backward is a moment of the backward pass
    CHECK(e.backward_peak.raw() >= Approx((e.after_forward + t.loss.backward_transient).raw()));
    // reserved = allocated + the allocator's slack at the peak moment (the cheap bound: no replay); a replayed
    // configuration takes it from the caching-allocator replay instead
    runtime_overheads cheap;
    cheap.replay = runtime_overheads::replay_policy::never;
    const memory_estimate ec = estimate_memory(m, c, g, cheap);
    CHECK_FALSE(ec.replayed);
    CHECK(e.replayed == t.replay.replayable);
    CHECK(ec.peak_reserved.raw() ==
          ec.peak_allocated.raw() + (terms::fragmentation_slack(t.allocator, ec.at_peak) +
                                     terms::reduce_scatter_pool(t.allocator, t.states, ec.at_peak, ec.peak_phase)));
    if (e.replayed) CHECK(e.peak_reserved.raw() >= 0.9 * e.peak_allocated.raw());
    CHECK(e.non_pytorch == t.allocator.non_pytorch);
  }
}

TEST_CASE("terms: changing one term changes the estimate by that term", "[terms][memory]") {
  // What CPU offload of the optimizer states would do: the states leave the GPU at every moment of the step.
  const model_spec m = llama_1b();
  const gpu_spec g = h100();
  memory_terms t = compute_memory_terms(m, fsdp8(), g);
  const memory_estimate before = compose_memory(t);
  const bytes states = t.states.optimizer_states;
  t.states.optimizer_states = bytes{};
  const memory_estimate after = compose_memory(t);
  CHECK(after.before_forward.raw() == Approx((before.before_forward - states).raw()));
  CHECK(after.peak_allocated.raw() == Approx((before.peak_allocated - states).raw()));
  CHECK(after.optimizer_peak.raw() == Approx((before.optimizer_peak - states).raw()));
}

TEST_CASE("terms: compute per op class of one micro-batch", "[terms][throughput]") {
  const model_spec m = llama_1b();
  const gpu_spec g = h100();
  const throughput_calibration k{};
  const training_config c = one_gpu(master_weights::bf16);
  const auto s = terms::throughput_shape_of(m, c, g, k);
  const double T = 2048, peak = 989e12;
  // GEMM efficiency gemm_max · k/(k + 256) · mn/(mn + 2.5e5), pinned at 790/989 for 8192³: gemm_max = 0.80 /
  // (8192/8448 · 67108864/67358864) = 0.828074
  CHECK(k.gemm_max == Approx(0.828074).epsilon(1e-5));
  CHECK(gemm_efficiency(8192, 8192.0 * 8192, k) == Approx(0.80));
  // a 2048-deep GEMM with a 2048 × 2048 output: 0.828074 · 2048/2304 · 4194304/4444304 = 0.694660
  const double e_sq = 0.694660;
  CHECK(gemm_efficiency(2048, 2048.0 * 2048, k) == Approx(e_sq).epsilon(1e-5));
  auto e = [&](double kk, double mn) { return gemm_efficiency(kk, mn, k); };
  // forward, input-gradient and weight-gradient GEMM of each linear (m = T = 2048): q and o 2048→2048, k and v
  // 2048→512, gate and up 2048→8192, down 8192→2048
  auto lin3 = [&](double in, double out) {
    const double f = 2 * T * in * out / peak;
    return f / e(in, T * out) + f / e(out, T * in) + f / e(T, in * out);
  };
  const double block_s = 2 * lin3(h, 2048) + 2 * lin3(h, 512) + 2 * lin3(h, F) + lin3(F, h);
  const auto gm = terms::gemm_time(s, c, k);
  CHECK(gm.block.raw() == 2 * T * lin);
  CHECK(gm.head.raw() == 2 * T * V * h);
  CHECK(gm.high_precision.raw() == Approx(L * block_s));
  CHECK(gm.high_rate.raw() == Approx(3 * 2 * T * lin / block_s));
  CHECK(gm.low_precision.raw() == 0);
  const double hf = 2 * T * V * h / peak;  // LM head: m = T, n = V, k = h
  CHECK(gm.lm_head.raw() == Approx(hf / e(h, T * V) + hf / e(V, T * h) + hf / e(T, V * h)));
  // attention: FlashAttention-3 rates at head_dim 64 (497 / 474 TFLOP/s) × 0.83 × causal 0.905 × key length 2048
  // over 2048 + 300 (forward) and 2048 + 400 (backward)
  const auto at = terms::attention_time(s, c, k);
  CHECK(at.forward.raw() == 2 * 1 * 2048.0 * 2048 * 2048);  // 2·b·s²·q
  const double rf = 497e12 * 0.83 * 0.905 * 2048 / 2348, rb = 474e12 * 0.83 * 0.905 * 2048 / 2448;
  CHECK(at.forward_rate.raw() == Approx(rf));
  CHECK(at.backward_rate.raw() == Approx(rb));
  CHECK(at.time.raw() == Approx(L * (at.forward.raw() / rf + 2.5 * at.forward.raw() / rb)));
  CHECK(at.recompute.raw() == 0);
  // element-wise bytes per token and block, pure bf16 (rs = no = 2): forward h·(2·4 + 2·6) + 20·(q + kv) + 10·F =
  // 174,080; backward h·(2·6 + 9·2 + 6·2) + 26·(q + kv) + 18·F + 4·(q + kv) (GQA) = 310,272
  const auto blk = terms::block_elementwise(s, 0);
  CHECK(blk.forward == 174080);
  CHECK(blk.backward == 310272);
  const auto mb = terms::memory_bound_time(s, c);
  CHECK(mb.elementwise.raw() == L * T * (174080 + 310272));
  CHECK(mb.loss.raw() == 48 * T * V);
  CHECK(mb.casts.raw() == 0);  // bf16 master: no fp32 → bf16 casts
  CHECK(mb.ring_attention.raw() == 0);
  CHECK(mb.time.raw() == Approx((mb.elementwise + mb.loss).raw() / (3.35e12 * 0.60)));
  CHECK(terms::launch_time(s, k).raw() == Approx(3 * L * 15 * 4.7e-6));
  CHECK(terms::optimizer_time(s).raw() == Approx(7 * 2 * P / (3.35e12 * 0.60)));
  // full checkpointing recomputes every block's forward GEMMs, attention and element-wise kernels
  training_config ck = c;
  ck.ac = checkpointing::full();
  const auto s2 = terms::throughput_shape_of(m, ck, g, k);
  CHECK(terms::gemm_time(s2, ck, k).recompute_high.raw() == Approx(L * 2 * T * lin));
  CHECK(terms::attention_time(s2, ck, k).recompute.raw() == Approx(L * at.forward.raw()));
  CHECK(terms::memory_bound_time(s2, ck).elementwise.raw() == Approx(L * T * (174080 + 310272) + L * T * 174080));
  // fp32 master under autocast: rs = no = 4, five bf16 casts of the normalized input each way, weights cast to bf16
  // and their gradients back (12 B per parameter), again per recomputed block (6 B)
  const auto s3 = terms::throughput_shape_of(m, one_gpu(), g, k);
  const auto blk3 = terms::block_elementwise(s3, 0);
  CHECK(blk3.forward == h * (2 * 8 + 30 + 2 * 10) + 20 * 2560 + 10 * F);
  CHECK(blk3.backward == h * (2 * 12 + 30 + 9 * 4 + 6 * 4 + 12) + 26 * 2560 + 18 * F + 4 * 2560);
  CHECK(terms::memory_bound_time(s3, one_gpu()).casts.raw() == Approx(12 * P));
  training_config amp_ck = one_gpu();
  amp_ck.ac = checkpointing::full();
  CHECK(terms::memory_bound_time(terms::throughput_shape_of(m, amp_ck, g, k), amp_ck).casts.raw() == Approx(18 * P));
}

TEST_CASE("terms: torch.compile fuses the blocks' element-wise kernels and the compiled loss", "[terms][throughput][stacks]") {
  const model_spec m = llama_1b();  // h 2048, q 2048, kv 512, F 8192
  const gpu_spec g = h100();
  const throughput_calibration k{};
  training_config c = one_gpu(master_weights::bf16);
  c.compile = true;
  const auto s = terms::throughput_shape_of(m, c, g, k);
  CHECK(s.compiled);
  CHECK_FALSE(s.compiled_loss);  // hf compiles the blocks only
  // Inductor, bf16 stream (rs = 2), two norms: forward h·(rs + 2·2 + 2·(2rs + 2)) + 4·(q + kv) + 6·F
  // = 18·2048 + 4·2560 + 6·8192 = 96,256 (eager 174,080); backward h·(3rs·2 + 10) + 4·(q + kv) + 10·F + 4·(q + kv)
  // (GQA) = 22·2048 + 8·2560 + 10·8192 = 147,456 (eager 310,272)
  const auto blk = terms::block_elementwise(s, 0);
  CHECK(blk.forward == 96256);
  CHECK(blk.backward == 147456);
  const double T = 2048;
  const auto mb = terms::memory_bound_time(s, c);
  CHECK(mb.elementwise.raw() == L * T * (96256 + 147456));
  CHECK(mb.loss.raw() == 48 * T * V);  // the hf loss stays eager
  // autocast over fp32 weights (rs = 4): forward 28h, backward 34h; the weight casts stay (outside the fused chains)
  training_config a = one_gpu();
  a.compile = true;
  const auto sa = terms::throughput_shape_of(m, a, g, k);
  const auto blka = terms::block_elementwise(sa, 0);
  CHECK(blka.forward == 28 * 2048 + 4 * 2560 + 6 * 8192);
  CHECK(blka.backward == 34 * 2048 + 8 * 2560 + 10 * 8192);
  CHECK(terms::memory_bound_time(sa, a).casts.raw() == terms::memory_bound_time(terms::throughput_shape_of(m, one_gpu(), g, k), one_gpu()).casts.raw());
  // torchtitan and torchtune compile the loss too: 8 B per logit instead of 48
  training_config tt = c;
  tt.stack = training_stack::torchtitan;
  tt.master = master_weights::fp32;
  const auto st = terms::throughput_shape_of(m, tt, g, k);
  CHECK(st.compiled_loss);
  CHECK(terms::memory_bound_time(st, tt).loss.raw() == 8 * T * V);
  // Megatron-LM does not compile (the plan rule refuses it; the shape ignores the flag)
  training_config mg = c;
  mg.stack = training_stack::megatron;
  CHECK_FALSE(terms::throughput_shape_of(m, mg, g, k).compiled);
  // through the estimate: the compiled step is shorter by exactly the element-wise bytes saved over the achieved
  // HBM bandwidth (3.35 TB/s × 0.60); nothing else changes
  training_config e = c;
  e.compile = false;
  const throughput_estimate eager = estimate_throughput(m, e, g);
  const throughput_estimate comp = estimate_throughput(m, c, g);
  const double saved = L * T * ((174080 + 310272) - (96256 + 147456)) / (3.35e12 * 0.60);
  CHECK((eager.step - comp.step).raw() == Approx(saved).epsilon(1e-6));
  CHECK(comp.tokens_per_s > eager.tokens_per_s);
}

TEST_CASE("terms: shape-following terms: q/k norms, head_dim, KV heads, the attention kernel", "[terms][throughput]") {
  const gpu_spec g = h100();
  const throughput_calibration k{};
  training_config c = one_gpu();  // autocast over fp32 weights
  // Qwen3-style q/k RMSNorm: under autocast the norm makes q and k fp32 (RoPE in fp32, SDPA casts back):
  // 32 B forward and 42 B backward more per element of q and k
  model_spec m = llama_1b();
  const auto plain = terms::block_elementwise(terms::throughput_shape_of(m, c, g, k), 0);
  m.qk_norm = true;
  const auto normed = terms::block_elementwise(terms::throughput_shape_of(m, c, g, k), 0);
  CHECK(normed.forward - plain.forward == 32 * (2048 + 512));
  CHECK(normed.backward - plain.backward == 42 * (2048 + 512));
  // in pure bf16 the norm alone: 4 and 6 B
  const training_config b = one_gpu(master_weights::bf16);
  m.qk_norm = false;
  const auto pb = terms::block_elementwise(terms::throughput_shape_of(m, b, g, k), 0);
  m.qk_norm = true;
  const auto nb = terms::block_elementwise(terms::throughput_shape_of(m, b, g, k), 0);
  CHECK(nb.forward - pb.forward == 4 * 2560);
  CHECK(nb.backward - pb.backward == 6 * 2560);
  // multi-head attention (kv = q): no grouped-query reduction in the backward
  model_spec mha = llama_1b();
  mha.kv_heads = 32;
  const auto sm = terms::throughput_shape_of(mha, b, g, k);
  CHECK(terms::block_elementwise(sm, 0).backward == h * 42 + 26 * 4096 + 18 * F);
  // attention rates follow head_dim: 128 runs at the FlashAttention-3 paper's 648 / 561 TFLOP/s, 256 at 642 / 556
  model_spec d128 = llama_1b();
  d128.heads = 16;
  d128.head_dim = 128;
  const auto a128 = terms::attention_time(terms::throughput_shape_of(d128, b, g, k), b, k);
  CHECK(a128.forward_rate.raw() == Approx(648e12 * 0.83 * 0.905 * 2048 / 2348));
  CHECK(a128.backward_rate.raw() == Approx(561e12 * 0.83 * 0.905 * 2048 / 2448));
  // FlashAttention-2 (the 2024 stacks): the published rates, no calibration factor; the stack repeats K/V to q width
  gpu_spec g2 = g;
  g2.attention = attention_kernel::flash2;
  const auto s2 = terms::throughput_shape_of(llama_1b(), b, g2, k);
  CHECK(s2.kv_attention == 2048);
  CHECK(terms::attention_time(s2, b, k).forward_rate.raw() == Approx(324e12 * 0.905 * 2048 / 2348));
  CHECK(terms::block_elementwise(s2, 0).forward - pb.forward == 4 * 2560);  // repeat_kv's copies
  // Ampere and Ada run FlashAttention-2 whatever the kernel setting, at the FlashAttention-2 paper's A100 fraction (73 %
  // of the bf16 peak forward at head_dim 128; the H100 FlashAttention-2 ratios elsewhere): before, an A100 was priced
  // with the FlashAttention-3 rates × the H200 factor (0.655 × 0.83 = 0.54 of its peak forward)
  gpu_spec a100 = g;
  a100.architecture = "ampere";
  a100.dense_flops = {{"bf16", flop_rate::base(312e12)}};
  const auto sa = terms::throughput_shape_of(d128, b, a100, k);
  CHECK(sa.ampere_attention);
  const auto aa = terms::attention_time(sa, b, k);
  CHECK(aa.forward_rate.raw() == Approx(0.73 * 312e12 * 0.905 * 2048 / 2348));
  CHECK(aa.backward_rate.raw() == Approx(0.73 * 322 / 370 * 312e12 * 0.905 * 2048 / 2448));
  a100.attention = attention_kernel::flash2;  // the setting does not change what runs there
  CHECK(terms::attention_time(terms::throughput_shape_of(d128, b, a100, k), b, k).forward_rate.raw() == Approx(aa.forward_rate.raw()));
  a100.architecture = "ada";
  a100.attention = attention_kernel::fused;
  CHECK(terms::attention_time(terms::throughput_shape_of(d128, b, a100, k), b, k).forward_rate.raw() == Approx(aa.forward_rate.raw()));
}

TEST_CASE("terms: the FSDP all-gather of one block is collective_time of its bf16 bytes", "[terms][throughput]") {
  const model_spec m = llama_1b();
  const gpu_spec g = h100();
  const instance_spec i = p5();
  const throughput_calibration k{};
  const training_config c = fsdp8();
  const auto s = terms::throughput_shape_of(m, c, g, k);
  const auto f = terms::fsdp_communication(s, c, g, &i, k);
  REQUIRE(f.active);
  // L + 1 units (16 blocks and the root) of 2·P/17 bytes each, over the 8 GPUs of one node
  const double unit = 2 * P / (L + 1);
  const comm_group node{8, 8, 1};
  const double ag = collective_time(collective_kind::all_gather, bytes::base(unit), node, g, &i, k).raw();
  CHECK(f.first_gather.raw() == ag);
  // by hand: 20 µs + 7 ring steps of 3.4 µs + 7/8 of the unit over NVLink at the message-size efficiency
  const double msg = unit / 8;
  const double bw = 450e9 * 0.80 * msg / (msg + 4.0 * 1048576);
  CHECK(ag == Approx(20e-6 + 7 * 3.4e-6 + 7.0 / 8 * unit / bw));
  const double rs = collective_time(collective_kind::reduce_scatter, bytes::base(4 * P / (L + 1)), node, g, &i, k).raw();
  CHECK(f.per_micro_batch.raw() == Approx(2 * (L + 1) * ag + (L + 1) * rs));
  // no other parallelism communicates
  const auto cm = terms::communication(m, s, c, g, &i, k);
  CHECK(cm.tensor_parallel.raw() == 0);
  CHECK(cm.context_parallel.raw() == 0);
  CHECK(cm.expert_parallel.raw() == 0);
  CHECK_FALSE(cm.ddp);
  CHECK_FALSE(cm.hsdp);
}

TEST_CASE("terms: overlap hides FSDP collectives behind compute, the first gather excepted", "[terms][throughput]") {
  terms::communication_terms t;
  t.fsdp.active = true;
  t.fsdp.per_micro_batch = seconds::base(0.3);
  t.fsdp.first_gather = seconds::base(0.01);
  t.tensor_parallel = seconds::base(0.2);
  t.context_parallel = seconds::base(0.5);
  t.context_parallel_exposed = seconds::base(0.1);
  t.expert_parallel = seconds::base(0.05);
  t.micro_batches = 2;
  t.blocks = 16;
  // compute 1 s per micro-batch, 0.2 s of it attention
  const auto ex = terms::exposed_communication(t, seconds::base(1.0), seconds::base(0.2));
  CHECK(ex.data_parallel.raw() == Approx(2 * 0.01));
  CHECK(ex.tensor_parallel.raw() == 0.2);                // not overlapped
  CHECK(ex.context_parallel.raw() == Approx(0.1));  // what ring attention waits for, step by step
  // the MoE all-to-all is waited for where it is issued unless the plan overlaps it (moe_a2a_overlap)
  CHECK(ex.expert_parallel.raw() == Approx(0.05));
  // overlapped, two micro-batches: the second's all-to-all (0.025 s) hides behind the first's compute; one micro-batch's
  // worth stays
  terms::communication_terms ov = t;
  ov.moe_a2a_overlap = true;
  CHECK(terms::exposed_communication(ov, seconds::base(1.0), seconds::base(0.2)).expert_parallel.raw() == Approx(0.025));
  const auto tot = terms::communication_total(t);
  CHECK(tot.data_parallel.raw() == Approx(0.6));
  // a short micro-batch exposes the excess
  CHECK(terms::exposed_communication(t, seconds::base(0.1), seconds::base(0.02)).data_parallel.raw() ==
        Approx(2 * (0.3 - 0.1 + 0.01)));
}

TEST_CASE("terms: the throughput terms compose to the estimate", "[terms][throughput]") {
  const model_spec m = llama_1b();
  const gpu_spec g = h100();
  const instance_spec i = p5();
  std::vector<training_config> cs{one_gpu(), fsdp8()};
  training_config tp = fsdp8(master_weights::bf16);
  tp.world_size = 16;
  tp.tp = 2;
  tp.cp = 2;
  tp.grad_accum = 4;
  tp.ac = checkpointing::full(2);
  cs.push_back(tp);
  training_config hy = fsdp8();
  hy.world_size = 16;
  hy.shard = sharding::hybrid;
  cs.push_back(hy);
  for (const training_config& c : cs) {
    const throughput_terms t = compute_throughput_terms(m, c, g, &i);
    const throughput_estimate e = estimate_throughput(m, c, g, &i);
    const double ga = static_cast<double>(c.grad_accum);
    CHECK(e.tokens_per_s == compose_throughput(t).tokens_per_s);
    CHECK(e.gemm.raw() == ga * t.compute.gemm.total().raw());
    CHECK(e.attention.raw() == ga * t.compute.attention.time.raw());
    CHECK(e.compute.raw() == ga * t.compute.micro_batch().raw() + t.optimizer.raw());
    CHECK(e.communication == e.comm.total());
    CHECK(e.exposed_communication == e.exposed.total());
    CHECK(e.step == e.compute + e.exposed_communication);
    CHECK(e.tokens_per_s == t.tokens_per_step / e.step.raw());
    CHECK(e.tokens_per_step == Approx(ga * static_cast<double>(c.micro_batch * c.seq_len) / (c.tp * c.cp) * c.world_size));
    CHECK(e.comm.tensor_parallel == t.comm.tensor_parallel);
    CHECK(e.comm.context_parallel == t.comm.context_parallel);
  }
}

// Issue 13 (bug): a low-precision block quantized its whole weights (`lin`) on every GPU, where each GPU of a
// tensor-parallel group quantizes its 1/tp slice (and each routed expert it holds). Llama-3.2-1B in fp8 on h100,
// Hopper keeps the fp8 weight and its transpose (dual 2): per micro-batch and block the weights cost
// 2·lin_local·(2 + 2·1) bytes. At tp 4 with four sequences (the same T = 2048 tokens per GPU, the same activation
// bytes) the weight part is a quarter of tp 1's: the difference is 16 blocks · 2 · 4 · lin · 3/4. Before the fix the
// two were equal.
TEST_CASE("terms: a low-precision block quantizes this GPU's weights, 1/tp of them", "[terms][throughput]") {
  const model_spec m = llama_1b();
  const gpu_spec g = h100();
  const throughput_calibration k{};
  training_config c1 = fp8_gpu();
  c1.stack = training_stack::torchtitan;  // the fused casts (the hf stack's eager ones: the test below)
  training_config c4 = c1;
  c4.world_size = 4;
  c4.gpus_per_node = 4;
  c4.tp = 4;
  c4.micro_batch = 4;
  const auto s1 = terms::throughput_shape_of(m, c1, g, k);
  const auto s4 = terms::throughput_shape_of(m, c4, g, k);
  REQUIRE(s1.T == s4.T);
  REQUIRE(s1.nq == L);
  CHECK(s1.lin_local == Approx(lin));
  CHECK(s4.lin_local == Approx(lin / 4));
  const double q1 = terms::memory_bound_time(s1, c1).quantization.raw();
  const double q4 = terms::memory_bound_time(s4, c4).quantization.raw();
  CHECK(q1 - q4 == Approx(L * 2 * (2 + 2 * 1) * lin * 0.75));
}

// Issue 13: Megatron-Core passes `is_first_microbatch` to Transformer Engine, which casts a block's weights on the
// step's first micro-batch and keeps the copies for the others. Per micro-batch the weight casts cost 1/ga of one
// cast (read bf16 + write fp8 and its transpose: 4 B per weight), against two casts per micro-batch eagerly; the
// copies of every fp8 block stay resident (2 B per weight on Hopper) instead of one block's while it runs.
TEST_CASE("terms: Transformer Engine casts Megatron's weights once per step and keeps them", "[terms][throughput][memory]") {
  const model_spec m = llama_1b();
  const gpu_spec g = h100();
  const throughput_calibration k{};
  training_config hf = fp8_gpu();
  hf.grad_accum = 8;
  hf.stack = training_stack::torchtitan;  // torchao's casts, priced fused (the hf stack's eager Float8Linear: float8_linear_casts)
  training_config mg = hf;
  mg.stack = training_stack::megatron;
  const auto sh = terms::throughput_shape_of(m, hf, g, k);
  const auto sm = terms::throughput_shape_of(m, mg, g, k);
  CHECK_FALSE(sh.cached_weight_casts);
  CHECK(sm.cached_weight_casts);
  const double qh = terms::memory_bound_time(sh, hf).quantization.raw();
  const double qm = terms::memory_bound_time(sm, mg).quantization.raw();
  CHECK(qh - qm == Approx(L * 4 * lin * (2 - 1.0 / 8)));
  const auto wh = terms::weight_copy_bytes(terms::memory_shape_of(m, hf, g));
  const auto wm = terms::weight_copy_bytes(terms::memory_shape_of(m, mg, g));
  CHECK(wh.quantized_block.raw() == 2 * lin);
  CHECK(wh.te_weight_cache.raw() == 0);
  CHECK(wm.quantized_block.raw() == 0);
  CHECK(wm.te_weight_cache.raw() == L * 2 * lin);
}

// The hf stack's fp8 is torchao 0.18's eager Float8Linear (the reference trainer's, apps/train/bwtrain/precision.py):
// each cast runs abs, max, to(float32), * scale, clamp and to(float8), 33 B per element through HBM, on the input and
// the weight in forward (again in a checkpointed block's recompute), on the gradient twice, the weight and the saved
// input in backward, and `preprocess_addmm` copies W + ro + ri float8 elements into `_scaled_mm`'s layouts. torchao's
// docs: "enable torch.compile for competitive performance". Hand-derived per linear here; torchtitan's stack (its fp8
// runs are compiled) keeps the fused one-pass casts.
TEST_CASE("terms: the hf stack's fp8 pays torchao's eager float8 casts, five kernels each", "[terms][throughput]") {
  const model_spec m = llama_1b();
  const gpu_spec g = h100();
  const throughput_calibration k{};
  training_config hf = fp8_gpu();  // one GPU, bf16 masters: no autocast
  const auto s = terms::throughput_shape_of(m, hf, g, k);
  REQUIRE(s.f8_linear);
  const double T = 2048, h = static_cast<double>(m.hidden), q = static_cast<double>(m.q_dim());
  const double kv = static_cast<double>(m.kv_dim()), F = static_cast<double>(m.intermediate), L = static_cast<double>(m.layers);
  const double shapes[7][2] = {{h, q}, {h, kv}, {h, kv}, {q, h}, {h, F}, {h, F}, {F, h}};  // q k v o gate up down
  double per_block = 0, forward_casts = 0;
  for (const auto& io : shapes) {
    const double ri = T * io[0], ro = T * io[1], W = io[0] * io[1];
    per_block += 33 * (ri + W) + 33 * (2 * ro + W + ri) + 2 * (W + ro + ri);
    forward_casts += 33 * (ri + W);
  }
  const double eager = terms::memory_bound_time(s, hf).quantization.raw();
  CHECK(eager == Approx(L * per_block));
  training_config ck = hf;
  ck.ac = checkpointing::full();
  CHECK(terms::memory_bound_time(terms::throughput_shape_of(m, ck, g, k), ck).quantization.raw() == Approx(L * (per_block + forward_casts)));
  training_config tt = hf;
  tt.stack = training_stack::torchtitan;
  const auto st = terms::throughput_shape_of(m, tt, g, k);
  CHECK_FALSE(st.f8_linear);
  CHECK(terms::memory_bound_time(st, tt).quantization.raw() < eager / 5);
  // compiled, the hf stack's casts are Inductor's fused ones too
  training_config hc = hf;
  hc.compile = true;
  CHECK_FALSE(terms::throughput_shape_of(m, hc, g, k).f8_linear);
}
