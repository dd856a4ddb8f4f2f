// CPU offload (issue 14): the offload set, its rules, the memory terms on the GPU and the host, the PCIe and CPU-step
// time, BWP011 host memory, every path the plan field travels, recommend's memory saver, and the public
// optimizer-step out-of-memory and its offload fix (tests/data/finetune-memory.json, docs/validation.md).
#include "test_util.hpp"

#include <bwplan/bwplan.hpp>
#include <bwplan/check.hpp>
#include <bwplan/io/plan.hpp>

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

using namespace bwplan;
using test::run_cli;
using test::estimate_json;
namespace fs = std::filesystem;

namespace {

using test::llama_8b;  // P below: its hand count (tests/test_util.hpp)
constexpr double P = 8'030'261'248;
constexpr double Pb = 218'112'000;
constexpr double head_w = 128256.0 * 4096;  // 525,336,576

gpu_spec h100() {
  gpu_spec g;
  g.id = "h100";
  g.architecture = "hopper";
  g.hbm_total = 81559 * mib;
  g.driver_reserved = 454 * mib;
  g.hbm_bandwidth = 3.35 * tb_per_s;
  g.nvlink_per_direction = 450 * gb_per_s;
  g.host_link_per_direction = 64 * gb_per_s;  // PCIe 5.0 x16 (catalog host_link_gb_per_s_per_direction)
  g.dense_flops["bf16"] = 989 * tflop_per_s;
  return g;
}

training_config one_gpu(unsigned offload) {
  training_config c;
  c.micro_batch = 1;
  c.seq_len = 2048;
  c.ac = checkpointing::full();
  c.world_size = 1;
  c.gpus_per_node = 1;
  c.offload = offload;
  return c;
}

training_config fsdp8(unsigned offload) {
  training_config c = one_gpu(offload);
  c.world_size = 8;
  c.gpus_per_node = 8;
  c.shard = sharding::full;
  return c;
}


using namespace offload_target;

}  // namespace

TEST_CASE("offload: the set parses and prints as one vocabulary", "[offload]") {
  CHECK(parse_offload("none") == 0u);
  CHECK(parse_offload("optimizer") == optimizer);
  CHECK(parse_offload("params,optimizer") == (optimizer | params));  // any order
  CHECK(offload_to_string(optimizer | params) == "optimizer,params");  // one printed order
  CHECK(offload_to_string(optimizer | params | activations) == "optimizer,params,activations");
  CHECK(offload_to_string(0) == "none");
  for (const char* bad : {"", "gpu", "optimizer,", ",optimizer", "optimizer,optimizer", "none,optimizer", "Optimizer"})
    CHECK_FALSE(parse_offload(bad).has_value());
  for (unsigned o = 0; o <= all; ++o) CHECK(parse_offload(offload_to_string(o)) == o);
}

TEST_CASE("offload: the rules name the setting a set needs", "[offload][plan]") {
  auto field = [](training_config c) {
    const auto v = violations(c);
    return v.empty() ? std::string() : v.front().field;
  };
  CHECK(field(one_gpu(optimizer)).empty());
  CHECK(field(one_gpu(optimizer | activations)).empty());
  CHECK(field(fsdp8(optimizer | params)).empty());
  CHECK(field(fsdp8(params)) == "offload");           // params without the optimizer: FSDP2 steps where the shards live
  CHECK(field(one_gpu(optimizer | params)) == "sharding");  // params need FSDP full sharding
  training_config c = one_gpu(activations);
  c.ac = checkpointing::none();
  CHECK(field(c) == "activation_checkpointing");       // nothing to offload without checkpoints
  c.ac = checkpointing::full(2);
  CHECK(field(c).empty());                             // every-K: its checkpoints
  c = one_gpu(optimizer);
  c.optim = optimizer_kind::adamw_8bit;
  CHECK(field(c) == "optimizer");                      // bitsandbytes steps on the GPU
  c = fsdp8(optimizer);
  c.shard = sharding::optimizer;
  CHECK(field(c) == "sharding");                       // not modelled with the distributed optimizer
  c = one_gpu(optimizer);
  c.stack = training_stack::megatron;
  CHECK(field(c) == "offload");
  c = fsdp8(optimizer);
  c.stack = training_stack::torchtitan;
  CHECK(field(c) == "offload");                        // torchtitan: CPUOffloadPolicy only
  c.offload = optimizer | params;
  CHECK(field(c).empty());
  c = fsdp8(optimizer);
  c.pp = 2;
  c.grad_accum = 2;
  const auto v = violations(c);
  REQUIRE_FALSE(v.empty());
  CHECK(v.front().field == "pp");
  CHECK(v.front().message.find("not modelled") != std::string::npos);  // BWP009
}

