// Issue 13 (structure): pipeline parallelism (layer split, micro-batches in flight, per-rank memory, bubble, P2P),
// the distributed optimizer (ZeRO-1) and NVLink domains larger than a node, against hand-derived values.
#include "test_util.hpp"

#include <bwplan/bwplan.hpp>
#include <bwplan/check.hpp>

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include <cmath>
#include <sstream>

using namespace bwplan;
using test::run_cli;
using test::llama_1b;

namespace {

constexpr double P = 1'235'814'400;
constexpr double Pb = 60'821'504;
constexpr double emb = 262'668'288;
constexpr double V = 128256, h = 2048;

gpu_spec h100() {
  gpu_spec g;
  g.id = "h100";
  g.architecture = "hopper";
  g.hbm_total = 80 * gib;
  g.hbm_bandwidth = 3.35 * tb_per_s;
  g.nvlink_per_direction = 450 * gb_per_s;
  g.dense_flops["bf16"] = 989 * tflop_per_s;
  return g;
}

const hardware_catalog& catalog() {
  static const hardware_catalog cat = [] {
    std::ostringstream o, e;
    return cli::context{o, e, {}, {}}.catalog();
  }();
  return cat;
}

/// 4 GPUs, one pipeline stage each, bf16 master weights (no autocast copies), full checkpointing, 1 × 2048.
training_config pipeline_config(std::int64_t micro_batches, int vpp = 1) {
  training_config c;
  c.world_size = 4;
  c.gpus_per_node = 4;
  c.pp = 4;
  c.vpp = vpp;
  c.schedule = vpp > 1 ? pp_schedule::interleaved : pp_schedule::one_f_one_b;
  c.grad_accum = micro_batches;
  c.master = master_weights::bf16;
  c.shard = sharding::none;
  c.ac = checkpointing::full();
  c.micro_batch = 1;
  c.seq_len = 2048;
  return c;
}

}  // namespace

TEST_CASE("pipeline: torchtitan's layer split, uneven splits, interleaved ranks", "[pipeline]") {
  // 16 blocks + embedding + head = 18 units over 4 stages: 4 each, the first 18 % 4 = 2 stages one more; the
  // first and last give one to the embedding and the head: 4, 5, 4, 3
  CHECK(stage_blocks(16, 4, 0) == 4);
  CHECK(stage_blocks(16, 4, 1) == 5);
  CHECK(stage_blocks(16, 4, 2) == 4);
  CHECK(stage_blocks(16, 4, 3) == 3);
  CHECK(stage_first_block(16, 4, 1) == 4);
  CHECK(stage_first_block(16, 4, 2) == 9);
  CHECK(stage_first_block(16, 4, 3) == 13);
  // Llama 3.1 405B, 126 blocks over 8 stages: 128 units, 16 each: 15, 16 × 6, 15
  CHECK(stage_blocks(126, 8, 0) == 15);
  for (int s = 1; s < 7; ++s) CHECK(stage_blocks(126, 8, s) == 16);
  CHECK(stage_blocks(126, 8, 7) == 15);
  // interleaved pp 2, v 2: rank 0 holds virtual stages 0 and 2 (4 + 4), rank 1 stages 1 and 3 (5 + 3)
  training_config c;
  c.world_size = 2;
  c.pp = 2;
  c.vpp = 2;
  c.schedule = pp_schedule::interleaved;
  c.grad_accum = 4;
  const pipeline_rank r0 = pipeline_rank_of(c, 16, 0, 0), r1 = pipeline_rank_of(c, 16, 0, 1);
  CHECK(r0.blocks == 8);
  CHECK(r1.blocks == 8);
  CHECK(r0.embedding);
  CHECK(!r0.head);
  CHECK(r1.head);
  // every stage keeps a decoder block: (16 + 2) / 9 = 2 holds, / 10 = 1 does not
  CHECK(pipeline_split_ok(16, 9));
  CHECK(!pipeline_split_ok(16, 10));
  CHECK(pipeline_violations(llama_1b(), pipeline_config(8)).empty());
  training_config too_deep = pipeline_config(8);
  too_deep.pp = 10;
  too_deep.world_size = 10;
  CHECK(pipeline_violations(llama_1b(), too_deep).size() == 1);
  // a MoE model's leading dense blocks (DeepSeek-V3: 3 of 61) land on the first rank
  training_config d = pipeline_config(8);
  const pipeline_rank dr0 = pipeline_rank_of(d, 61, 3, 0), dr1 = pipeline_rank_of(d, 61, 3, 1);
  CHECK(dr0.dense_blocks == 3);
  CHECK(dr1.dense_blocks == 0);
}

