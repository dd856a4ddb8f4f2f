// Scale-out (issue 4): collectives, sharding modes, tensor/context parallelism, nodes, time and cost.
#include "test_util.hpp"

#include <bwplan/io/json.hpp>

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

using namespace bwplan;
using bwplan::test::run_cli;

namespace {

const std::string h100_96 = std::string(BWPLAN_SOURCE_DIR) + "/tests/data/h100-96gb.json";

nlohmann::json estimate_json(std::vector<std::string> args) {
  std::vector<std::string> a{"--hardware", h100_96, "estimate"};
  a.insert(a.end(), args.begin(), args.end());
  a.insert(a.end(), {"--format", "json"});
  const auto r = run_cli(a);
  INFO(r.err);
  REQUIRE(r.code == 0);
  return nlohmann::json::parse(r.out);
}

double reserved_gib(const nlohmann::json& j) { return j["memory"]["peak_reserved_bytes"].get<double>() / 1073741824.0; }

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

instance_spec p5() {
  instance_spec i;
  i.id = "ml.p5.48xlarge";
  i.gpu = "h100";
  i.gpus_per_node = 8;
  i.efa_per_node = 400 * gb_per_s;
  i.price_per_hour_usd = 55.04;
  return i;
}

/// Llama 3 8B long-context runs on one node of 8 GPUs: micro-batch 1 × `seq`, context parallel `cp` (the rest of the
/// eight GPUs data-parallel); each test sets the stack, sharding and checkpointing it checks.
training_config long_context(std::int64_t seq, int cp) {
  training_config c;
  c.world_size = 8;
  c.gpus_per_node = 8;
  c.micro_batch = 1;
  c.seq_len = seq;
  c.cp = cp;
  return c;
}

/// Two p5-like nodes of 8 GPUs, FSDP2 full sharding over the 16: micro-batch `mbs` × `seq`, `ga` micro-batches per step;
/// each test sets the parallelism it checks.
training_config two_nodes(int mbs, std::int64_t seq, int ga) {
  training_config c;
  c.world_size = 16;
  c.gpus_per_node = 8;
  c.micro_batch = mbs;
  c.seq_len = seq;
  c.grad_accum = ga;
  c.shard = sharding::full;
  return c;
}

/// A bundled model on two_nodes() of p5(): the model, GPU, instance and configuration a multi-node test starts from,
/// and the estimates of a configuration on them.
struct on_two_p5 {
  model_spec m;
  gpu_spec g = h100();
  instance_spec i = p5();
  training_config c;
  on_two_p5(const char* preset, int mbs, std::int64_t seq, int ga)
      : m(cli::context{std::cout, std::cerr}.model(preset)), c(two_nodes(mbs, seq, ga)) {}
  [[nodiscard]] throughput_estimate estimate() const { return estimate_throughput(m, c, g, &i); }
  [[nodiscard]] throughput_terms terms(const training_config& x) const { return compute_throughput_terms(m, x, g, &i); }
};

}  // namespace

// torchtitan (arXiv:2410.06511, figures as quoted in issue 4): Llama 3.1 8B, FSDP2, bf16 compute / fp32 master,
// micro-batch 2 x 8192, per-op selective checkpointing on H100 96 GB: 82.4 GiB reserved on 8 GPUs, 67.0 on 128.
TEST_CASE("torchtitan: FSDP over 8 vs 128 GPUs differs by 15.4 GiB +- 1.5 (Llama 3.1 8B, SAC per-op)", "[scaling][torchtitan]") {
  const std::vector<std::string> base{"Llama-3.1-8B", "--gpu", "h100-96gb", "--mbs", "2", "--seq", "8192", "--ac", "selective-op",
                                      "--sharding", "full", "--master", "fp32"};
  auto with = [&](const char* gpus) {
    auto a = base;
    a.insert(a.end(), {"--gpus", gpus});
    return a;
  };
  const double r8 = reserved_gib(estimate_json(with("8")));
  const double r128 = reserved_gib(estimate_json(with("128")));
  INFO("8 GPUs: " << r8 << " GiB, 128 GPUs: " << r128 << " GiB (measured 82.4 / 67.0)");
  CHECK(r8 - r128 == Approx(15.4).margin(1.5));
}

// torchtitan CP table: full checkpointing, micro-batch 1, FSDP x CP = 8 GPUs, sequence 32K..262K with CP 1..8:
// measured 83.9, 84.2, 84.0, 84.5 GiB -- flat, because the tokens per GPU stay 32K and model states are sharded over 8.
TEST_CASE("torchtitan: context parallel keeps peak memory flat from 32K/CP1 to 262K/CP8", "[scaling][torchtitan]") {
  std::vector<double> peaks;
  for (auto [seq, cp] : {std::pair{"32768", "1"}, std::pair{"65536", "2"}, std::pair{"131072", "4"}, std::pair{"262144", "8"}}) {
    const auto j = estimate_json({"Llama-3.1-8B", "--gpu", "h100-96gb", "--gpus", "8", "--mbs", "1", "--seq", seq, "--cp", cp,
                                  "--ac", "full", "--sharding", "full"});
    CHECK(j["config"]["cp"] == std::stoi(cp));
    peaks.push_back(reserved_gib(j));
  }
  const double mean = (peaks[0] + peaks[1] + peaks[2] + peaks[3]) / 4;
  for (double p : peaks) {
    INFO("peaks " << peaks[0] << " " << peaks[1] << " " << peaks[2] << " " << peaks[3] << " GiB (measured ~84)");
    CHECK(p == Approx(mean).epsilon(0.10));
  }
}