TEST_CASE("offload: model states leave HBM, the host keeps them (hand-derived)", "[offload][terms]") {
  const model_spec m = llama_8b();
  const gpu_spec g = h100();
  SECTION("optimizer, one GPU (ZeRO-Offload): a bf16 working copy on the GPU; masters, states, gradients and a 16-bit copy on the host") {
    const auto s = terms::memory_shape_of(m, one_gpu(optimizer), g);
    CHECK_FALSE(s.amp);  // no fp32 weights on the GPU to autocast
    const auto ms = terms::model_state_bytes(s);
    CHECK(ms.parameters.raw() == Approx(2 * P));        // 16,060,522,496
    CHECK(ms.optimizer_states.raw() == 0);
    CHECK(ms.gradients.raw() == 0);
    CHECK(ms.block_gradient.raw() == 0);
    CHECK(ms.head_gradient.raw() == Approx(2 * head_w));  // bf16 until copied: 1,050,673,152
    const auto host = terms::host_offload_bytes(s, 0);
    CHECK(host.master_weights.raw() == Approx(4 * P));    // 32,121,044,992
    CHECK(host.optimizer_states.raw() == Approx(8 * P));  // 64,242,089,984
    CHECK(host.gradients.raw() == Approx(4 * P));
    CHECK(host.staging.raw() == Approx(2 * P));
    CHECK(host.total().raw() == Approx(18 * P));          // 144,544,702,464 (DeepSpeed's estimator: 16·Ψ × 1.5 slack)
    const auto e = estimate_memory(m, one_gpu(optimizer), g);
    CHECK(e.host_per_gpu.raw() == Approx(18 * P));
    CHECK(e.at_optimizer_peak.optimizer_states.raw() == 0);
    // the block's bf16 gradient and its fp32 cast for the copy to the host: 6·P_block = 1,308,672,000
    CHECK(terms::transient_bytes(s, terms::saved_activation_bytes(m, s), terms::weight_copy_bytes(s)).block_gradient_buffers.raw() ==
          Approx(6 * Pb));
  }
  SECTION("optimizer and params over 8 GPUs (FSDP2 CPUOffloadPolicy): no sharded state on the GPU; 16·P/8 on each rank's host") {
    const auto s = terms::memory_shape_of(m, fsdp8(optimizer | params), g);
    const auto ms = terms::model_state_bytes(s);
    CHECK(ms.parameters.raw() == 0);
    CHECK(ms.optimizer_states.raw() == 0);
    const auto host = terms::host_offload_bytes(s, 0);
    CHECK(host.staging.raw() == 0);                      // pinned in place, no extra buffer
    CHECK(host.total().raw() == Approx(16 * P / 8));     // 16,060,522,496 per rank
    const auto e = estimate_memory(m, fsdp8(optimizer | params), g);
    CHECK(host_memory_per_node(e, fsdp8(optimizer | params)).raw() == Approx(16 * P));  // 128,484,179,968 = 119.7 GiB per node
    // the unit in flight: fp32 shard 2·(2·Pb)/8 + its bf16 cast 2·Pb/8 + the fp32 gradient shard 4·Pb/8 = 272,640,000
    const auto t = terms::transient_bytes(s, terms::saved_activation_bytes(m, s), terms::weight_copy_bytes(s));
    CHECK(t.offload_staging.raw() == Approx(272'640'000));
    // FSDP2's gathered blocks and root stay: the GPU still holds what it computes on
    CHECK(terms::weight_copy_bytes(s).fsdp_root.raw() == Approx(2 * (2 * head_w + 4096)));
  }
  SECTION("activations: the 32 checkpoints of full checkpointing go to the host, two stay in flight") {
    const auto s = terms::memory_shape_of(m, one_gpu(optimizer | activations), g);
    const auto a = terms::saved_activation_bytes(m, s);
    const double ck = 2048.0 * 4096 * 2;  // T·h·2 (bf16 residual: no autocast under optimizer offload) = 16,777,216
    CHECK(a.checkpoint.raw() == Approx(ck));
    CHECK(a.all_blocks.raw() == 0);
    CHECK(a.offload_in_flight.raw() == Approx(2 * ck));       // 33,554,432
    CHECK(a.offloaded_checkpoints.raw() == Approx(32 * ck));  // 536,870,912 on the host
    const auto kept = terms::saved_activation_bytes(m, terms::memory_shape_of(m, one_gpu(optimizer), g));
    CHECK(kept.all_blocks.raw() == Approx(32 * ck));
    CHECK(estimate_memory(m, one_gpu(optimizer | activations), g).host_per_gpu.raw() == Approx(18 * P + 32 * ck));
  }
  SECTION("activations: offloading never holds more on the GPU than keeping the checkpoints (block 0 prefetches nothing)") {
    // bug (a helper's sweep): Llama-3.1-70B over 16 H200s, FSDP, 1 x 4096, full AC read 80.88 GiB allocated with
    // --offload activations against 80.75 without: the backward peak is block 0's, where two checkpoints were counted
    // in flight and keeping them holds one (block 0's own)
    const model_spec big = io::load_model(std::string(BWPLAN_SOURCE_DIR) + "/configs/models/llama-3.1-70b.json");
    training_config c;
    c.world_size = 16;
    c.shard = sharding::full;
    c.micro_batch = 1;
    c.seq_len = 4096;
    c.ac.mode = ac_mode::full;
    const auto kept = estimate_memory(big, c, g);
    c.offload = activations;
    const auto off = estimate_memory(big, c, g);
    CHECK(off.peak_allocated.raw() <= kept.peak_allocated.raw());
    CHECK(off.at_backward_peak.activations.raw() <= kept.at_backward_peak.activations.raw());
    // and one GPU, the 8B with optimizer offload: the same
    const auto kept8 = estimate_memory(m, one_gpu(optimizer), g), off8 = estimate_memory(m, one_gpu(optimizer | activations), g);
    CHECK(off8.peak_allocated.raw() <= kept8.peak_allocated.raw());
  }
}