TEST_CASE("pipeline: micro-batches in flight per schedule and the bubble", "[pipeline]") {
  // 1F1B: min(pp − r, m)
  CHECK(in_flight_micro_batches(4, 1, 8, 0) == 4);
  CHECK(in_flight_micro_batches(4, 1, 8, 3) == 1);
  CHECK(in_flight_micro_batches(4, 1, 2, 0) == 2);
  // interleaved v 2, m 8: rank 0 holds 2·3 + 1·4 + 1 = 11 chunks of half its blocks = 5.5 micro-batches; rank 3
  // 0 + 4 + 1 = 5 chunks = 2.5; with m 2 the cap is m·v = 4 chunks = 2
  CHECK(in_flight_micro_batches(4, 2, 8, 0) == 5.5);
  CHECK(in_flight_micro_batches(4, 2, 8, 3) == 2.5);
  CHECK(in_flight_micro_batches(4, 2, 2, 0) == 2);
  CHECK(in_flight_micro_batches(1, 1, 8, 0) == 1);
  // bubble (p − 1)/v micro-batch times; (p − 1)/(v·m) of the ideal step
  CHECK(bubble_micro_batches(4, 1) == 3);
  CHECK(bubble_micro_batches(4, 2) == 1.5);
  CHECK(bubble_micro_batches(1, 1) == 0);
}

TEST_CASE("pipeline: memory of each rank against hand-derived values", "[pipeline][memory]") {
  const model_spec m = llama_1b();
  const gpu_spec g = h100();
  const training_config c = pipeline_config(8);
  const double T = 2048;
  const double ckpt = T * 2 * h;  // a fully checkpointed block keeps its bf16 input: 8,388,608 bytes
  // rank 0: blocks 0-3 and the embedding; 4 micro-batches in flight (1F1B, pp − 0)
  const pipeline_rank r0 = pipeline_rank_of(c, m.layers, 0, 0);
  const memory_terms t0 = compute_memory_terms(m, c, g, {}, &r0);
  const double P0 = 4 * Pb + emb;  // 505,954,304
  CHECK(t0.states.parameters.raw() == 2 * P0);  // bf16 master weights
  CHECK(t0.states.optimizer_states.raw() == 2 * 2 * P0);  // AdamW exp_avg + exp_avg_sq, bf16
  CHECK(t0.states.accumulated_gradients.raw() == 2 * P0);  // 8 micro-batches accumulate
  CHECK(t0.activations.all_blocks.raw() == 4 * ckpt);
  CHECK(t0.activations.final_saved.raw() == 0);  // no head on rank 0
  CHECK(t0.activations.in_flight.raw() == 3 * 4 * ckpt);  // the other 3 micro-batches in flight
  CHECK(t0.loss.saved.raw() == 0);
  // rank 1: blocks 4-8 (five), 3 in flight, no embedding
  const pipeline_rank r1 = pipeline_rank_of(c, m.layers, 0, 1);
  const memory_terms t1 = compute_memory_terms(m, c, g, {}, &r1);
  CHECK(t1.states.parameters.raw() == 2 * 5 * Pb);
  CHECK(t1.activations.in_flight.raw() == 2 * 5 * ckpt);
  // rank 3: blocks 13-15, a copy of the tied head and the final norm, the loss, one micro-batch in flight
  const pipeline_rank r3 = pipeline_rank_of(c, m.layers, 0, 3);
  const memory_terms t3 = compute_memory_terms(m, c, g, {}, &r3);
  CHECK(t3.states.parameters.raw() == 2 * (3 * Pb + emb + h));
  CHECK(t3.activations.in_flight.raw() == 0);
  CHECK(t3.loss.saved.raw() == 4 * T * V);  // the fp32 log-softmax of the standard loss
  CHECK(t3.activations.final_saved.raw() == T * (2 * h + 2 * h));
  // the estimate is the most loaded of ranks 0, 1 and 3, and says which
  const memory_estimate e = estimate_memory(m, c, g);
  double most = 0;
  int which = -1;
  for (const pipeline_rank* r : {&r0, &r1, &r3}) {
    const memory_estimate x = compose_memory(compute_memory_terms(m, c, g, {}, r));
    if (x.device_peak() > bytes::base(most)) { most = x.device_peak().raw(); which = r->rank; }
  }
  CHECK(e.device_peak().raw() == most);
  CHECK(e.pipeline_rank == which);
  // 8 vs 2 micro-batches: rank 0 holds 4 instead of 2 in flight, two more micro-batches of its blocks' inputs
  const training_config c2 = pipeline_config(2);
  const memory_estimate m8 = compose_memory(compute_memory_terms(m, c, g, {}, &r0));
  const pipeline_rank r0b = pipeline_rank_of(c2, m.layers, 0, 0);
  const memory_estimate m2 = compose_memory(compute_memory_terms(m, c2, g, {}, &r0b));
  CHECK(m8.peak_allocated.raw() - m2.peak_allocated.raw() == Approx(2 * 4 * ckpt).margin(1));
  // interleaved v 2, m 8: rank 0 holds blocks 0-1 and 9-10 (4 blocks), 5.5 micro-batches in flight
  const training_config ci = pipeline_config(8, 2);
  const pipeline_rank ri = pipeline_rank_of(ci, m.layers, 0, 0);
  CHECK(ri.blocks == 2 + 2);  // 18 units over 8 virtual stages: 3, 3, 2, …, 1; rank 0 holds stages 0 (3 less the embedding) and 4 (2)
  const memory_terms ti = compute_memory_terms(m, ci, g, {}, &ri);
  CHECK(ti.activations.in_flight.raw() == Approx(4.5 * static_cast<double>(ri.blocks) * ckpt));
}

