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

TEST_CASE("memory: a q/k norm saves 6 B per element of q and k and 4 B per head (Qwen3), with and without autocast", "[memory]") {
  // Qwen3RMSNorm on q_proj/k_proj outputs: the fp32 copy of its input (4 B) and the bf16 normalized tensor (2 B) per
  // element, and the fp32 rstd of each head's vector (4 B per head; the step trace saves it, the walk missed it);
  // under autocast the fp32 weight promotes its return to fp32, RoPE then saves only cos/sin and SDPA saves its
  // bf16 casts of q and k, which the inventory already counts (reference/stacks.md §1)
  model_spec m = tiny();
  const double q = static_cast<double>(m.q_dim()), kv = static_cast<double>(m.kv_dim());
  const double heads = static_cast<double>(m.heads + m.kv_heads);
  for (const bool amp : {true, false}) {
    const double without = terms::activation_bytes_per_token(m, amp).block_saved;
    model_spec mq = m;
    mq.qk_norm = true;
    const double with = terms::activation_bytes_per_token(mq, amp).block_saved;
    CHECK(with - without == Approx(6 * (q + kv) + 4 * heads));
  }
}

// The search's hot path sums over blocks per class (block_layout::count) and evaluates the backward walk only at the
// ends of each (quantization range, residue) progression (terms::block_backward_peak). Both against the plain loops
// over every block, on the bundled configs, every checkpointing period 1..12, fp8 with bf16 first/last blocks and
// pipeline stages.
TEST_CASE("memory: block class counts and the backward walk's ends equal the walk over every block", "[memory]") {
  SECTION("block_layout::count against counting block by block") {
    for (std::int64_t L : {1, 2, 7, 16, 80, 126}) {
      for (int every : {1, 2, 3, 5, 8, 13}) {
        for (auto [qf, qe] : {std::pair<std::int64_t, std::int64_t>{0, L}, {L, L}, {1, L - 1}, {L / 3, L / 2}}) {
          terms::block_layout b;
          b.layers = L;
          b.q_first = qf;
          b.q_end = std::max(qf, qe);
          b.ac = checkpointing::full(every);
          for (std::int64_t a = 0; a <= L; a += std::max<std::int64_t>(1, L / 7)) {
            terms::block_layout::class_counts want;
            for (std::int64_t i = a; i < L; ++i) {
              const bool q = b.quantized(i), ck = b.checkpointed(i);
              (q ? (ck ? want.low_recomputed : want.low) : (ck ? want.high_recomputed : want.high)) += 1;
            }
            const auto got = b.count(a, L);
            INFO("L " << L << " every " << every << " q [" << b.q_first << ", " << b.q_end << ") from " << a);
            CHECK(got.low_recomputed == want.low_recomputed);
            CHECK(got.low == want.low);
            CHECK(got.high_recomputed == want.high_recomputed);
            CHECK(got.high == want.high);
          }
        }
      }
    }
  }
  SECTION("terms::block_backward_peak against the walk over every block") {
    const auto configs = std::filesystem::path(BWPLAN_SOURCE_DIR) / "configs";
    hardware_catalog cat;
    io::load_catalog(cat, configs / "hardware" / "catalog.json");
    const gpu_spec& gpu = cat.gpu("b200");
    runtime_overheads cheap;
    cheap.replay = runtime_overheads::replay_policy::never;
    int compared = 0, inner_peaks = 0;
    for (const char* name : {"llama-3.1-70b", "llama-3.1-8b", "qwen3-0.6b", "gpt2-xl", "mixtral-8x7b-v0.1"}) {
      const model_spec m = io::load_model(configs / "models" / (std::string(name) + ".json"));
      for (int every = 0; every <= 12; ++every) {
        for (compute_format f : {compute_format::bf16, compute_format::fp8}) {
          for (sharding sh : {sharding::full, sharding::grad_op, sharding::none}) {
            training_config c;
            c.world_size = 8;
            c.shard = sh;
            c.ac = every == 0 ? checkpointing::none() : checkpointing::full(every);
            c.format = f;
            c.micro_batch = 2;
            c.seq_len = 4096;
            if (f == compute_format::fp8) c.bf16_layers = bf16_blocks{1, 2, -1};
            if (sh == sharding::none) c.master = master_weights::bf16;  // autocast off: the copies term is 0 either way
            const memory_terms t = compute_memory_terms(m, c, gpu, cheap);
            const auto& s = t.shape;
            const auto& act = t.activations;
            const auto& wc = t.weights;
            // the walk block by block (the loop compose_memory ran before block_backward_peak)
            const double tr = t.transient.activation_gradients.raw() + t.transient.block_gradient_buffers.raw() +
                              t.transient.dequantized_weight.raw() + t.transient.offload_staging.raw();
            double acts = act.all_blocks.raw(), cw = wc.autocast_after_forward.raw(), grads = 123.0, best = -1;
            std::int64_t best_i = -1;
            for (std::int64_t i = s.blocks.layers - 1; i >= 0; --i) {
              const bool ck = s.blocks.checkpointed(i), qz = s.blocks.quantized(i);
              const auto& inv = qz ? act.low_precision : act.high_precision;
              const double saved_i = act.kept(inv, ck);
              const double rebuilt = terms::recompute(saved_i, inv.block_saved * act.T);
              const double extra = (ck ? wc.autocast_block.raw() : 0) + (qz ? wc.quantized_block.raw() : 0) +
                                   wc.grad_op_block.raw() * static_cast<double>(i + 1);
              const double v = 1000.0 + acts + rebuilt + cw + extra + grads + tr;
              if (v > best) { best = v; best_i = i; }
              acts -= saved_i;
              cw -= !ck ? wc.autocast_block.raw() : 0.0;
              grads += t.states.block_gradient.raw();
            }
            const auto got = terms::block_backward_peak(t, 1000.0, 123.0);
            INFO(name << " every " << every << " format " << static_cast<int>(f) << " sharding " << static_cast<int>(sh));
            CHECK(got.block == best_i);
            CHECK(got.total == Approx(best).epsilon(1e-12));
            CHECK(got.total == Approx(1000.0 + got.activations + got.compute_weights + got.gradients + got.transient).epsilon(1e-12));
            ++compared;
            if (best_i > 0 && best_i < s.blocks.layers - 1) ++inner_peaks;
          }
        }
      }
    }
    CHECK(compared == 5 * 13 * 2 * 3);
    // not only the ends of the model: some largest moments sit at an inner block
    CHECK(inner_peaks > 0);
  }
}