TEST_CASE("offload: the CPU optimizer step and PCIe copies in the step (hand-derived)", "[offload][terms]") {
  const model_spec m = llama_8b();
  const gpu_spec g = h100();
  const throughput_calibration k;
  SECTION("ZeRO-Offload, one GPU") {
    const auto t = compute_throughput_terms(m, one_gpu(optimizer), g, nullptr, k);
    CHECK(t.shape.host_link == Approx(64e9 * 0.8));  // 51.2 GB/s achieved
    CHECK(t.optimizer.raw() == 0);                    // no GPU step
    // CPU step: (3·4·P + 2·8P + 2·P) bytes = 30·P = 240,907,837,440 B at 38.4 GB/s = 6.2736 s, not overlapped
    CHECK(t.offload.cpu_step.raw() == Approx(30 * P / 38.4e9));
    // after the step the bf16 partition comes back: 2·P / 51.2e9 = 0.3137 s, exposed
    CHECK(t.offload.pcie_serial.raw() == Approx(2 * P / 51.2e9));
    // the fp32 gradients go out during backward: 4·P / 51.2e9 = 0.6274 s, hidden behind 2/3 of the micro-batch
    CHECK(t.offload.pcie_overlapped.raw() == Approx(4 * P / 51.2e9));
    const double t_mb = t.compute.micro_batch().raw();
    CHECK(t.offload.exposed.raw() == Approx(30 * P / 38.4e9 + 2 * P / 51.2e9 + std::max(0.0, 4 * P / 51.2e9 - 2.0 / 3.0 * t_mb)));
    const auto e = compose_throughput(t);
    CHECK(e.step.raw() == Approx((e.compute + e.bubble + e.exposed_communication + e.offload).raw()));
    // the CPU step alone is longer than the GPU's compute of the micro-batch: offload costs speed
    const auto none = estimate_throughput(m, one_gpu(0), g);
    CHECK(e.tokens_per_s < 0.5 * none.tokens_per_s);
  }
  SECTION("FSDP2 CPUOffloadPolicy over 8: the shard copies of both gathers and the gradient shards, per micro-batch") {
    const auto t = compute_throughput_terms(m, fsdp8(optimizer | params), g, nullptr, k);
    // H2D: 2 gathers × fp32 shard (2·(2·P)/8 bytes) + D2H fp32 gradient shard 4·P/8 = (8 + 4)·P/8 per micro-batch
    CHECK(t.offload.pcie_overlapped.raw() == Approx(12 * P / 8 / 51.2e9));
    CHECK(t.offload.pcie_serial.raw() == 0);
    CHECK(t.offload.cpu_step.raw() == Approx(28 * P / 8 / 38.4e9));  // no 16-bit copy-back buffer
  }
  SECTION("activations: save_on_cpu's synchronous copies are exposed, torchtune's stream copies are hidden") {
    const double ck = 2048.0 * 4096 * 2 * 32;
    const auto t = compute_throughput_terms(m, one_gpu(optimizer | activations), g, nullptr, k);
    CHECK(t.offload.pcie_serial.raw() == Approx(2 * P / 51.2e9 + 2 * ck / 51.2e9));
  }
}

