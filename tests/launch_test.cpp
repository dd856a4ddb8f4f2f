// Launching exactly what was planned (issue 12): the training contract's C++ side.
//   - every plan field has a contract entry (a new plan field without one fails here);
//   - the one hyperparameter decoder (both boolean spellings, SDK v2 quoting, null);
//   - round trip over a generated grid: flags → `bwplan sagemaker --format request` → `bwplan check job.json`,
//     `bwplan estimate --plan job.json` and the trainer's own parser (apps/train/contract.py, train.py --dry-run)
//     → the same plan field by field → the same estimate; what the trainer refuses is refused by both sides;
//   - a request edited by hand is checked again, with lines in the request;
//   - --source-dir writes a source dir the trainer runs from.
#include "cmd_sagemaker.hpp"
#include "test_util.hpp"

#include <bwplan/io/contract.hpp>
#include <bwplan/io/plan.hpp>

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <set>
#include <sstream>

#include <sys/wait.h>

using namespace bwplan;
using test::run_cli;
using nlohmann::json;
namespace fs = std::filesystem;

namespace {

cli::context quiet_context() {
  static std::ostringstream sink;
  return cli::context{sink, sink, {}, {}};
}

const io::training_contract& contract() {
  static const io::training_contract k = quiet_context().contract();
  return k;
}

const std::vector<std::string> job_flags{"--role-arn", "arn:aws:iam::111122223333:role/SageMakerTrainingExecutionRole",
                                         "--output-s3", "s3://amzn-s3-demo-bucket/bwplan/", "--train-s3",
                                         "s3://amzn-s3-demo-bucket/data/train/", "--env", "HF_TOKEN=hf_example",
                                         "--job-name", "bwplan-roundtrip", "--force"};

std::vector<std::string> with(std::vector<std::string> a, const std::vector<std::string>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

std::string slurp(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

void spit(const fs::path& p, const std::string& text) {
  std::ofstream out(p, std::ios::binary);
  out << text;
}

fs::path out_dir(const std::string& name) {
  const fs::path d = fs::path(BWPLAN_TEST_OUTPUT_DIR) / name;
  fs::create_directories(d);
  return d;
}

/// Whether python3 runs here (the trainer's side of the round trip needs nothing else: no torch).
bool have_python() {
  static const bool ok = std::system("python3 -c 'import json, re' >/dev/null 2>&1") == 0;
  return ok;
}

struct shell_result {
  int code = -1;
  std::string out, err;
};

/// Runs `command` with sh, capturing stdout and stderr through files under `dir`.
shell_result shell(const std::string& command, const fs::path& dir) {
  const fs::path o = dir / "stdout.txt", e = dir / "stderr.txt";
  const std::string full = command + " >" + shell_quote(o.string()) + " 2>" + shell_quote(e.string());
  const int status = std::system(full.c_str());
  shell_result r;
  r.code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  r.out = slurp(o);
  r.err = slurp(e);
  return r;
}

std::string source(const std::string& rel) { return shell_quote((fs::path(BWPLAN_SOURCE_DIR) / rel).string()); }

struct numbers {
  double reserved = 0, allocated = 0, tokens_per_s = 0;
};
numbers from_estimate(const json& j) {
  return {j["memory"]["peak_reserved_bytes"].get<double>(), j["memory"]["peak_allocated_bytes"].get<double>(),
          j["throughput"]["tokens_per_s"].get<double>()};
}

/// The estimate JSON's config without "bf16_layers", which says "default" where the plan left the blocks to the
/// format's default and the job names them (the contract writes defaults out); "bf16_blocks" compares what counts.
json config_without_spelling(json c) {
  c.erase("bf16_layers");
  return c;
}

struct grid_point {
  std::vector<std::string> args;  ///< plan flags after MODEL
  std::string label;
};

/// A deterministic grid over what the trainer supports: every precision but mxfp8 (refused, tested below), every
/// checkpointing mode, every sharding mode, tp 1/2/4, cp 1/2, both master weights, losses and optimizers, one and
/// two nodes, dense models. Combined by fixed strides so neighbours differ in several settings; only plans the
/// tool itself accepts are kept. Some are ones the trainer refuses (nvfp4 with tp, chunked loss with tp, DDP with
/// tp, nvfp4 + DDP + fp32 master): both sides must refuse them.
std::vector<grid_point> make_grid(std::size_t want) {
  const std::vector<std::string> precisions{"bf16", "fp8", "fp8-rowwise", "nvfp4"};
  const std::vector<std::string> acs{"none", "full", "every-2", "every-3", "selective-op", "selective-attn"};
  const std::vector<std::string> shardings{"none", "full", "hybrid", "grad-op"};
  const std::vector<int> tps{1, 2, 4};
  const std::vector<int> cps{1, 2};
  const std::vector<std::string> models{"Llama-3.2-1B", "Llama-3.1-8B", "Qwen3-8B"};
  std::vector<grid_point> out;
  for (int i = 0; out.size() < want && i < 4000; ++i) {
    const auto at = [i](const auto& v, int stride) { return v[static_cast<std::size_t>(i / stride) % v.size()]; };
    const std::string prec = at(precisions, 1), ac = at(acs, 4), shard = at(shardings, 3);
    const int tp = at(tps, 7), cp = at(cps, 2), nodes = 1 + (i / 23) % 2;
    std::vector<std::string> a{at(models, 5), "--instance", i % 11 == 0 ? "ml.p5en.48xlarge" : "ml.p6-b200.48xlarge",
                               "--nodes", std::to_string(nodes), "--gpus", std::to_string(8 * nodes),
                               "--mbs", std::to_string(1 + (i / 19) % 2), "--seq", i % 3 ? "4096" : "2048",
                               "--grad-accum", std::to_string(1 + i % 3), "--precision", prec, "--ac", ac, "--sharding", shard,
                               "--tp", std::to_string(tp), "--cp", std::to_string(cp),
                               "--master", (i / 11) % 2 ? "bf16" : "fp32", "--loss", (i / 13) % 2 ? "chunked" : "standard",
                               "--optimizer-impl", (i / 17) % 2 ? "foreach" : "fused"};
    if (a[2] == "ml.p5en.48xlarge" && prec == "nvfp4") continue;  // Blackwell only
    if (prec == "fp8" && shard == "full" && i % 2 == 0) a.emplace_back("--fp8-all-gather");
    if (prec != "bf16" && i % 5 == 1) { a.emplace_back("--bf16-layers"); a.emplace_back(i % 2 ? "first:1,last:2" : "0.25"); }
    if (shard == "hybrid" && nodes == 2 && i % 2 == 0) { a.emplace_back("--shard-group"); a.emplace_back(std::to_string(8 / tp)); }
    if (run_cli(with(with({"estimate"}, a), {"--format", "json"})).code != 0) continue;  // the tool's own rules decide
    std::string label;
    for (const auto& x : a) label += x + " ";
    out.push_back({a, label});
  }
  return out;
}

}  // namespace

TEST_CASE("contract: every plan field has a contract entry, and every contract plan field a C++ value", "[contract]") {
  const io::training_contract& k = contract();
  CHECK(k.version == 1);
  // a plan with every optional member set, so that plan_to_json writes every key it knows
  plan p;
  p.name = "all keys";
  p.model = "Llama-3.1-8B";
  p.target = {"ml.p6-b200.48xlarge", "b200", 2, 16, 800, "fa2"};  // (power limit and attention kernel: written when set)
  p.training.bf16_layers = bf16_blocks{0, 2, -1};
  p.training.shard = sharding::hybrid;
  p.training.shard_group = 8;
  p.training.finetune = finetune_mode::lora;  // the LoRA keys are written with adapters
  p.training.offload = offload_target::optimizer;  // the offload key is written when set
  p.training.optimizer_in_backward = true;         // so is optimizer_in_backward
  p.training.sequence_parallel = false;            // and sequence_parallel when off
  p.training.fsdp_embedding_units = true;          // and fsdp_embedding_units when set
  p.training.tp_comm_overlap = true;               // and tp_comm_overlap when set
  p.training.moe_a2a_overlap = true;               // and moe_a2a_overlap when set
  p.training.modules = module_kernels::transformers;  // and modules when not fused
  p.global_batch = 64;
  p.check.disable = {"BWP007"};
  std::set<std::string> plan_keys;
  const auto written = io::plan_to_json(p);  // a named object: items() of a temporary would dangle
  for (const auto& [key, value] : written.items()) plan_keys.insert(key);
  // file metadata, not training settings (the same list apps/train/contract.py plan_from_dict skips)
  for (const char* meta : {"$schema", "schema_version", "name", "check"}) plan_keys.erase(meta);
  std::set<std::string> contract_keys;
  for (const auto& f : k.fields)
    if (f.kind == "plan") contract_keys.insert(f.key);
  CHECK(plan_keys == contract_keys);
  // the plan-file reader's keys too (ac_every is schema 1's spelling of every-K, which the contract spells every-K)
  for (const auto& key : io::plan_keys())
    if (key != "$schema" && key != "schema_version" && key != "name" && key != "check" && key != "ac_every") CHECK(contract_keys.count(key) == 1);
  // every plan field of the contract that is a hyperparameter has a value in C++
  for (const auto& f : k.fields) {
    if (f.kind != "plan" || !f.hyperparameter) continue;
    INFO(f.key);
    CHECK_NOTHROW(io::plan_hyperparameter(k, p, f.key));
  }
  // a contract that grows a plan field bwplan does not know is an error, not a silently dropped setting
  json grown = json::parse(slurp(fs::path(BWPLAN_SOURCE_DIR) / "configs" / "training-contract.json"));
  grown["fields"].push_back({{"key", "zero_stage"}, {"kind", "plan"}, {"hyperparameter", "zero_stage"}, {"source", "hyperparameter"},
                             {"type", "int"}, {"unit", nullptr}, {"minimum", 0}, {"required", false}, {"default", 0}, {"trainer", "supported"}});
  const io::training_contract g = io::parse_contract(grown, "grown.json");
  CHECK_THROWS_WITH(io::plan_hyperparameters(g, p), Catch::Contains("plan field 'zero_stage' of the training contract is unknown to this bwplan"));
  // the source dir's copy is the same file
  CHECK(slurp(fs::path(BWPLAN_SOURCE_DIR) / "configs" / "training-contract.json") ==
        slurp(fs::path(BWPLAN_SOURCE_DIR) / "apps" / "train" / "training-contract.json"));
}

TEST_CASE("contract: the hyperparameter decoder reads what SageMaker hands the script", "[contract]") {
  const io::training_contract& k = contract();
  auto decode = [&](const char* hp, const char* raw) { return io::decode_hyperparameter(*k.by_hyperparameter(hp), raw); };
  CHECK(decode("fp8_all_gather", "True") == true);    // SDK v2 toolkit
  CHECK(decode("fp8_all_gather", "false") == false);  // SDK v3 driver
  CHECK(decode("fp8_all_gather", "\"TRUE\"") == true);
  CHECK(decode("seq_len", "8192") == 8192);
  CHECK(decode("seq_len", "\"8192\"") == 8192);
  CHECK(decode("sharding", "\"hybrid\"") == "hybrid");  // json.dumps of a string (SDK v2)
  CHECK(decode("sharding", "hybrid") == "hybrid");      // as given (SDK v3)
  CHECK(decode("activation_checkpointing", "every-12") == "every-12");
  CHECK(decode("learning_rate", "2e-4") == 0.0002);
  CHECK(decode("bf16_layers", "first:1,last:2") == "first:1,last:2");
  CHECK(io::is_null_hyperparameter(k, "null"));
  CHECK(io::is_null_hyperparameter(k, ""));
  CHECK(!io::is_null_hyperparameter(k, "0"));
  CHECK_THROWS_WITH(decode("seq_len", "4k"), "seq_len: hyperparameter 'seq_len': expected an integer (tokens), got '4k'");
  CHECK_THROWS_WITH(decode("fp8_all_gather", "yes"), Catch::EndsWith("expected true or false (True/False), got 'yes'"));
  CHECK_THROWS_WITH(decode("activation_checkpointing", "every-1"), Catch::Contains("expected one of none, full, selective-op, selective-attn, every-2"));
  CHECK_THROWS_WITH(decode("tp", "0"), Catch::EndsWith("0 is below the minimum 1"));
  CHECK_THROWS_WITH(decode("contract_version", "2"), Catch::EndsWith("2 is above the maximum 1"));
  // bwplan's "first:N" + fraction has no contract spelling: not emitted
  CHECK_THROWS_WITH(decode("bf16_layers", "first:2,0.15"), Catch::Contains("does not match"));
  CHECK_THROWS_WITH(decode("gpu", "a100"), Catch::Contains("expected one of h100, h200, b200, b300, gb200, gb300"));
}

TEST_CASE("contract: the trainer's refusals, decided from the plan", "[contract]") {
  const io::training_contract& k = contract();
  plan p;
  p.training.world_size = 16;
  p.training.gpus_per_node = 8;
  p.training.shard = sharding::full;
  CHECK(io::trainer_runs(k, p));
  auto first = [&](auto&& edit) {
    plan q = p;
    edit(q.training);
    const auto v = io::trainer_refusals(k, q);
    return v.empty() ? std::string("runs") : v.front().field + ": " + v.front().message;
  };
  CHECK_THAT(first([](training_config& c) { c.pp = 2; }), Catch::StartsWith("pp: pp 2: the reference trainer cannot run it (T-pp)"));
  CHECK_THAT(first([](training_config& c) { c.pp = 2; c.schedule = pp_schedule::interleaved; c.vpp = 2; c.grad_accum = 2; }),
             Catch::StartsWith("pp: pp 2: the reference trainer cannot run it (T-pp)"));
  CHECK_THAT(first([](training_config& c) { c.shard = sharding::optimizer; }),
             Catch::StartsWith("sharding: sharding optimizer: the reference trainer cannot run it (T-zero1)"));
  CHECK_THAT(first([](training_config& c) { c.ep = 2; }), Catch::StartsWith("ep: ep 2: the reference trainer cannot run it (T-ep)"));
  CHECK_THAT(first([](training_config& c) { c.fsdp_embedding_units = true; }),
             Catch::StartsWith("fsdp_embedding_units: fsdp_embedding_units true: the reference trainer cannot run it (T-fsdp-embedding-units)"));
  CHECK_THAT(first([](training_config& c) { c.optimizer_in_backward = true; }),
             Catch::StartsWith("optimizer_in_backward: optimizer_in_backward true: the reference trainer cannot run it (T-optimizer-in-backward)"));
  {  // tensor parallelism without sequence parallel (a Megatron plan: refused for its stack and for the layout)
    plan q = p;
    q.training.stack = training_stack::megatron;
    q.training.tp = 2;
    q.training.sequence_parallel = false;
    std::string all;
    for (const auto& v : io::trainer_refusals(k, q)) all += v.field + ": " + v.message + "\n";
    CHECK_THAT(all, Catch::Contains("sequence_parallel: sequence_parallel false: the reference trainer cannot run it (T-no-sequence-parallel)"));
    q.training.sequence_parallel = true;  // Megatron's TP communication overlap: refused by its own entry too
    q.training.tp_comm_overlap = true;
    all.clear();
    for (const auto& v : io::trainer_refusals(k, q)) all += v.field + ": " + v.message + "\n";
    CHECK_THAT(all, Catch::Contains("tp_comm_overlap: tp_comm_overlap true: the reference trainer cannot run it (T-tp-comm-overlap)"));
  }
  CHECK_THAT(first([](training_config& c) { c.moe_a2a_overlap = true; }),
             Catch::StartsWith("moe_a2a_overlap: moe_a2a_overlap true: the reference trainer cannot run it (T-moe-a2a-overlap)"));
  CHECK_THAT(first([](training_config& c) { c.format = compute_format::mxfp8; }), Catch::StartsWith("precision: precision mxfp8: the reference trainer cannot run it (T-mxfp8-torch)"));
  CHECK_THAT(first([](training_config& c) { c.format = compute_format::nvfp4; c.tp = 2; }), Catch::Contains("(T-nvfp4-tp)"));
  // nvfp4 under autocast runs: torchao's nvfp4_mm_triton converts an fp32 input and weight to bf16 itself
  // (nvfp4_linear.py @v0.18.0; the contract refused it as T-nvfp4-autocast until 2026-12-06). mxfp8 there does not
  // (its Triton cast asserts bf16): T-mxfp8-autocast, after T-mxfp8-torch, which every mxfp8 plan meets first
  CHECK(first([](training_config& c) { c.format = compute_format::nvfp4; c.shard = sharding::none; }) == "runs");
  CHECK(first([](training_config& c) { c.format = compute_format::nvfp4; c.shard = sharding::none; c.master = master_weights::bf16; }) == "runs");
  {
    plan q = p;
    q.training.format = compute_format::mxfp8;
    q.training.shard = sharding::none;
    std::string all;
    for (const auto& v : io::trainer_refusals(k, q)) all += v.field + ": " + v.message + "\n";
    CHECK_THAT(all, Catch::Contains("(T-mxfp8-autocast)"));
    q.training.master = master_weights::bf16;
    all.clear();
    for (const auto& v : io::trainer_refusals(k, q)) all += v.field + ": " + v.message + "\n";
    CHECK_THAT(all, !Catch::Contains("(T-mxfp8-autocast)"));
  }
  CHECK_THAT(first([](training_config& c) { c.shard = sharding::none; c.tp = 2; }), Catch::Contains("(T-ddp-tp)"));
  CHECK(first([](training_config& c) { c.shard = sharding::none; c.tp = 8; c.world_size = 8; }) == "runs");  // one tp group: no DDP
  CHECK_THAT(first([](training_config& c) { c.loss = loss_impl::chunked; c.tp = 2; }), Catch::Contains("(T-chunked-tp)"));
  CHECK_THAT(first([](training_config& c) { c.loss = loss_impl::liger; }), Catch::StartsWith("loss: loss liger: the reference trainer cannot run it (T-liger)"));
  CHECK(first([](training_config& c) { c.loss = loss_impl::chunked; }) == "runs");
  CHECK_THAT(first([](training_config& c) { c.tp = 2; c.cp = 2; c.seq_len = 4100; }), Catch::Contains("tp x 2 x cp = 8") && Catch::Contains("R-cp-seq"));
  CHECK_THAT(first([](training_config& c) { c.shard = sharding::hybrid; c.cp = 4; c.shard_group = 2; }), Catch::Contains("R-hybrid"));
  for (auto edit : {+[](training_config& c) { c.tp = 4; c.cp = 2; }, +[](training_config& c) { c.shard = sharding::hybrid; },
                    +[](training_config& c) { c.shard = sharding::grad_op; c.tp = 2; }, +[](training_config& c) { c.ac = checkpointing::selective_op(); },
                    +[](training_config& c) { c.format = compute_format::fp8_rowwise; c.master = master_weights::bf16; }})
    CHECK(first(edit) == "runs");
}

TEST_CASE("launch round trip: request → check, estimate --plan and the trainer's parser give the same plan and estimate",
          "[contract][sagemaker][roundtrip]") {
  const io::training_contract& k = contract();
  const auto grid = make_grid(110);
  REQUIRE(grid.size() >= 100);
  const fs::path dir = out_dir("launch-roundtrip");
  const bool py = have_python();
  if (!py) WARN("python3 not found: the trainer's side of the round trip (apps/train/contract.py, train.py --dry-run) is skipped");
  const hardware_catalog cat = quiet_context().catalog();
  std::set<std::string> seen, refused_ids;
  int emitted = 0, refused = 0, i = 0;
  for (const auto& g : grid) {
    INFO("point " << i << ": " << g.label);
    const fs::path here = dir / std::to_string(i++);
    fs::create_directories(here);
    for (std::size_t a = 0; a + 1 < g.args.size(); ++a)
      if (g.args[a].rfind("--", 0) == 0) seen.insert(g.args[a] + "=" + g.args[a + 1]);
    const auto flags = run_cli(with(with({"estimate"}, g.args), {"--format", "json"}));
    REQUIRE(flags.code == 0);
    const json flags_json = json::parse(flags.out);
    const numbers want = from_estimate(flags_json);
    const auto req = run_cli(with(with({"sagemaker"}, g.args), with(job_flags, {"--format", "request"})));
    if (req.code != 0) {
      // refused: one line naming the flag and the refusal; the trainer refuses the same plan with the same id
      INFO(req.err);
      REQUIRE(req.code == 2);
      CHECK(std::count(req.err.begin(), req.err.end(), '\n') == 1);
      const auto at = req.err.find("the reference trainer cannot run it (");
      REQUIRE(at != std::string::npos);
      const std::string id = req.err.substr(at + 37, req.err.find(')', at) - at - 37);
      refused_ids.insert(id);
      ++refused;
      if (py) {
        const fs::path planfile = here / "plan.json";
        REQUIRE(run_cli(with(with({"estimate"}, g.args), {"--emit", "plan", "-o", planfile.string()})).code == 0);
        const auto t = shell("python3 " + source("apps/train/contract.py") + " --to-hyperparameters " + shell_quote(planfile.string()) +
                                 " > " + shell_quote((here / "hp.json").string()) + " && python3 " + source("apps/train/train.py") +
                                 " --dry-run --hyperparameters " + shell_quote((here / "hp.json").string()),
                             here);
        INFO(t.err);
        CHECK(t.code == 2);
        CHECK_THAT(t.err, Catch::Contains("(" + id + ")"));
      }
      continue;
    }
    ++emitted;
    const fs::path job = here / "job.json";
    spit(job, req.out);
    const json request = json::parse(req.out);
    // 1. bwplan check job.json: the same configuration and estimate
    const auto c = run_cli({"check", "--format", "json", job.string()});
    INFO(c.out << c.err);
    REQUIRE(c.code != 2);
    const json checked = json::parse(c.out)["plans"][0]["estimate"];
    const numbers got = from_estimate(checked);
    CHECK(got.reserved == want.reserved);
    CHECK(got.allocated == want.allocated);
    CHECK(got.tokens_per_s == want.tokens_per_s);
    CHECK(config_without_spelling(checked["config"]) == config_without_spelling(flags_json["config"]));
    // 2. bwplan estimate --plan job.json
    const auto e = run_cli({"estimate", "--plan", job.string(), "--format", "json"});
    INFO(e.err);
    REQUIRE(e.code == 0);
    const numbers est = from_estimate(json::parse(e.out));
    CHECK(est.reserved == want.reserved);
    CHECK(est.tokens_per_s == want.tokens_per_s);
    // 3. the plan read back, field by field, is the plan the request carries (contract fields, resolved)
    cli::plan_options po;
    po.plan_file = job.string();
    const cli::resolved_plan rp = cli::resolve_plan(quiet_context(), cat, po);
    plan back = rp.p;
    back.target.gpu = rp.target.gpu.id;
    const json back_hp = io::plan_hyperparameters(k, back);
    std::map<std::string, json> sent;
    for (const auto& [name, raw] : request["HyperParameters"].items()) {
      const io::contract_field* f = k.by_hyperparameter(name);
      if (f == nullptr) { CHECK(name.rfind("sagemaker_", 0) == 0); continue; }
      sent[name] = io::decode_hyperparameter(*f, raw.get<std::string>());
    }
    for (const auto& [name, value] : back_hp.items()) {
      INFO(name);
      CHECK(sent.count(name) == 1);
      CHECK(sent[name] == value);
    }
    CHECK(back.target.instance == request["ResourceConfig"]["InstanceType"]);
    CHECK(back.target.nodes == request["ResourceConfig"]["InstanceCount"]);
    // 4. the trainer's own parser (standard library only) reads the same plan, and its dry run refuses nothing
    if (py) {
      spit(here / "hp.json", request["HyperParameters"].dump(2));
      json hosts = json::array();
      for (int n = 0; n < back.target.nodes; ++n) hosts.push_back("algo-" + std::to_string(n + 1));
      spit(here / "resourceconfig.json", json{{"current_instance_type", back.target.instance}, {"hosts", hosts}}.dump());
      const auto t = shell("python3 " + source("apps/train/contract.py") + " --hyperparameters " + shell_quote((here / "hp.json").string()) +
                               " --resource-config " + shell_quote((here / "resourceconfig.json").string()),
                           here);
      INFO(t.err);
      REQUIRE(t.code == 0);
      const json parsed = json::parse(t.out);
      for (const auto& f : k.fields) {
        if (f.kind != "plan" || f.source == "planning-only") continue;
        INFO("python " << f.key);
        json mine = f.hyperparameter ? io::plan_hyperparameter(k, back, f.key)
                                     : (f.key == "instance" ? json(back.target.instance) : json(back.target.nodes));
        CHECK(parsed.value(f.key, json()) == mine);
      }
      CHECK(parsed["max_steps"] == sent["max_steps"]);
      CHECK(parsed["data"] == "train");
      const auto d = shell("python3 " + source("apps/train/train.py") + " --dry-run --hyperparameters " + shell_quote((here / "hp.json").string()), here);
      INFO(d.err);
      REQUIRE(d.code == 0);
      CHECK(json::parse(d.out)["refusals"].empty());
    }
    // 5. the SDK forms read back to the same estimate
    if (emitted % 6 == 1) {
      for (const char* form : {"estimator", "modeltrainer"}) {
        const auto s = run_cli(with(with({"sagemaker"}, g.args), with(job_flags, {"--format", form})));
        REQUIRE(s.code == 0);
        const fs::path f = here / (std::string(form) + ".json");
        spit(f, s.out);
        const auto cf = run_cli({"check", "--format", "json", f.string()});
        INFO(form << ": " << cf.out << cf.err);
        REQUIRE(cf.code != 2);
        const numbers n = from_estimate(json::parse(cf.out)["plans"][0]["estimate"]);
        CHECK(n.reserved == want.reserved);
        CHECK(n.tokens_per_s == want.tokens_per_s);
      }
    }
  }
  // coverage: every value the trainer supports was emitted somewhere in the grid, and the refusals were met
  for (const char* v : {"--precision=bf16", "--precision=fp8", "--precision=fp8-rowwise", "--precision=nvfp4", "--ac=none", "--ac=full",
                        "--ac=every-2", "--ac=every-3", "--ac=selective-op", "--ac=selective-attn", "--sharding=none", "--sharding=full",
                        "--sharding=hybrid", "--sharding=grad-op", "--tp=1", "--tp=2", "--tp=4", "--cp=1", "--cp=2", "--master=fp32",
                        "--master=bf16", "--loss=standard", "--loss=chunked", "--optimizer-impl=fused", "--optimizer-impl=foreach"})
    CHECK(seen.count(v) == 1);
  CHECK(emitted >= 60);
  CHECK(refused > 0);
  for (const char* id : {"T-nvfp4-tp", "T-chunked-tp", "T-ddp-tp"}) CHECK(refused_ids.count(id) == 1);
}

TEST_CASE("launch: what the trainer cannot run is refused by bwplan and by the trainer alike", "[contract][sagemaker]") {
  const fs::path dir = out_dir("launch-refusals");
  const std::string moe = (fs::path(BWPLAN_SOURCE_DIR) / "tests" / "data" / "qwen3-30b-a3b.json").string();
  const std::vector<std::pair<std::vector<std::string>, std::string>> cases{
      {{"Llama-3.1-8B", "--precision", "mxfp8"}, "T-mxfp8-torch"},
      {{moe, "--ep", "2"}, "T-ep"},
      {{"Llama-3.1-8B", "--precision", "nvfp4", "--tp", "2"}, "T-nvfp4-tp"},
      {{"Llama-3.1-8B", "--sharding", "none", "--tp", "4"}, "T-ddp-tp"},
      {{"Llama-3.1-8B", "--loss", "chunked", "--tp", "2"}, "T-chunked-tp"},
      {{"Llama-3.1-8B", "--loss", "liger"}, "T-liger"},
      {{"Llama-3.1-8B", "--sharding", "optimizer"}, "T-zero1"},                                      // issue 13
      {{"Llama-3.1-8B", "--pp", "2", "--pp-schedule", "interleaved", "--vpp", "2", "--grad-accum", "2"}, "T-pp"}};
  int i = 0;
  for (const auto& [args, id] : cases) {
    INFO(id);
    const std::vector<std::string> plan_args = with(args, {"--instance", "ml.p6-b200.48xlarge", "--gpus", "8"});
    const auto r = run_cli(with(with({"sagemaker"}, plan_args), job_flags));
    CHECK(r.code == 2);
    CHECK(r.out.empty());
    CHECK(std::count(r.err.begin(), r.err.end(), '\n') == 1);
    CHECK_THAT(r.err, Catch::Contains("the reference trainer cannot run it (" + id + ")"));
    // T-mxfp8-torch is a runtime refusal of the trainer (it needs the installed torch to decide): bwplan refuses it
    // statically from the contract's unsupported values, the torch-free --dry-run cannot
    if (!have_python() || id == "T-mxfp8-torch") continue;
    const fs::path here = dir / std::to_string(i++);
    fs::create_directories(here);
    REQUIRE(run_cli(with(with({"estimate"}, plan_args), {"--emit", "plan", "-o", (here / "plan.json").string()})).code == 0);
    const auto t = shell("python3 " + source("apps/train/contract.py") + " --to-hyperparameters " + shell_quote((here / "plan.json").string()) +
                             " > " + shell_quote((here / "hp.json").string()) + " && python3 " + source("apps/train/train.py") +
                             " --dry-run --hyperparameters " + shell_quote((here / "hp.json").string()),
                         here);
    INFO(t.err);
    CHECK(t.code == 2);
    CHECK_THAT(t.err, Catch::Contains("(" + id + ")"));
  }
  // pp: bwplan models it (issue 13), but the trainer has no pipeline stages (T-pp)
  const auto pp = run_cli(with({"sagemaker", "Llama-3.1-8B", "--instance", "ml.p6-b200.48xlarge", "--pp", "2"}, job_flags));
  CHECK(pp.code == 2);
  CHECK_THAT(pp.err, Catch::StartsWith("bwplan: error: --pp: "));
}

TEST_CASE("launch: a request edited by hand is checked again, with lines in the request", "[contract][sagemaker][check]") {
  const fs::path dir = out_dir("launch-edited");
  const auto r = run_cli(with({"sagemaker", "Llama-3.1-8B", "--instance", "ml.p6-b200.48xlarge", "--nodes", "2", "--mbs", "2",
                               "--precision", "fp8", "--ac", "full"},
                              job_flags));
  REQUIRE(r.code == 0);
  const json base = json::parse(r.out);
  auto check_edit = [&](const std::string& name, auto&& edit) {
    json q = base;
    edit(q);
    const fs::path f = dir / (name + ".json");
    const std::string text = q.dump(2);
    spit(f, text);
    const auto c = run_cli({"check", "--format", "json", f.string()});
    return std::pair{c, text};
  };
  auto line_of = [](const std::string& text, const std::string& pointer) { return io::locate(text, pointer)->line; };

  SECTION("the unedited request passes") {
    const auto [c, text] = check_edit("unedited", [](json&) {});
    INFO(c.out << c.err);
    CHECK(c.code == 0);
  }
  SECTION("both boolean spellings and both string encodings are read") {
    const auto [c, text] = check_edit("spellings", [](json& q) {
      q["HyperParameters"]["fp8_all_gather"] = "True";
      q["HyperParameters"]["sharding"] = "full";            // SDK v3: unquoted
      q["HyperParameters"]["bf16_layers"] = "null";         // None: the default
      q["HyperParameters"]["micro_batch_size"] = "\"2\"";  // quoted
    });
    INFO(c.out << c.err);
    CHECK(c.code == 0);
    CHECK(json::parse(c.out)["plans"][0]["estimate"]["config"]["fp8_all_gather"] == true);
  }
  SECTION("a micro-batch that does not fit: the finding points at the hyperparameter's line") {
    const auto [c, text] = check_edit("mbs64", [](json& q) {
      q["HyperParameters"]["micro_batch_size"] = "64";
      q["HyperParameters"]["global_batch_size"] = "";  // "not given": from micro-batch x dp x accumulation
    });
    INFO(c.out << c.err);
    CHECK(c.code == 1);
    const json p = json::parse(c.out)["plans"][0];
    bool pointed = false;
    for (const auto& f : p["findings"])
      if (f["pointer"] == "/HyperParameters/micro_batch_size") {
        pointed = true;
        CHECK(f["line"] == line_of(text, "/HyperParameters/micro_batch_size"));
      }
    CHECK(pointed);
  }
  SECTION("a value the contract rejects: unusable, one line at the member") {
    const auto [c, text] = check_edit("seq4k", [](json& q) { q["HyperParameters"]["seq_len"] = "4k"; });
    CHECK(c.code == 2);
    const json p = json::parse(c.out)["plans"][0];
    CHECK_THAT(p["error"]["message"].get<std::string>(),
               Catch::Contains("/HyperParameters/seq_len: hyperparameter 'seq_len': expected an integer (tokens), got '4k'"));
    CHECK(p["error"]["line"] == line_of(text, "/HyperParameters/seq_len"));
  }
  SECTION("a plan the trainer refuses") {
    const auto [c, text] = check_edit("tp2chunked", [](json& q) {
      q["HyperParameters"]["tp"] = "2";
      q["HyperParameters"]["loss"] = "\"chunked\"";
    });
    CHECK(c.code == 2);
    const json p = json::parse(c.out)["plans"][0];
    CHECK_THAT(p["error"]["message"].get<std::string>(), Catch::Contains("/HyperParameters/loss: loss chunked, tp 2: the reference trainer cannot run it (T-chunked-tp)"));
    CHECK(p["error"]["line"] == line_of(text, "/HyperParameters/loss"));
  }
  SECTION("an unknown hyperparameter (the old Hugging Face Trainer keys) and a missing required one") {
    const auto [c, text] = check_edit("model_id", [](json& q) { q["HyperParameters"]["per_device_train_batch_size"] = "2"; });
    CHECK(c.code == 2);
    CHECK_THAT(json::parse(c.out)["plans"][0]["error"]["message"].get<std::string>(),
               Catch::Contains("hyperparameter 'per_device_train_batch_size': unknown (not in training contract version 1)"));
    const auto [c2, text2] = check_edit("noversion", [](json& q) { q["HyperParameters"].erase("contract_version"); });
    CHECK(c2.code == 2);
    CHECK_THAT(json::parse(c2.out)["plans"][0]["error"]["message"].get<std::string>(),
               Catch::Contains("/HyperParameters: hyperparameter 'contract_version' is required"));
  }
  SECTION("a world size other than every GPU of the instances") {
    const auto [c, text] = check_edit("gpus8", [](json& q) {
      q["HyperParameters"]["gpus"] = "8";
      q["HyperParameters"]["global_batch_size"] = "null";
    });
    CHECK(c.code == 2);
    const json p = json::parse(c.out)["plans"][0];
    CHECK_THAT(p["error"]["message"].get<std::string>(), Catch::Contains("/HyperParameters/gpus: the job runs 16 processes") && Catch::Contains("T-world"));
    CHECK(p["error"]["line"] == line_of(text, "/HyperParameters/gpus"));
  }
  SECTION("estimate --plan takes flags over the request, and names the member of a bad value") {
    const fs::path f = dir / "estimate.json";
    spit(f, base.dump(2));
    const auto e = run_cli({"estimate", "--plan", f.string(), "--mbs", "1", "--format", "json"});
    REQUIRE(e.code == 0);
    CHECK(json::parse(e.out)["config"]["micro_batch_size"] == 1);
    json q = base;
    q["HyperParameters"]["tp"] = "16";
    spit(f, q.dump(2));
    const auto bad = run_cli({"estimate", "--plan", f.string()});
    CHECK(bad.code == 2);
    CHECK_THAT(bad.err, Catch::Contains(f.string() + ": /HyperParameters/tp: tensor parallelism 16 must stay within a node of 8 GPUs"));
  }
}

TEST_CASE("launch: --source-dir writes the trainer, its contract and the plan, the trainer reads the job from there",
          "[contract][sagemaker][cli]") {
  const fs::path dir = out_dir("launch-sourcedir");
  fs::remove_all(dir / "src");
  const fs::path src = dir / "src";
  const auto r = run_cli(with({"sagemaker", "Llama-3.2-1B", "--instance", "ml.p5en.48xlarge", "--precision", "fp8", "--ac", "selective-op",
                               "--source-dir", src.string()},
                              job_flags));
  INFO(r.err);
  REQUIRE(r.code == 0);
  for (const char* f : {"train.py", "contract.py", "training-contract.json", "requirements.txt", "bwtrain/engine.py", "bwtrain/__init__.py",
                        "models/llama-3.2-1b.json", "plan.json"})
    CHECK(fs::exists(src / f));
  CHECK(slurp(src / "training-contract.json") == slurp(fs::path(BWPLAN_SOURCE_DIR) / "configs" / "training-contract.json"));
  CHECK(slurp(src / "requirements.txt") == slurp(fs::path(BWPLAN_SOURCE_DIR) / "apps" / "train" / "requirements.txt"));
  const json q = json::parse(r.out);
  CHECK(q["HyperParameters"]["sagemaker_program"] == "\"train.py\"");
  // the two commands that pack and upload it, with the request's own S3 URI
  const std::string s3 = json::parse(q["HyperParameters"]["sagemaker_submit_directory"].get<std::string>()).get<std::string>();
  CHECK_THAT(r.err, Catch::Contains("tar czf sourcedir.tar.gz -C " + shell_quote(src.string()) + " . && aws s3 cp sourcedir.tar.gz " + s3));
  // plan.json is the plan the request carries
  const auto c = run_cli({"check", "--format", "json", (src / "plan.json").string()});
  INFO(c.out << c.err);
  REQUIRE(c.code != 2);
  const fs::path job = dir / "job.json";
  spit(job, r.out);
  const auto cj = run_cli({"check", "--format", "json", job.string()});
  REQUIRE(cj.code != 2);
  CHECK(json::parse(c.out)["plans"][0]["estimate"]["throughput"] == json::parse(cj.out)["plans"][0]["estimate"]["throughput"]);
  if (have_python()) {
    // the copied trainer finds its contract next to it and accepts the job
    spit(dir / "hp.json", q["HyperParameters"].dump());
    const auto t = shell("cd " + shell_quote(src.string()) + " && python3 train.py --dry-run --hyperparameters " + shell_quote((dir / "hp.json").string()), dir);
    INFO(t.err);
    REQUIRE(t.code == 0);
    const json d = json::parse(t.out);
    CHECK(d["refusals"].empty());
    CHECK(d["plan"]["precision"] == "fp8");
    CHECK(d["plan"]["activation_checkpointing"] == "selective-op");
  }
  SECTION("a local config.json travels in the source dir and is built with random weights") {
    const fs::path src2 = dir / "src-local";
    fs::remove_all(src2);
    const std::string cfg = (fs::path(BWPLAN_SOURCE_DIR) / "configs" / "models" / "qwen3-0.6b.json").string();
    const auto l = run_cli(with({"sagemaker", cfg, "--instance", "ml.p5en.48xlarge", "--source-dir", src2.string()}, job_flags));
    INFO(l.err);
    REQUIRE(l.code == 0);
    const json lq = json::parse(l.out);
    CHECK(lq["HyperParameters"]["model"] == "\"models/qwen3-0-6b.json\"");
    CHECK(lq["HyperParameters"]["model_init"] == "\"random\"");
    CHECK(fs::exists(src2 / "models" / "qwen3-0-6b.json"));
    CHECK_THAT(l.err, Catch::Contains("is a local config.json: the trainer builds it with random weights"));
    // read back from the source dir, where the model path resolves
    spit(src2 / "job.json", l.out);
    CHECK(run_cli({"check", (src2 / "job.json").string()}).code != 2);
    CHECK(run_cli({"check", (src2 / "plan.json").string()}).code != 2);
  }
  SECTION("--source-dir runs train.py") {
    const auto e = run_cli(with({"sagemaker", "Llama-3.2-1B", "--instance", "ml.p5en.48xlarge", "--source-dir", (dir / "x").string(),
                                 "--entry-point", "my.py"},
                                job_flags));
    CHECK(e.code == 2);
    CHECK_THAT(e.err, Catch::Contains("--entry-point my.py: the source dir bwplan writes (--source-dir) runs the reference trainer, train.py"));
  }
}

TEST_CASE("bug: --probe of an every-K plan adds whole-model checkpointing as a variant", "[sagemaker][cli]") {
  // found by a helper's sweep: an every-2 plan (ac mode full, every 2) was taken for full checkpointing and probed
  // without the full variant
  const fs::path src = out_dir("probe-every-k") / "src";
  fs::remove_all(src);
  const auto r = run_cli(with({"sagemaker", "Llama-3.2-1B", "--instance", "ml.p5en.48xlarge", "--ac", "every-2", "--probe", "--source-dir",
                               src.string()},
                              job_flags));
  INFO(r.err);
  REQUIRE(r.code == 0);
  const auto plans = nlohmann::json::parse(slurp(src / "probe.json"));
  REQUIRE(plans.is_array());
  CHECK(plans[0]["activation_checkpointing"] == "every-2");
  bool full = false;
  for (const auto& p : plans) full = full || p["activation_checkpointing"] == "full";
  CHECK(full);
}

TEST_CASE("bug: a probe request reads back with check, and its measurement window is the probe's", "[sagemaker][cli]") {
  // a review: `check probe.job.json` refused the request's `probe` hyperparameter as unknown; --hyperparameter
  // measure_steps=10 went into a request whose max_steps stayed 5, and the trainer ran 5
  const fs::path dir = out_dir("probe-readback");
  fs::remove_all(dir);
  fs::create_directories(dir);
  const auto r = run_cli(with({"sagemaker", "Llama-3.2-1B", "--instance", "ml.p5en.48xlarge", "--probe", "--source-dir",
                               (dir / "src").string()},
                              job_flags));
  INFO(r.err);
  REQUIRE(r.code == 0);
  REQUIRE(nlohmann::json::parse(r.out)["HyperParameters"].contains("probe"));
  { std::ofstream(dir / "probe.job.json") << r.out; }
  const auto c = run_cli({"check", (dir / "probe.job.json").string()});
  INFO(c.out << c.err);
  CHECK(c.code == 0);
  const auto w = run_cli(with({"sagemaker", "Llama-3.2-1B", "--instance", "ml.p5en.48xlarge", "--probe", "--source-dir",
                               (dir / "src").string(), "--hyperparameter", "measure_steps=10"},
                              job_flags));
  CHECK(w.code == 2);
  CHECK(w.err.find("--hyperparameter measure_steps") != std::string::npos);
}

TEST_CASE("bug: --model-id naming another bundled model than the plan's is refused", "[sagemaker][cli]") {
  // a review: the 70B's hub id on an 8B plan went out (exit 0), and `check` of the job said 320 GiB per GPU
  const auto other = run_cli(with({"sagemaker", "Llama-3.1-8B", "--instance", "ml.p5.48xlarge", "--model-id", "meta-llama/Llama-3.1-70B"},
                                  job_flags));
  CHECK(other.code == 2);
  CHECK(other.err.find("--model-id meta-llama/Llama-3.1-70B") != std::string::npos);
  CHECK(run_cli(with({"sagemaker", "Llama-3.1-8B", "--instance", "ml.p5.48xlarge", "--model-id", "meta-llama/Llama-3.1-8B"}, job_flags))
            .code == 0);
  const auto s3 = run_cli(with({"sagemaker", "Llama-3.1-8B", "--instance", "ml.p5.48xlarge", "--model-id", "s3://bucket/llama-8b/"},
                               job_flags));
  CHECK(s3.code == 0);
  CHECK(s3.err.find("cannot check") != std::string::npos);
  // a plan estimated from a local copy of a preset's config, given that preset's weights: the documented way to get
  // pretrained weights for a local config (a review found it refused by name)
  const fs::path local = out_dir("model-id") / "my-llama.json";
  fs::create_directories(local.parent_path());
  fs::copy_file(fs::path(BWPLAN_SOURCE_DIR) / "configs" / "models" / "llama-3.1-8b.json", local, fs::copy_options::overwrite_existing);
  const auto copy = run_cli(with({"sagemaker", local.string(), "--instance", "ml.p5.48xlarge", "--model-id", "meta-llama/Llama-3.1-8B"},
                                 job_flags));
  INFO(copy.err);
  CHECK(copy.code == 0);
}

TEST_CASE("bug: --max-runtime is whole seconds, and one below the estimate is said", "[sagemaker][cli]") {
  // a review: 0.0001s became MaxRuntimeInSeconds 1 without a word; 1 s against a 440 s estimate passed silently
  const auto tiny = run_cli(with({"sagemaker", "Llama-3.2-1B", "--instance", "ml.p5.48xlarge", "--max-runtime", "0.0001s"}, job_flags));
  CHECK(tiny.code == 2);
  CHECK(tiny.err.find("whole number of seconds") != std::string::npos);
  const auto short_run = run_cli(with({"sagemaker", "Llama-3.2-1B", "--instance", "ml.p5.48xlarge", "--max-runtime", "1"}, job_flags));
  CHECK(short_run.code == 0);
  CHECK(short_run.err.find("below the estimated") != std::string::npos);
  CHECK(nlohmann::json::parse(short_run.out)["StoppingCondition"]["MaxRuntimeInSeconds"] == 1);
  // whole in decimal, not quite in binary: 1.1 h is 3960.0000000000005 s (a review found it refused)
  const auto hours = run_cli(with({"sagemaker", "Llama-3.2-1B", "--instance", "ml.p5.48xlarge", "--max-runtime", "1.1h"}, job_flags));
  INFO(hours.err);
  REQUIRE(hours.code == 0);
  CHECK(nlohmann::json::parse(hours.out)["StoppingCondition"]["MaxRuntimeInSeconds"] == 3960);
  // the probe's own window: --max-steps and --train-tokens ran every probe plan that long (a review)
  CHECK(run_cli(with({"sagemaker", "Llama-3.2-1B", "--instance", "ml.p5en.48xlarge", "--probe", "--train-tokens", "10B"}, job_flags))
            .code == 2);
}