TEST_CASE("collectives: ring all-gather within a node follows the alpha-beta formula", "[scaling][collective]") {
  const throughput_calibration k{};
  const gpu_spec g = h100();
  const instance_spec i = p5();
  const double S = 8e9;
  comm_group one_node{8, 8, 1};
  const double t = collective_time(collective_kind::all_gather, bytes::base(S), one_node, g, &i, k).raw();
  const double bw = 450e9 * k.nvlink * S / (S + k.nvlink_half_message);  // efficiency of the whole buffer
  CHECK(t == Approx(k.collective_latency_s + 7 * k.nvlink_step_s + 7.0 / 8 * S / bw));
  // all-reduce within a node takes NVLS (in-switch reduction) when faster than the ring: below 2x the AG time
  const double ar = collective_time(collective_kind::all_reduce, bytes::base(S), one_node, g, &i, k).raw();
  CHECK(ar < 2 * t);
  // across 2 nodes the node's EFA bounds the time: (N-1)/N of the buffer through 400 GB/s x efa
  comm_group two_nodes{16, 8, 1};
  const double t2 = collective_time(collective_kind::all_gather, bytes::base(S), two_nodes, g, &i, k).raw();
  CHECK(t2 > t);
  CHECK(t2 >= 0.5 * S / (400e9 * k.efa));
  // small messages reach a lower share of the bandwidth
  const double small = collective_time(collective_kind::all_gather, bytes::base(8e6), one_node, g, &i, k).raw();
  CHECK(8e6 / small < S / t);
  // one rank: nothing to do
  CHECK(collective_time(collective_kind::all_reduce, bytes::base(S), comm_group{1, 1, 8}, g, &i, k).raw() == 0);
}

// nccl-tests all_reduce_perf bus bandwidth on 4 to 32 p5.48xlarge (GB/s; size = the whole buffer), from
// crazyguitar/aws-gpu-communication-benchmark data/nccl_all_reduce.csv (../shared/reference/scaleout.md §2.1).
// The model must follow the whole-buffer curve: rms log error <= 0.20, every point within a factor 1.5 (the
// per-rank model it replaces was 10-70x low at 16-32 nodes).
TEST_CASE("collectives: p5 all-reduce bus bandwidth over 4-32 nodes follows the whole buffer", "[scaling][collective]") {
  const throughput_calibration k{};
  const gpu_spec g = h100();
  const instance_spec i = p5();
  const double sizes[] = {33554432.0, 134217728.0, 268435456.0, 1073741824.0, 4294967296.0, 8589934592.0};
  const std::vector<std::pair<int, std::vector<double>>> measured = {
      {4, {95.38, 229.48, 273.34, 280.30, 354.45, 356.99}},
      {8, {86.74, 156.33, 232.09, 274.47, 351.32, 355.36}},
      {16, {74.85, 129.20, 148.11, 269.23, 306.15, 356.27}},
      {32, {66.34, 115.78, 137.99, 220.08, 302.81, 321.10}}};
  double sq = 0;
  int count = 0;
  for (const auto& [nodes, bus] : measured) {
    const comm_group grp{8 * nodes, 8, 1};
    const double n = 8.0 * nodes;
    for (std::size_t j = 0; j < bus.size(); ++j) {
      const double t = collective_time(collective_kind::all_reduce, bytes::base(sizes[j]), grp, g, &i, k).raw();
      const double busbw = 2 * (n - 1) / n * sizes[j] / t / 1e9;
      INFO(nodes << " nodes, " << sizes[j] << " B: bwplan " << busbw << " GB/s, measured " << bus[j]);
      CHECK(std::abs(std::log(busbw / bus[j])) < std::log(1.5));
      sq += std::pow(std::log(busbw / bus[j]), 2);
      ++count;
    }
  }
  CHECK(std::sqrt(sq / count) < 0.20);
}

// nccl-tests alltoall_perf bus bandwidth on 2 to 32 p5.48xlarge (GB/s; size = each rank's whole buffer), from
// crazyguitar/aws-gpu-communication-benchmark data/nccl_alltoall.csv (../shared/reference/scaleout.md §2.1). Issue 13:
// the MoE dispatch/combine cost across nodes. The hierarchical model (only the (n - p)/n of a rank's bytes bound for
// other nodes cross the node's EFA, shared by its 8 ranks) must be within a factor 1.35 of every point from 256 MiB up
// and within 0.2 rms log error; the former model (every remote byte over one GPU's EFA share) was 2x low at 2 nodes.
TEST_CASE("collectives: p5 all-to-all bus bandwidth over 2-32 nodes follows the hierarchical split", "[scaling][collective][moe]") {
  const throughput_calibration k{};
  const gpu_spec g = h100();
  const instance_spec i = p5();
  const double sizes[] = {268435456.0, 1073741824.0, 2147483648.0};
  const std::vector<std::pair<int, std::vector<double>>> measured = {
      {2, {74.26, 77.73, 79.25}}, {4, {54.28, 53.75, 54.07}}, {8, {44.40, 48.31, 49.63}},
      {16, {34.77, 42.36, 44.23}}, {32, {30.21, 38.68, 40.78}}};
  double sq = 0;
  int count = 0;
  for (const auto& [nodes, bus] : measured) {
    const comm_group grp{8 * nodes, 8, 1};
    const double n = 8.0 * nodes;
    for (std::size_t j = 0; j < bus.size(); ++j) {
      const double t = all_to_all_time(bytes::base(sizes[j]), grp, g, &i, k).raw();
      const double busbw = (n - 1) / n * sizes[j] / t / 1e9;
      INFO(nodes << " nodes, " << sizes[j] << " B: bwplan " << busbw << " GB/s, measured " << bus[j]);
      CHECK(std::abs(std::log(busbw / bus[j])) < std::log(1.35));
      sq += std::pow(std::log(busbw / bus[j]), 2);
      ++count;
    }
  }
  CHECK(std::sqrt(sq / count) < 0.20);
  // within one node the whole exchange is NVLink: (n - 1)/n of the buffer at 0.80 × 450 GB/s (size efficiency ~1)
  const double S = 2147483648.0;
  CHECK(all_to_all_time(bytes::base(S), comm_group{8, 8, 1}, g, &i, k).raw() ==
        Approx(7.0 / 8 * S / (450e9 * 0.80 * S / (S + 32.0 * 1048576)) + 20e-6 + 7 * 3.4e-6));
}