TEST_CASE("offload: flags, plan file, reproduce line, estimate JSON, sweep and contract carry the set", "[offload][plan][roundtrip]") {
  const std::vector<std::string> args{"Llama-3.1-8B", "--instance", "ml.p5en.48xlarge", "--sharding", "full", "--offload", "params,optimizer",
                                      "--ac", "full"};
  const auto a = estimate_json(args);
  CHECK(a["config"]["offload"] == "optimizer,params");
  // host: 16·P/8 per rank, 16·P per node
  CHECK(a["memory"]["host"]["per_gpu_bytes"].get<double>() == Approx(16 * P / 8));
  CHECK(a["memory"]["host"]["per_node_bytes"].get<double>() == Approx(16 * P));
  CHECK(a["throughput"]["offload_s"].get<double>() > a["throughput"]["offload_cpu_step_s"].get<double>() - 1e-12);
  std::vector<std::string> emit{"estimate"};
  emit.insert(emit.end(), args.begin(), args.end());
  emit.insert(emit.end(), {"--emit", "plan"});
  const auto e = run_cli(emit);
  REQUIRE(e.code == 0);
  const auto pj = nlohmann::json::parse(e.out);
  CHECK(pj["offload"] == "optimizer,params");
  const fs::path file = fs::path(BWPLAN_TEST_OUTPUT_DIR) / "offload-plan.json";
  std::ofstream(file) << e.out;
  const auto b = estimate_json({"--plan", file.string()});
  CHECK(b["memory"]["peak_reserved_bytes"] == a["memory"]["peak_reserved_bytes"]);
  CHECK(b["throughput"]["tokens_per_s"] == a["throughput"]["tokens_per_s"]);
  const plan_document d = io::plan_from_json(pj, "emitted");
  CHECK(d.value.training.offload == (optimizer | params));
  // a plan without offload writes no key (the files of earlier releases stay as they were)
  const auto none = run_cli({"estimate", "Llama-3.1-8B", "--emit", "plan"});
  CHECK(nlohmann::json::parse(none.out).count("offload") == 0);
  // the reproduce line
  const auto line = to_cli_args(d.value);
  const auto at = std::find(line.begin(), line.end(), "--offload");
  REQUIRE(at != line.end());
  CHECK(*(at + 1) == "optimizer,params");
  const auto c = estimate_json(std::vector<std::string>(line.begin(), line.end()));
  CHECK(c["memory"]["peak_reserved_bytes"] == a["memory"]["peak_reserved_bytes"]);
  // the sweep: sets joined by '+', the offload column
  std::vector<std::string> sweep{"sweep", "Llama-3.1-8B", "--instance", "ml.p5en.48xlarge", "--sharding", "full", "--ac", "full",
                                 "--vary", "offload=none,optimizer,optimizer+params", "--format", "json"};
  const auto s = run_cli(sweep);
  INFO(s.err);
  REQUIRE(s.code == 0);
  const auto pts = nlohmann::json::parse(s.out)["points"];
  REQUIRE(pts.size() == 3);
  CHECK(pts[2]["offload"] == "optimizer,params");
  CHECK(pts[2]["peak_reserved_gib"].get<double>() * 1073741824.0 == Approx(a["memory"]["peak_reserved_bytes"].get<double>()).epsilon(1e-12));
  CHECK(pts[0]["peak_reserved_gib"].get<double>() > pts[1]["peak_reserved_gib"].get<double>());
  CHECK(pts[1]["peak_reserved_gib"].get<double>() > pts[2]["peak_reserved_gib"].get<double>());
  // bad input: one line naming the flag or the member, exit 2
  auto bad = run_cli({"estimate", "Llama-3.1-8B", "--offload", "gpu"});
  CHECK(bad.code == 2);
  CHECK(bad.err.find("--offload") != std::string::npos);
  bad = run_cli({"estimate", "Llama-3.1-8B", "--gpus", "1", "--offload", "params"});
  CHECK(bad.code == 2);
  CHECK(bad.err.find("--offload") != std::string::npos);
  bad = run_cli({"estimate", "Llama-3.1-8B", "--ac", "none", "--offload", "activations"});
  CHECK(bad.code == 2);
  CHECK(bad.err.find("--ac") != std::string::npos);
  bad = run_cli({"sweep", "Llama-3.1-8B", "--vary", "offload=optimizer+gpu"});
  CHECK(bad.code == 2);
  nlohmann::json broken = pj;
  broken["offload"] = "cpu";
  const fs::path bf = fs::path(BWPLAN_TEST_OUTPUT_DIR) / "offload-bad.json";
  std::ofstream(bf) << broken.dump(2);
  bad = run_cli({"estimate", "--plan", bf.string()});
  CHECK(bad.code == 2);
  CHECK(bad.err.find("/offload") != std::string::npos);
}