TEST_CASE("pipeline: the bubble, the P2P sends and the tokens of a step", "[pipeline][throughput]") {
  const model_spec m = llama_1b();
  const gpu_spec g = h100();
  const throughput_calibration k;
  for (int vpp : {1, 2}) {
    INFO("vpp " << vpp);
    const training_config c = pipeline_config(8, vpp);
    const throughput_estimate te = estimate_throughput(m, c, g);
    const pipeline_rank st = pipeline_rank_of(c, m.layers, 0, te.pipeline_rank);
    const throughput_terms t = compute_throughput_terms(m, c, g, nullptr, k, &st);
    const double t_mb = t.compute.micro_batch().raw();
    // bubble (p − 1)/v micro-batch times: 3/8 (1F1B) and 3/16 (interleaved v 2) of the 8 micro-batches
    CHECK(te.bubble.raw() == Approx(3.0 / vpp * t_mb).epsilon(1e-12));
    CHECK(te.bubble.raw() / (8 * t_mb) == Approx(3.0 / (8 * vpp)).epsilon(1e-12));
    CHECK(te.step.raw() == Approx((te.compute + te.bubble + te.exposed_communication).raw()).epsilon(1e-12));
    // a step: 1 × 2048 tokens × 8 micro-batches on one data-parallel replica
    CHECK(te.tokens_per_step == 16384);
    // P2P: 2·T·h = 8 MiB per send over NVLink (one node), 2·m·v sends per step of this rank and the 2·(p − 1) of the
    // warm-up and cool-down chain the step waits for
    const double S = 2 * 2048 * h;
    const double send = k.collective_latency_s + k.nvlink_step_s + (S + k.nvlink_half_message) / (450e9 * k.nvlink);
    CHECK(te.comm.pipeline_parallel.raw() == Approx((2 * 8 * vpp + 2 * 3) * send).epsilon(1e-9));
    // exposed: 1F1B every send of the 2·(m + p − 1) on the critical path; interleaved the 2·(p − 1) of warm-up
    // and cool-down (the steady state's sends hide behind compute here)
    CHECK(te.exposed.pipeline_parallel.raw() == Approx((vpp == 1 ? 2 * (8 + 3) : 2 * 3) * send).epsilon(1e-9));
  }
  // MFU counts each GPU's 1/pp of the model FLOPs: the same MFU numerator per GPU as 4-way data parallelism
  const training_config c = pipeline_config(8);
  const throughput_estimate te = estimate_throughput(m, c, g);
  CHECK(te.step_flops.model.raw() == Approx(3 * forward_flops_per_token(m, 2048) * 2048 / 4 * 8).epsilon(1e-12));
}