// Qwen3-30B-A3B, EP 16 over two p5 nodes (Megatron's H100 recipe): the expert all-to-all of one micro-batch hides
// behind another micro-batch's compute (overlap_moe_expert_parallel_comm), so with 64 micro-batches per step only what
// it exceeds of that compute is exposed (here the all-to-all is the longer of the two: about 28 % of it stays), and with
// one micro-batch all of it is exposed.
TEST_CASE("moe: expert all-to-all across two nodes, hierarchical and overlapped across micro-batches", "[scaling][moe]") {
  on_two_p5 s("Qwen3-30B-A3B", 1, 4096, 64);
  s.c.ep = 16;
  // without the overlap (the default: Megatron-Core's overlap_moe_expert_parallel_comm is opt-in, torchtitan and the
  // hf stack wait for each all-to-all) every all-to-all is exposed
  const auto waited = s.estimate();
  CHECK(waited.exposed.expert_parallel.raw() == Approx(waited.comm.expert_parallel.raw()));
  s.c.moe_a2a_overlap = true;
  const auto many = s.estimate();
  REQUIRE(many.comm.expert_parallel.raw() > 0);
  CHECK(many.comm.expert_parallel == waited.comm.expert_parallel);  // the same bytes, less of them waited for
  CHECK(many.step.raw() == Approx(waited.step.raw() - (waited.exposed.expert_parallel - many.exposed.expert_parallel).raw()));
  // each later micro-batch exposes what its all-to-all exceeds of a micro-batch's compute, one micro-batch's worth stays
  const auto terms_many = s.terms(s.c);
  const double ep_mb = many.comm.expert_parallel.raw() / 64, t_mb = terms_many.compute.micro_batch().raw();
  CHECK(many.exposed.expert_parallel.raw() == Approx(63 * std::max(0.0, ep_mb - t_mb) + ep_mb));
  CHECK(many.exposed.expert_parallel.raw() < 0.4 * many.comm.expert_parallel.raw());
  s.c.grad_accum = 1;
  const auto one = s.estimate();
  CHECK(one.exposed.expert_parallel.raw() == Approx(one.comm.expert_parallel.raw()));
  // per call: half of each rank's 4096·8·2048·2 B crosses the node's 400 GB/s EFA (× 0.72), shared by its 8 ranks
  const double per = 4096.0 * 8 * 2048 * 2, node = 8 * per;
  const double efa = 400e9 * 0.72 * node / (node + 96.0 * 1048576);
  const double call = all_to_all_time(bytes::base(per), comm_group{16, 8, 1}, s.g, &s.i, throughput_calibration{}).raw();
  CHECK(call == Approx(0.5 * node / efa + 20e-6 + 7 * 3.4e-6 + 14e-6));
  CHECK(one.comm.expert_parallel.raw() == Approx(4 * 48 * call));
}

// Long context (torchtitan Llama 3 8B, FSDP x CP on 8 H100 96 GB at 500 W, Table 2 of
// benchmarks/llama3_h100_202412_torchtitan.md): measured tokens/s per GPU fall 7.1x from 32K (CP 1) to 256K (CP 8).
// Ring attention's own costs (per-step fp32 merges, the K/V all-gather hidden behind the first step, dK/dV sent on
// after every step) keep the fall-off above the 4.7x of the model this release replaces; issue 13's target (within
// 15 %, >= 6.0x) is not reached: docs/scaling.md §7.
TEST_CASE("context parallel: ring attention fall-off from 32K/CP1 to 256K/CP8 and its per-step exposure", "[scaling][cp]") {
  hardware_catalog cat = cli::context{std::cout, std::cerr}.catalog();
  const model_spec m = io::load_model(std::string(BWPLAN_SOURCE_DIR) + "/configs/models/llama-3.1-8b.json");
  gpu_spec g = cat.gpu("h100-96gb");
  g.attention = attention_kernel::flash2;  // the 2024 stack's FlashAttention-2 (--attention-kernel fa2)
  auto run = [&](int cp, std::int64_t seq) {
    training_config c = long_context(seq, cp);
    c.ac = checkpointing::full();
    c.shard = sharding::full;
    c.format = compute_format::fp8;
    c.stack = training_stack::torchtitan;  // the runs' stack (compiled: fused float8 casts, not the hf stack's eager ones)
    return estimate_throughput(m, c, g);
  };
  const auto r1 = run(1, 32768), r8 = run(8, 262144);
  const double falloff = r1.tokens_per_s_per_gpu / r8.tokens_per_s_per_gpu;
  INFO("fall-off " << falloff << " (measured 7.10)");
  CHECK(falloff > 5.2);
  CHECK(falloff < 8.2);
  // on one node the ring's K/V traffic hides behind its own kernels: what it exposes is under 1 % of the step
  CHECK(r8.comm.context_parallel.raw() > 0);
  CHECK(r8.exposed.context_parallel.raw() < 0.01 * r8.step.raw());
}