TEST_CASE("offload: the SageMaker payload carries optimizer,params and refuses what the trainer cannot run", "[offload][sagemaker]") {
  auto r = run_cli({"sagemaker", "Llama-3.1-8B", "--instance", "ml.p5en.48xlarge", "--sharding", "full", "--offload", "optimizer,params"});
  INFO(r.err);
  REQUIRE(r.code == 0);
  const auto q = nlohmann::json::parse(r.out);
  CHECK(q["HyperParameters"]["offload"] == "\"optimizer,params\"");
  r = run_cli({"sagemaker", "Llama-3.1-8B", "--instance", "ml.p5en.48xlarge"});
  REQUIRE(r.code == 0);
  CHECK(nlohmann::json::parse(r.out)["HyperParameters"]["offload"] == "\"none\"");  // every plan field is sent, defaults too
  r = run_cli({"sagemaker", "Llama-3.1-8B", "--instance", "ml.p5en.48xlarge", "--offload", "optimizer"});
  CHECK(r.code != 0);
  CHECK(r.err.find("T-offload-optimizer") != std::string::npos);
  r = run_cli({"sagemaker", "Llama-3.1-8B", "--instance", "ml.p5en.48xlarge", "--sharding", "full", "--ac", "full", "--offload",
               "optimizer,params,activations"});
  CHECK(r.code != 0);
  CHECK(r.err.find("T-offload-activations") != std::string::npos);
}