TEST_CASE("pipeline: a rank's block GEMMs are its own blocks' (regression: the whole model's on every rank)", "[pipeline][throughput]") {
  // Before the fix every rank was charged the GEMMs of all 16 blocks of the 1B model: block_linears counted each
  // linear over the model's 16 blocks while block_gemms divided by the rank's 3 to 5 (Megatron-Bridge's 70B TP 4 × PP 8
  // rows came out at −78 %).
  const model_spec m = llama_1b();
  const gpu_spec g = h100();
  const throughput_calibration k;
  training_config one = pipeline_config(8);
  one.pp = 1;
  one.world_size = 1;
  one.gpus_per_node = 1;
  const terms::gemm_terms whole = compute_throughput_terms(m, one, g, nullptr, k).compute.gemm;
  for (int vpp : {1, 2}) {
    INFO("vpp " << vpp);
    const training_config c = pipeline_config(8, vpp);
    for (int rank = 0; rank < 4; ++rank) {
      INFO("rank " << rank);
      const pipeline_rank st = pipeline_rank_of(c, m.layers, 0, rank);
      REQUIRE(st.blocks > 0);
      const double share = static_cast<double>(st.blocks) / 16;
      const terms::gemm_terms t = compute_throughput_terms(m, c, g, nullptr, k, &st).compute.gemm;
      // bf16, full recompute: the rank's share of the 16 blocks (the embedding and the head take a block's place on
      // the first and last rank), forward, backward and recompute
      CHECK(t.high_precision.raw() == Approx(whole.high_precision.raw() * share).epsilon(1e-12));
      CHECK(t.low_precision.raw() == 0);
      // the LM head (tied: the embedding's weight) on the last rank only
      CHECK(t.lm_head.raw() == Approx(st.head ? whole.lm_head.raw() : 0.0).epsilon(1e-12));
    }
  }
}