// The same runs with the blocks compiled (torchtitan: torch.compile(block, fullgraph=True), so the ring is in the
// graph): a traced functional collective is waited for where it is issued and Inductor does not move the wait by
// default, so every ring collective is exposed; Inductor fuses the merges (fewer bytes than eager).
TEST_CASE("context parallel under torch.compile: the ring's collectives are exposed, its merges fused", "[scaling][cp]") {
  hardware_catalog cat = cli::context{std::cout, std::cerr}.catalog();
  const model_spec m = io::load_model(std::string(BWPLAN_SOURCE_DIR) + "/configs/models/llama-3.1-8b.json");
  gpu_spec g = cat.gpu("h100-96gb");
  g.attention = attention_kernel::flash2;
  auto run = [&](bool compiled) {
    training_config c = long_context(262144, 8);
    c.ac = checkpointing::full();
    c.shard = sharding::full;
    c.format = compute_format::fp8;
    c.compile = compiled;
    c.stack = training_stack::torchtitan;
    return compute_throughput_terms(m, c, g);
  };
  const auto eager = run(false), compiled = run(true);
  CHECK(compiled.comm.context_parallel_exposed.raw() == Approx(compiled.comm.context_parallel.raw()));
  CHECK(eager.comm.context_parallel_exposed.raw() < 0.1 * eager.comm.context_parallel.raw());
  // hand count, Llama 3 8B, 32K tokens per rank, q = k = v width 4096 (K/V repeated), 32 blocks, 64 forward passes:
  // forward 10·7 B instead of 32·7 + 12 per element of q and pass, dK/dV 36 B instead of 56 per element and step
  const double T = 32768, q = 4096;
  const double saved = 64 * T * q * (236 - 70) + 32 * T * 7 * 20 * q;
  CHECK(eager.compute.memory_bound.ring_attention.raw() - compiled.compute.memory_bound.ring_attention.raw() == Approx(saved));
}

// torchtitan's 3-D and 4-D runs of the same page (Tables 5 and 6, 512 Grand Teton H100 96 GB at 500 W; rows in
// tests/data/torchtitan-scale-runs.jsonl): Llama 3.1 405B, TP 8 x PP 8, full AC, compile, float8.
//  - Table 6, 1F1B over 8 micro-batches of 1, FSDP x CP = 8: 76 / 16 tokens/s per GPU at 32K (CP 1) and 256K (CP 8),
//    a 4.75x fall-off; issue 13 asks for the CP fall-off within 15 % of measured.
//  - Table 5, local batch 32 = 8 micro-batches of 4: interleaved 1F1B (2 stages per rank) over 1F1B 128 / 100 = 1.28
//    (the bubble (p-1)/m against (p-1)/(v m)).
// Both are ratios of one stack and host, so AsyncTP and the float8 all-gather (not modelled, the same in each pair)
// cancel to first order.
TEST_CASE("torchtitan: Llama 3.1 405B TP 8 x PP 8 on 512 H100, the CP 32K -> 256K fall-off and the interleaved gain", "[scaling][torchtitan][cp][pp]") {
  const std::string hosts = std::string(BWPLAN_SOURCE_DIR) + "/configs/hardware/public-hosts.json";
  auto rate = [&](std::vector<std::string> extra) {
    std::vector<std::string> a{"--hardware", hosts, "--attention-kernel", "fa2", "estimate", "Llama-3.1-405B",
                               "--instance", "grand-teton-h100-96gb", "--nodes", "64", "--tp", "8", "--pp", "8",
                               "--ac", "full", "--sharding", "full", "--master", "fp32", "--precision", "fp8", "--compile",
                               "--grad-accum", "8", "--format", "json"};
    a.insert(a.end(), extra.begin(), extra.end());
    const auto r = run_cli(a);
    INFO(r.err);
    REQUIRE(r.code == 0);
    return nlohmann::json::parse(r.out)["throughput"]["tokens_per_s_per_gpu"].get<double>();
  };
  const double cp1 = rate({"--mbs", "1", "--seq", "32768"});
  const double cp8 = rate({"--mbs", "1", "--seq", "262144", "--cp", "8"});
  INFO("CP 1 " << cp1 << ", CP 8 " << cp8 << " tokens/s per GPU (measured 76 / 16)");
  CHECK(cp1 / cp8 == Approx(76.0 / 16).epsilon(0.15));
  const double f1b = rate({"--mbs", "4", "--seq", "8192"});
  const double interleaved = rate({"--mbs", "4", "--seq", "8192", "--pp-schedule", "interleaved", "--vpp", "2"});
  INFO("1F1B " << f1b << ", interleaved " << interleaved << " tokens/s per GPU (measured 100 / 128)");
  CHECK(interleaved / f1b == Approx(128.0 / 100).epsilon(0.10));
}