TEST_CASE("offload: BWP011 fires when the node's RAM cannot hold what its ranks offload", "[offload][check]") {
  // Llama 3.1 405B full fine-tune on one ml.p5.48xlarge with FSDP2 CPU offload: 16·P per node = 16 × 405.9e9 B
  // = 6.49 TB (6,047 GiB) against the node's 2,048 GiB
  const fs::path file = fs::path(BWPLAN_TEST_OUTPUT_DIR) / "offload-405b.json";
  auto e = run_cli({"estimate", "Llama-3.1-405B", "--instance", "ml.p5.48xlarge", "--sharding", "full", "--ac", "full", "--offload",
                    "optimizer,params", "--emit", "plan", "-o", file.string()});
  REQUIRE(e.code == 0);
  auto r = run_cli({"check", "--format", "json", file.string()});
  INFO(r.out << r.err);
  REQUIRE(r.code == 1);
  const auto j = nlohmann::json::parse(r.out);
  bool fired = false;
  for (const auto& f : j["plans"][0]["findings"])
    if (f["rule"] == "BWP011") {
      fired = true;
      CHECK(f["message"].get<std::string>().find("of host memory per node") != std::string::npos);
      CHECK(f["message"].get<std::string>().find("2048.00 GiB") != std::string::npos);
    }
  CHECK(fired);
  // an 8B plan's 119.7 GiB per node is within the 2,048 GiB: quiet
  const fs::path ok = fs::path(BWPLAN_TEST_OUTPUT_DIR) / "offload-8b.json";
  e = run_cli({"estimate", "Llama-3.1-8B", "--instance", "ml.p5.48xlarge", "--sharding", "full", "--ac", "full", "--offload",
               "optimizer,params", "--emit", "plan", "-o", ok.string()});
  REQUIRE(e.code == 0);
  r = run_cli({"check", "--format", "json", ok.string()});
  const auto findings = nlohmann::json::parse(r.out)["plans"][0]["findings"];  // a copy: ranging over a member of the
  for (const auto& f : findings) CHECK(f["rule"] != "BWP011");                  // parsed temporary reads freed memory
  REQUIRE(find_rule("BWP011") != nullptr);
  CHECK(find_rule("BWP011")->level == severity::error);
}