TEST_CASE("distributed optimizer: 6 + 12/d bytes per parameter, reduce-scatter + all-gather per step", "[zero1][memory][throughput]") {
  const model_spec m = llama_1b();
  const gpu_spec g = h100();
  training_config c;
  c.world_size = 8;
  c.gpus_per_node = 8;
  c.shard = sharding::optimizer;
  c.micro_batch = 1;
  c.seq_len = 2048;
  c.ac = checkpointing::full();
  const memory_terms t = compute_memory_terms(m, c, g);
  // fp32 master shard 4P/8, AdamW states 8P/8, the fp32 gradient buffer 4P and the bf16 parameters 2P:
  // Megatron-Core's 6 + 12/d with d = 8 (docs/user-guide/features/dist_optimizer.md)
  CHECK(t.states.parameters.raw() == 4 * P / 8);
  CHECK(t.states.optimizer_states.raw() == 8 * P / 8);
  CHECK(t.states.gradients.raw() == 4 * P);
  CHECK(t.states.accumulated_gradients.raw() == 4 * P);  // the buffer is alive all step
  CHECK(t.weights.zero1_params.raw() == 2 * P);
  CHECK(t.weights.ddp_buckets.raw() == 0);
  CHECK(!t.shape.amp);
  CHECK((t.states.parameters + t.states.optimizer_states + t.states.gradients + t.weights.zero1_params).raw() / P == 6 + 12.0 / 8);
  // bf16 master weights: the bf16 parameters are the masters, 2 + 2 + 4/d
  training_config cb = c;
  cb.master = master_weights::bf16;
  const memory_terms tb = compute_memory_terms(m, cb, g);
  CHECK((tb.states.parameters + tb.states.optimizer_states + tb.states.gradients + tb.weights.zero1_params).raw() / P == 4 + 4.0 / 8);
  // DDP keeps 16 B/param (+ buckets), ZeRO-1 saves the sharded states
  training_config ddp = c;
  ddp.shard = sharding::none;
  CHECK(estimate_memory(m, c, g).peak_allocated < estimate_memory(m, ddp, g).peak_allocated);
  // traffic: buckets of max(40M, 1M · 8) parameters → ceil(P / 40M) = 31; per bucket a reduce-scatter of fp32
  // gradients and an all-gather of bf16 parameters over the 8 ranks
  const throughput_calibration k;
  const throughput_terms tt = compute_throughput_terms(m, c, g, nullptr, k);
  REQUIRE(tt.comm.zero1.active);
  CHECK(tt.comm.zero1.buckets == 31);
  const comm_group grp = terms::comm_group_of(8, 1, 8);
  const double rs = 31 * collective_time(collective_kind::reduce_scatter, bytes::base(4 * P / 31), grp, g, nullptr, k).raw();
  const double ag = 31 * collective_time(collective_kind::all_gather, bytes::base(2 * P / 31), grp, g, nullptr, k).raw();
  const throughput_estimate te = compose_throughput(tt);
  CHECK(te.comm.data_parallel.raw() == Approx(rs + ag).epsilon(1e-12));
  const double t_mb = tt.compute.micro_batch().raw();
  CHECK(te.exposed.data_parallel.raw() ==
        Approx(std::max(0.0, rs - 2.0 / 3 * t_mb) + rs / 31 + std::max(0.0, ag - 1.0 / 3 * t_mb) + ag / 31).epsilon(1e-12));
  // FSDP2 full sharding under pipeline parallelism is the same layout (torchtitan + torch.distributed.pipelining)
  training_config fp = pipeline_config(8);
  fp.shard = sharding::full;
  fp.master = master_weights::fp32;
  fp.world_size = 8;
  fp.gpus_per_node = 8;
  training_config zp = fp;
  zp.shard = sharding::optimizer;
  CHECK(estimate_memory(m, fp, g).peak_allocated == estimate_memory(m, zp, g).peak_allocated);
  CHECK(estimate_throughput(m, fp, g).tokens_per_s == estimate_throughput(m, zp, g).tokens_per_s);
}

TEST_CASE("pipeline and distributed optimizer: legality rules", "[pipeline][plan]") {
  const model_spec m = llama_1b();
  auto fields = [](const std::vector<plan_violation>& v) {
    std::string s;
    for (const auto& x : v) s += x.field + ": " + x.message + "\n";
    return s;
  };
  training_config c = pipeline_config(6, 2);  // interleaved: 6 micro-batches is not a multiple of pp 4
  CHECK_THAT(fields(violations(c)), Catch::Contains("grad_accum: the interleaved schedule needs"));
  c = pipeline_config(8);
  c.vpp = 2;  // vpp without the interleaved schedule
  CHECK_THAT(fields(violations(c)), Catch::Contains("vpp: virtual pipeline stages 2 need the interleaved schedule"));
  c = pipeline_config(8);
  c.shard = sharding::hybrid;
  CHECK_THAT(fields(violations(c)), Catch::Contains("pp: pipeline parallelism with sharding hybrid is not modelled"));
  CHECK(detail::rule_for(violations(c).front()) == "BWP009");
  c = pipeline_config(8);
  c.schedule = pp_schedule::interleaved;
  c.pp = 1;
  c.world_size = 1;
  c.vpp = 2;
  CHECK_THAT(fields(violations(c)), Catch::Contains("pp_schedule: the interleaved schedule needs pp >= 2"));
  c = pipeline_config(8);
  CHECK(violations(c).empty());
  plan p;
  p.training = pipeline_config(8);
  CHECK(plan_violations(m, p).empty());
  // the data-parallel degree leaves out the pipeline stages: 16 GPUs, tp 2, pp 4 → dp 2
  training_config d;
  d.world_size = 16;
  d.tp = 2;
  d.pp = 4;
  CHECK(d.dp() == 2);
  CHECK(d.fsdp_mesh() == 2);
}