// torchtitan Llama 3.1 8B, FSDP2, 2 x 8192, per-op SAC on Grand Teton H100 96 GB hosts (500 W), 8 vs 128 GPUs
// (pytorch/torchtitan benchmarks/llama3_h100_202412_torchtitan.md, tables 1 and 3): per-GPU tokens/s at 128 over
// 8 GPUs 0.973 (eager), 0.977 (compile), 0.982 (float8); float8 over bf16 at 128 GPUs 8380 / 6514 = 1.29.
// Issue 13: the scaling within 5 points, and the float8 gain visible at 128 GPUs.
TEST_CASE("torchtitan: Llama 3 8B FSDP from 8 to 128 H100 keeps its per-GPU rate and its float8 gain", "[scaling][torchtitan]") {
  hardware_catalog cat = cli::context{std::cout, std::cerr}.catalog();
  io::load_catalog(cat, std::string(BWPLAN_SOURCE_DIR) + "/configs/hardware/public-hosts.json");
  const model_spec m = io::load_model(std::string(BWPLAN_SOURCE_DIR) + "/configs/models/llama-3.1-8b.json");
  const gpu_spec& g = cat.gpu("h100-96gb");
  const instance_spec& host = cat.instance("grand-teton-h100-96gb");
  auto rate = [&](int gpus, compute_format f) {
    training_config c;
    c.world_size = gpus;
    c.gpus_per_node = 8;
    c.micro_batch = 2;
    c.seq_len = 8192;
    c.ac = checkpointing::selective_op();
    c.shard = sharding::full;
    c.format = f;
    c.stack = training_stack::torchtitan;
    return estimate_throughput(m, c, g, &host).tokens_per_s_per_gpu;
  };
  const double bf16_8 = rate(8, compute_format::bf16), bf16_128 = rate(128, compute_format::bf16);
  const double fp8_8 = rate(8, compute_format::fp8), fp8_128 = rate(128, compute_format::fp8);
  INFO("bf16 " << bf16_8 << " -> " << bf16_128 << ", fp8 " << fp8_8 << " -> " << fp8_128);
  CHECK(std::abs(bf16_128 / bf16_8 - 0.977) < 0.05);
  CHECK(std::abs(fp8_128 / fp8_8 - 0.982) < 0.05);
  CHECK(fp8_128 / bf16_128 > 1.15);
  CHECK(fp8_128 / bf16_128 == Approx(8380.0 / 6514).epsilon(0.12));
}

TEST_CASE("sharding modes: memory and communication order across two nodes", "[scaling][sharding]") {
  const hardware_catalog cat = cli::context{std::cout, std::cerr}.catalog();
  const model_spec m = cli::context{std::cout, std::cerr}.model("Llama-3.1-8B");
  const gpu_spec g = h100();
  const instance_spec i = p5();
  training_config c;
  c.micro_batch = 1;
  c.seq_len = 4096;
  c.world_size = 16;
  c.gpus_per_node = 8;
  c.ac = checkpointing::full();
  c.grad_accum = 8;  // HSDP pays off with accumulation: FSDP crosses EFA every micro-batch, HSDP once per step
  auto peak = [&](sharding s) {
    training_config x = c;
    x.shard = s;
    return estimate_memory(m, x, g).peak_allocated.raw();
  };
  auto comm = [&](sharding s) {
    training_config x = c;
    x.shard = s;
    return estimate_throughput(m, x, g, &i).communication.raw();
  };
  CHECK(peak(sharding::full) < peak(sharding::hybrid));
  CHECK(peak(sharding::hybrid) < peak(sharding::none));
  CHECK(peak(sharding::full) < peak(sharding::grad_op));
  CHECK(peak(sharding::grad_op) < peak(sharding::none));
  // hybrid: all-gathers stay on NVLink; only gradient shards cross EFA
  CHECK(comm(sharding::hybrid) < comm(sharding::full));
  // shard-grad-op gathers once per micro-batch instead of twice
  CHECK(comm(sharding::grad_op) < comm(sharding::full));
  // the static state of full sharding is 16 B/param over all 16 GPUs, hybrid over the 8 of a node
  training_config h = c;
  h.shard = sharding::hybrid;
  CHECK(h.shard_size() == 8);
  h.shard_group = 4;
  CHECK(h.shard_size() == 4);
  CHECK_NOTHROW(validate(h));
  h.shard_group = 3;
  CHECK_THROWS_AS(validate(h), invalid_request);
  (void)cat;
}

// torchtitan's per-op selective checkpointing saves the sequence-parallel reduce-scatters' outputs but not the
// all-gathers' (`_save_list` in torchtitan/parallelisms/parallelize_llama.py @9dec370): the backward's recompute of a
// block gathers its attention and MLP inputs again, two all-gathers of the replica's T·tp tokens per block and
// micro-batch beyond the forward's and backward's four pairs. Without checkpointing no recompute, with full
// checkpointing the whole pair is recomputed.
TEST_CASE("tensor parallel under per-op SAC: the recompute gathers the sequence-parallel inputs again", "[scaling][tp]") {
  on_two_p5 s("Llama-3.1-8B", 4, 8192, 2);
  s.c.tp = 8;
  auto tp_comm = [&](checkpointing ac) {
    training_config x = s.c;
    x.ac = ac;
    return s.terms(x).comm.tensor_parallel.raw();
  };
  const double none = tp_comm(checkpointing::none()), sac = tp_comm(checkpointing::selective_op());
  const double full = tp_comm(checkpointing::full());
  const auto sh = s.terms(s.c).shape;
  const double act = 2 * sh.T * s.c.tp * sh.h;  // bf16 activations of the replica's tokens
  const throughput_calibration k;
  const double ag = collective_time(collective_kind::all_gather, bytes::base(act),
                                    terms::comm_group_of(s.c.tp, 1, sh.gpn), s.g, &s.i, k).raw();
  const double L = static_cast<double>(s.m.layers);
  CHECK(sac - none == Approx(s.c.grad_accum * 2 * L * ag));
  CHECK(full > sac);  // a whole block recomputed: its reduce-scatters too
}