TEST_CASE("offload: public offload cases called right", "[offload][validation]") {
  // tests/data/offload-cases.json: OpenRLHF/OpenRLHF#698 (Meta-Llama-3-8B, one A100 80GB, DeepSpeed ZeRO-2, bf16,
  // micro-batch 1 of 128 tokens, gradient checkpointing: ~46 GB after prepare, 61 GB after backward, out of memory
  // in the step; `--adam_offload`, DeepSpeedCPUAdam with offload_optimizer cpu, fixed it) and issue 14's H100 case
  std::ifstream in(fs::path(BWPLAN_SOURCE_DIR) / "tests" / "data" / "offload-cases.json");
  REQUIRE(in.good());
  const nlohmann::json cases = nlohmann::json::parse(in);
  REQUIRE(cases["cases"].size() >= 4);
  for (const auto& c : cases["cases"]) {
    INFO(c["id"].get<std::string>());
    std::vector<std::string> args;
    for (const auto& a : c["args"]) args.push_back(a.get<std::string>());
    const auto j = estimate_json(args);
    CHECK(j["fits"].get<bool>() == c["fits"].get<bool>());
    if (c.contains("peak_phase")) CHECK(j["memory"]["peak_phase"] == c["peak_phase"]);
    if (!c["fits"].get<bool>()) {
      // the first step's forward and backward fit (torch.optim allocates the states in the first step()): the
      // report is an out-of-memory in the optimizer step, not earlier
      const double cap = j["memory"]["capacity_bytes"].get<double>(), ctx = j["memory"]["non_pytorch_bytes"].get<double>();
      const double states = j["memory"]["breakdown"]["optimizer_states"].get<double>();
      CHECK(std::max(j["memory"]["phases"]["forward_peak_bytes"].get<double>(), j["memory"]["phases"]["backward_peak_bytes"].get<double>()) -
                states + ctx < cap);
      CHECK(j["memory"]["phases"]["optimizer_peak_bytes"].get<double>() + ctx > cap);
    } else {
      // the fix: the 16 GB bf16 working copy and the activations stay; 18·P lands on the host
      CHECK(j["memory"]["host"]["per_gpu_bytes"].get<double>() == Approx(18 * P));
      CHECK(j["memory"]["breakdown"]["optimizer_states"].get<double>() == 0);
    }
  }
  // recommend names the offload as the cheapest memory saver of the full fine-tune on that GPU, with its speed cost
  const auto rec = run_cli({"recommend", "Llama-3.1-8B", "--gpu", "a100-80gb", "--seq", "128", "--global-batch-tokens", "128"});
  INFO(rec.out << rec.err);
  CHECK(rec.out.find("the cheapest memory saver that fits: CPU offload of the optimizer") != std::string::npos);
  CHECK(rec.out.find("slower than a full AdamW fine-tune") != std::string::npos);
}

TEST_CASE("offload: recommend --offload auto searches the sets and keeps the plans that fit host memory", "[offload][planner]") {
  const auto r = run_cli({"recommend", "Llama-3.1-70B", "--instance", "ml.p5en.48xlarge", "--offload", "auto", "--format", "json", "--top", "3"});
  INFO(r.err);
  REQUIRE(r.code == 0);
  const auto j = nlohmann::json::parse(r.out);
  REQUIRE_FALSE(j["plans"].empty());
  for (const auto& p : j["plans"]) {
    if (p["config"]["offload"] == "none") continue;
    CHECK(p["memory"]["host"]["per_node_bytes"].get<double>() <= 2048.0 * 1073741824.0);
  }
  // bad value
  const auto bad = run_cli({"recommend", "Llama-3.1-8B", "--offload", "sometimes"});
  CHECK(bad.code == 2);
  CHECK(bad.err.find("--offload") != std::string::npos);
}

TEST_CASE("bug: FSDP with optimizer offload had negative gradients at the end of backward", "[offload][terms][bugs]") {
  // the end-of-backward root moment took the root's sharded gradient out of a gradient total that optimizer offload
  // keeps on the host (0 on the GPU): -0.49 GiB of gradients and the peak understated by as much (a helper's sweep)
  const std::vector<std::vector<std::string>> cases = {
      {"Llama-3.1-8B", "--instance", "ml.p5.48xlarge", "--offload", "optimizer", "--ac", "full", "--seq", "256", "--mbs", "2"},
      {"Qwen3-8B", "--instance", "ml.p5.48xlarge", "--mbs", "1", "--seq", "2048", "--ac", "full", "--offload", "optimizer,activations"}};
  for (const auto& c : cases) {
    std::vector<std::string> args = {"estimate"};
    args.insert(args.end(), c.begin(), c.end());
    args.insert(args.end(), {"--format", "json"});
    const auto r = run_cli(args);
    REQUIRE(r.code == 0);
    const auto mem = nlohmann::json::parse(r.out)["memory"];
    for (const auto& [k, v] : mem["breakdown"].items()) {
      INFO(c[0] << " " << k);
      CHECK(v.get<double>() >= 0);
    }
    for (const auto& [k, v] : mem["phases"].items()) {
      INFO(c[0] << " " << k);
      CHECK(v.get<double>() >= 0);
    }
  }
}