TEST_CASE("NVLink domains beyond a node: GB200 NVL72 keeps groups of up to 72 GPUs on NVLink", "[nvl72][throughput]") {
  const auto& cat = catalog();
  const instance_spec& gb = cat.instance("ml.p6e-gb200.36xlarge");
  CHECK(gb.gpus_per_node == 4);
  CHECK(gb.nvlink_domain_gpus == 72);
  const gpu_spec& gpu = cat.gpu(gb.gpu);
  // resolve_world carries the domain; tensor parallelism may span instances within it
  plan p;
  p.target.instance = gb.id;
  p.target.nodes = 8;
  REQUIRE(resolve_world(p, gb.gpus_per_node, gb.nvlink_domain_gpus).empty());
  CHECK(p.training.world_size == 32);
  CHECK(p.training.nvlink_domain == 72);
  p.training.tp = 8;
  CHECK(violations(p.training).empty());  // 8 > the 4 GPUs of an instance, within the domain
  plan hgx;
  hgx.target.nodes = 4;
  REQUIRE(resolve_world(hgx, 8, 8).empty());
  hgx.training.tp = 16;
  CHECK_THAT(violations(hgx.training).front().message, Catch::Contains("within a node of 8 GPUs"));
  // an all-gather over 16 GPUs on 4 GB200 instances is NVLink only: (n−1)/n · S over 900 GB/s × 0.80, × the
  // size efficiency, + 20 µs + 15 NVLink steps
  const throughput_calibration k;
  const double S = 1.0e9;
  const comm_group in_domain = terms::comm_group_of(16, 1, 16);
  const double nvl = 900e9 * k.nvlink * S / (S + k.nvlink_half_message);
  CHECK(collective_time(collective_kind::all_gather, bytes::base(S), in_domain, gpu, &gb, k).raw() ==
        Approx(k.collective_latency_s + 15 * k.nvlink_step_s + 15.0 / 16 * S / nvl).epsilon(1e-12));
  // the same 16 GPUs as 2 p6-b200 nodes cross EFA (2 nodes of 8), which is slower
  const instance_spec& b = cat.instance("ml.p6-b200.48xlarge");
  const comm_group two_nodes = terms::comm_group_of(16, 1, 8);
  CHECK(collective_time(collective_kind::all_gather, bytes::base(S), two_nodes, cat.gpu("b200"), &b, k) >
        collective_time(collective_kind::all_gather, bytes::base(S), in_domain, gpu, &gb, k));
  // 144 GPUs = 2 domains: the EFA of a domain is that of its 18 instances (18 × 200 GB/s)
  const comm_group two_domains = terms::comm_group_of(144, 1, 72);
  CHECK(two_domains.nodes() == 2);
  const double efa = 18 * 200e9 * k.efa * S / (S + k.efa_half_message);
  const double nvl_t = 143.0 / 144 * S / nvl;
  const double efa_t = 0.5 * S / efa;
  CHECK(collective_time(collective_kind::all_gather, bytes::base(S), two_domains, gpu, &gb, k).raw() ==
        Approx(k.collective_latency_s + 142 * k.nvlink_step_s + 1 * k.efa_step_s + std::max(nvl_t, efa_t)).epsilon(1e-12));
  // an estimate on 4 GB200 instances (16 GPUs, FSDP): its data-parallel collectives never touch EFA, so it
  // equals the same plan with the EFA removed
  const model_spec m = llama_1b();
  training_config c;
  REQUIRE(resolve_world(p, gb.gpus_per_node, gb.nvlink_domain_gpus).empty());
  c = p.training;
  c.world_size = 16;
  c.tp = 1;
  c.shard = sharding::full;
  instance_spec no_efa = gb;
  no_efa.efa_per_node = byte_rate::base(1);
  CHECK(estimate_throughput(m, c, gpu, &gb).tokens_per_s == estimate_throughput(m, c, gpu, &no_efa).tokens_per_s);
}