TEST_CASE("tensor and context parallel divide memory and add their communication", "[scaling][tp][cp]") {
  const model_spec m = cli::context{std::cout, std::cerr}.model("Llama-3.1-70B");
  const gpu_spec g = h100();
  const instance_spec i = p5();
  const training_config c = test::fsdp_config(1, 8192, 32, 8);
  const auto base_m = estimate_memory(m, c, g);
  const auto base_t = estimate_throughput(m, c, g, &i);
  training_config t = c;
  t.tp = 4;
  const auto tp_m = estimate_memory(m, t, g);
  const auto tp_t = estimate_throughput(m, t, g, &i);
  CHECK(tp_m.at_peak.activations.raw() < base_m.at_peak.activations.raw() / 3);
  CHECK(tp_t.comm.tensor_parallel.raw() > 0);
  CHECK(tp_t.tokens_per_step == Approx(base_t.tokens_per_step / 4));  // data-parallel degree 32 / 4
  training_config x = c;
  x.cp = 4;
  const auto cp_t = estimate_throughput(m, x, g, &i);
  CHECK(estimate_memory(m, x, g).at_peak.activations.raw() < base_m.at_peak.activations.raw() / 3);
  CHECK(cp_t.comm.context_parallel.raw() > 0);
  CHECK(cp_t.exposed.context_parallel.raw() <= cp_t.comm.context_parallel.raw());
  // tp must fit the node and tp x cp divide the world
  training_config bad = c;
  bad.tp = 16;
  CHECK_THROWS_AS(validate(bad), invalid_request);
  bad.tp = 1;
  bad.cp = 3;
  CHECK_THROWS_AS(validate(bad), invalid_request);
}

TEST_CASE("estimate: --tokens gives time and cost from the instance price, --price-per-hour overrides", "[scaling][cli]") {
  auto run = [](std::vector<std::string> extra) {
    std::vector<std::string> a{"estimate", "Llama-3.1-8B", "--instance", "ml.p6-b200.48xlarge", "--nodes", "2", "--mbs", "1", "--seq",
                               "8192", "--tokens", "1T", "--format", "json"};
    a.insert(a.end(), extra.begin(), extra.end());
    const auto r = run_cli(a);
    INFO(r.err);
    REQUIRE(r.code == 0);
    return nlohmann::json::parse(r.out);
  };
  const auto j = run({});
  const double tps = j["throughput"]["tokens_per_s"].get<double>();
  CHECK(j["training"]["tokens"].get<double>() == 1e12);
  CHECK(j["training"]["seconds"].get<double>() == Approx(1e12 / tps));
  CHECK(j["training"]["cost_usd"].get<double>() == Approx(1e12 / tps / 3600 * 2 * 113.9328));
  const auto k = run({"--price-per-hour", "50"});
  CHECK(k["training"]["cost_usd"].get<double>() == Approx(1e12 / tps / 3600 * 2 * 50));
  const auto text = run_cli({"estimate", "Llama-3.1-8B", "--nodes", "2", "--tokens", "100B"});
  CHECK(text.code == 0);
  // the count as it was given (K/M/B/T), not printf's "1e+11" (bug: a helper's sweep)
  CHECK_THAT(text.out, Catch::Contains("training   100B tokens in") && !Catch::Contains("e+11"));
  const auto fleet = run_cli({"recommend", "Llama-3.1-8B", "--instance", "ml.p5en.48xlarge", "--tokens", "2.5T"});
  CHECK_THAT(fleet.out, Catch::Contains("for 2.5T tokens") && !Catch::Contains("e+12"));
}

TEST_CASE("estimate: --attention-kernel fa2 runs the 2024 FlashAttention-2 rates, a bad value is one line (exit 2)", "[scaling][cli][cp]") {
  const std::vector<std::string> a{"Llama-3.1-8B", "--gpu", "h100", "--gpus", "8", "--mbs", "1", "--seq", "32768", "--ac", "full"};
  const auto fused = estimate_json(a)["throughput"]["tokens_per_s_per_gpu"].get<double>();
  std::vector<std::string> f2{"--attention-kernel", "fa2", "estimate"};
  f2.insert(f2.end(), a.begin(), a.end());
  f2.insert(f2.end(), {"--format", "json"});
  const auto r = run_cli(f2);
  REQUIRE(r.code == 0);
  const double fa2 = nlohmann::json::parse(r.out)["throughput"]["tokens_per_s_per_gpu"].get<double>();
  // attention is about two thirds of a 32K step and FlashAttention-2 runs it at ~60 % of the fused kernels' rate
  CHECK(fa2 < 0.9 * fused);
  CHECK(fa2 > 0.6 * fused);
  const auto bad = run_cli({"--attention-kernel", "fa4", "estimate", "Llama-3.1-8B", "--gpu", "h100"});
  CHECK(bad.code == 2);
  CHECK(bad.err.find("--attention-kernel") != std::string::npos);
  CHECK(std::count(bad.err.begin(), bad.err.end(), '\n') <= 2);
}

TEST_CASE("token counts and durations parse with suffixes", "[scaling][cli]") {
  CHECK(cli::parse_token_count("1T", "--tokens") == 1e12);
  CHECK(cli::parse_token_count("100B", "--tokens") == 1e11);
  CHECK(cli::parse_token_count("2.5M", "--tokens") == 2.5e6);
  CHECK(cli::parse_token_count("7k", "--tokens") == 7e3);
  CHECK(cli::parse_token_count("12345", "--tokens") == 12345);
  CHECK_THROWS_AS(cli::parse_token_count("1X", "--tokens"), invalid_request);
  CHECK_THROWS_AS(cli::parse_token_count("lots", "--tokens"), invalid_request);
  CHECK(cli::parse_duration("72h", "--deadline") == 72 * 3600.0);
  CHECK(cli::parse_duration("3d", "--deadline") == 3 * 86400.0);
  CHECK_THROWS_AS(cli::parse_duration("3y", "--deadline"), invalid_request);
}

TEST_CASE("estimate: invalid parallel layouts are one-line errors (exit 2)", "[scaling][cli]") {
  auto err = [](std::vector<std::string> a) {
    a.insert(a.begin(), {"estimate", "Llama-3.1-8B", "--instance", "ml.p5.48xlarge", "--nodes", "2"});
    const auto r = run_cli(a);
    CHECK(r.code == 2);
    return r.err;
  };
  CHECK_THAT(err({"--tp", "3"}), Catch::Contains("does not divide"));
  CHECK_THAT(err({"--sharding", "hybrid", "--shard-group", "3"}), Catch::Contains("--shard-group: shard group 3 does not divide"));
  CHECK_THAT(err({"--shard-group", "4"}), Catch::Contains("--shard-group: a shard group needs sharding hybrid"));
  CHECK_THAT(err({"--tp", "16"}), Catch::Contains("within a node"));
  CHECK_THAT(err({"--ep", "2"}), Catch::Contains("--ep: expert parallelism needs a MoE model"));
  const auto ok = run_cli({"estimate", "Llama-3.1-8B", "--instance", "ml.p5.48xlarge", "--nodes", "2", "--sharding", "hybrid",
                           "--tp", "2", "--cp", "2", "--seq", "16384"});
  INFO(ok.err);
  CHECK(ok.code == 0);
  CHECK_THAT(ok.out, Catch::Contains("HSDP (shard 4 x replicate 2), TP 2, CP 2"));
}

// Issue 4, must-show 2: Llama-3.1-70B on p6-b200 fits one node and scales to 2 and 4; p5 needs more nodes.
TEST_CASE("recommend --nodes auto --tokens 100B: 70B on p6-b200 over 1, 2, 4 nodes, picked per objective", "[scaling][recommend]") {
  auto rec = [](std::vector<std::string> extra, const char* max_nodes = "4") {
    std::vector<std::string> a{"recommend", "Llama-3.1-70B", "--nodes", "auto", "--max-nodes", max_nodes, "--tokens", "100B",
                               "--seq", "8192", "--format", "json"};
    a.insert(a.end(), extra.begin(), extra.end());
    const auto r = run_cli(a);
    INFO(r.err);
    REQUIRE(r.code == 0);
    return nlohmann::json::parse(r.out);
  };
  const auto b200 = rec({"--instance", "ml.p6-b200.48xlarge"});
  REQUIRE(b200["rows"].size() == 3);
  std::vector<int> nodes;
  for (const auto& r : b200["rows"]) {
    nodes.push_back(r["nodes"].get<int>());
    REQUIRE(r["fits"] == true);
    CHECK(r["tokens_per_s"].get<double>() > 0);
    CHECK(r["hours"].get<double>() == Approx(1e11 / r["tokens_per_s"].get<double>() / 3600));
    CHECK(r["cost_usd"].get<double>() == Approx(r["hours"].get<double>() * r["nodes"].get<int>() * 113.9328));
  }
  CHECK(nodes == std::vector<int>{1, 2, 4});
  CHECK(b200["rows"][2]["tokens_per_s"].get<double>() > b200["rows"][0]["tokens_per_s"].get<double>());
  CHECK(b200["pick"]["nodes"] == 4);  // throughput
  CHECK(rec({"--instance", "ml.p6-b200.48xlarge", "--objective", "time"})["pick"]["nodes"] == 4);
  const auto cost = rec({"--instance", "ml.p6-b200.48xlarge", "--objective", "cost"});
  double cheapest = 1e300;
  int cheapest_nodes = 0;
  for (const auto& r : cost["rows"])
    if (r["cost_usd"].get<double>() < cheapest) { cheapest = r["cost_usd"].get<double>(); cheapest_nodes = r["nodes"].get<int>(); }
  CHECK(cost["pick"]["nodes"] == cheapest_nodes);
  CHECK_THAT(cost["notes"][0].get<std::string>(), Catch::Contains("a single node is enough") && Catch::Contains("a second node buys"));
  // a budget below the cheapest row leaves nothing
  const auto poor = run_cli({"recommend", "Llama-3.1-70B", "--nodes", "auto", "--max-nodes", "4", "--tokens", "100B", "--seq", "8192",
                             "--budget-usd", "1"});
  CHECK(poor.code == 1);
  // H100 80 GB: one node is not enough
  const auto p5 = rec({"--instance", "ml.p5.48xlarge"}, "8");
  CHECK(p5["rows"][0]["fits"] == false);
  CHECK(p5["pick"]["nodes"].get<int>() > 1);
  CHECK_THAT(p5["notes"][0].get<std::string>(), Catch::Contains("one node is not enough"));
  // both instances in one search (comma-separated); the table names the pick
  const auto both = run_cli({"recommend", "Llama-3.1-70B", "--nodes", "auto", "--max-nodes", "4", "--tokens", "100B", "--seq", "8192",
                             "--instance", "ml.p6-b200.48xlarge,ml.p5.48xlarge", "--objective", "cost"});
  INFO(both.err);
  CHECK(both.code == 0);
  CHECK_THAT(both.out, Catch::Contains("<- pick") && Catch::Contains("ml.p5.48xlarge") && Catch::Contains("pick (cost)"));
  const auto bad = run_cli({"recommend", "Llama-3.1-70B", "--objective", "speed"});
  CHECK(bad.code == 2);
  CHECK_THAT(bad.err, Catch::Contains("unknown objective"));
}