TEST_CASE("recommend Llama-3.1-405B --nodes auto --max-nodes 64 considers pipeline parallelism", "[pipeline][recommend]") {
  const auto r = run_cli({"recommend", "Llama-3.1-405B", "--nodes", "auto", "--max-nodes", "64", "--format", "json"});
  INFO(r.err);
  REQUIRE(r.code == 0);
  const auto j = nlohmann::json::parse(r.out);
  // every node count where something fits also has a fitting pipeline-parallel plan, reported with its bubble;
  // where it wins it is the row's plan
  int rows = 0;
  for (const auto& row : j["rows"]) {
    if (!row["fits"].get<bool>()) continue;
    ++rows;
    INFO("nodes " << row["nodes"]);
    REQUIRE(row.contains("best_pipeline_parallel"));
    const auto& bp = row["best_pipeline_parallel"];
    CHECK(bp["pp"].get<int>() > 1);
    CHECK(bp["bubble_s"].get<double>() > 0);
    CHECK(bp["tokens_per_s"].get<double>() <= row["tokens_per_s"].get<double>() * (1 + 1e-12));
    if (row["plan"]["config"]["pp"].get<int>() > 1) CHECK(row["plan"].contains("pipeline"));
  }
  CHECK(rows >= 4);  // 8, 16, 32 and 64 nodes
}

// Issue 13: Megatron-Core splits the decoder blocks, not blocks + embedding + head, unless the recipe counts them
// (Megatron-Bridge's 405B: 126 + 2 = 128 over 8 · 16) or lays the blocks out itself (DeepSeek-V3: 61 blocks over
// PP 8 × VP 4 = 32 stages; Qwen3-30B-A3B: 48 over PP 2 × VP 24 = 48, one each). torchtitan's rule refuses both
// of the last (a stage without a block); Megatron runs them.
TEST_CASE("pipeline: Megatron's layer split under --stack megatron", "[pipeline]") {
  // even: 80 blocks over 20 stages (Llama 3 70B PP 4 × VP 5), 4 each, embedding and head on top
  for (int s = 0; s < 20; ++s) CHECK(stage_blocks(80, 20, s, true) == 4);
  CHECK(stage_first_block(80, 20, 7, true) == 28);
  CHECK(stage_blocks(80, 20, 1) == 5);  // torchtitan: 82 units, 4 each and the first two one more
  // counted ends: 126 + 2 divides by 8, 126 does not: torchtitan's 15, 16 × 6, 15
  CHECK(stage_blocks(126, 8, 0, true) == 15);
  CHECK(stage_blocks(126, 8, 3, true) == 16);
  CHECK(stage_first_block(126, 8, 1, true) == 15);
  // laid out: 61 over 32, the first 61 % 32 = 29 stages 2 blocks, the last 3 one
  CHECK(stage_blocks(61, 32, 0, true) == 2);
  CHECK(stage_blocks(61, 32, 28, true) == 2);
  CHECK(stage_blocks(61, 32, 29, true) == 1);
  CHECK(stage_first_block(61, 32, 31, true) == 60);
  std::int64_t sum = 0;
  for (int s = 0; s < 32; ++s) sum += stage_blocks(61, 32, s, true);
  CHECK(sum == 61);
  CHECK(pipeline_split_ok(61, 32, true));
  CHECK(!pipeline_split_ok(61, 32));
  CHECK(pipeline_split_ok(48, 48, true));
  CHECK(!pipeline_split_ok(48, 49, true));
  // the plan rule follows the stack: 16 blocks over PP 8 × VP 2 = 16 stages
  training_config c = pipeline_config(8, 2);
  c.pp = 8;
  c.world_size = 8;
  c.gpus_per_node = 8;
  CHECK(pipeline_violations(llama_1b(), c).size() == 1);
  c.stack = training_stack::megatron;
  c.shard = sharding::optimizer;
  CHECK(pipeline_violations(llama_1b(), c).empty());
  // rank 3 of 8 holds virtual stages 3 and 11, one block each
  CHECK(pipeline_rank_of(c, 16, 0, 3).blocks == 2);
  // the ranks that can be the slowest: 0 (Megatron's extra blocks, a MoE model's dense ones), 1 (where the embedding
  // and loss count as layers: Llama 3.1 405B over PP 8 × VP 8, rank 0 holds 15 blocks and rank 1 16) and the last
  int out[3];
  REQUIRE(bottleneck_ranks(c, out) == 3);
  CHECK(out[0] == 0);
  CHECK(out[1] == 1);
  CHECK(out[2] == 7);
  training_config big = c;
  big.vpp = 8;
  big.grad_accum = 64;
  CHECK(pipeline_rank_of(big, 126, 0, 0).blocks == 15);
  CHECK(pipeline_rank_of(big, 126, 0, 1).blocks == 16);
}