// Issue 13, shapes off the Llama mould on one H200 (the harness's amp recipe): the held-back runs put Qwen3-0.6B
// (q width 2,048 over h 1,024, head_dim 128, q/k RMSNorm) 17-30 % slower than the former estimate and Gemma-2B
// (multi-query, head_dim 256, F 16,384, V 256,000) 6-18 % faster, with Llama-shaped runs within 6 %. In MFU terms
// against Llama-3.2-1B on the same configuration, the former model gave Qwen3 0.76 and Gemma 0.97; the terms that follow
// the shape (per-GEMM efficiency, attention by head_dim, the fp32 q/k-norm path, element-wise bytes per op) must give
// Qwen3 at most 0.70 and Gemma at least 1.00.
TEST_CASE("shapes: Qwen3-0.6B below and Gemma-2B above Llama-3.2-1B in MFU on one H200", "[scaling][shapes]") {
  const hardware_catalog cat = cli::context{std::cout, std::cerr}.catalog();
  const gpu_spec& g = cat.gpu("h200");
  auto mfu = [&](const char* preset, std::int64_t mbs) {
    const model_spec m = cli::context{std::cout, std::cerr}.model(preset);
    training_config c;
    c.micro_batch = mbs;
    c.seq_len = 4096;
    c.master = master_weights::fp32;  // autocast over fp32 weights, one GPU (the harness's amp recipe)
    return estimate_throughput(m, c, g).mfu;
  };
  const double llama = mfu("Llama-3.2-1B", 4), qwen = mfu("Qwen3-0.6B", 4), gemma = mfu("gemma-2b-it", 2);
  INFO("MFU llama " << llama << ", qwen3 " << qwen << ", gemma " << gemma);
  CHECK(qwen / llama <= 0.70);
  CHECK(gemma / llama >= 1.00);
}

// Megatron's context parallelism is Transformer Engine's P2P ring (cp_comm_type "p2p"): per later step one transfer
// of the K/V chunk at the model's KV width (Llama 3 8B: 8 KV heads, kv 1024, not the 4096 the 2024 torch ring
// repeated them to), hidden behind that step's attention; only the last dK/dV return per block is exposed. Llama 3 8B
// at 64K on 8 H100, CP 4 × data-parallel 2 with the distributed optimizer: each block moves
// fwd_passes·3·pf + L·(3·pb + pf) and exposes L·pf per micro-batch.
TEST_CASE("context parallel under Megatron: Transformer Engine's P2P ring at the KV width, overlapped", "[scaling][cp]") {
  hardware_catalog cat = cli::context{std::cout, std::cerr}.catalog();
  const model_spec m = io::load_model(std::string(BWPLAN_SOURCE_DIR) + "/configs/models/llama-3.1-8b.json");
  const gpu_spec g = cat.gpu("h100");
  training_config c = long_context(65536, 4);
  c.shard = sharding::optimizer;
  c.stack = training_stack::megatron;
  const throughput_calibration k{};
  const auto s = terms::throughput_shape_of(m, c, g, k);
  const auto r = terms::context_parallel_communication(s, c, g, nullptr, k);
  const double kv = 2 * 2 * 1 * (65536.0 / 4) * 1024;  // one rank's K and V chunk, bf16
  comm_group pair = terms::comm_group_of(4, 1, 8);  // a neighbour of the CP group, on NVLink
  pair.ranks = 2;
  pair.per_node = 2;
  const double pf = collective_time(collective_kind::all_gather, bytes::base(2 * kv), pair, g, nullptr, k).raw();
  const double pb = collective_time(collective_kind::all_gather, bytes::base(4 * kv), pair, g, nullptr, k).raw();
  CHECK(r.total.raw() == Approx(32 * 3 * pf + 32 * (3 * pb + pf)));
  CHECK(r.exposed.raw() == Approx(32 * pf));
  // the torch ring of the same plan (hf stack) moves more: an all-gather per pass and fp32 dK/dV
  training_config hf = c;
  hf.stack = training_stack::hf;
  hf.shard = sharding::full;
  const auto rh = terms::context_parallel_communication(terms::throughput_shape_of(m, hf, g, k), hf, g, nullptr, k);
  CHECK(rh.total.raw() > r.total.raw());
}
