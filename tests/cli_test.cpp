// The CLI in-process: outputs, exit codes, and one clear line for every kind of bad input.
#include "test_util.hpp"

#include <algorithm>

#include <catch2/catch.hpp>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <filesystem>
#include <fstream>

using namespace bwplan;
using test::run_cli;

namespace {
std::string write_temp(const std::string& name, const std::string& text) {
  const auto p = std::filesystem::temp_directory_path() / ("bwplan_test_" + name);
  std::ofstream(p) << text;
  return p.string();
}
int lines(const std::string& s) { return static_cast<int>(std::count(s.begin(), s.end(), '\n')); }
const char* llama_like = R"({"model_type": "llama", "hidden_size": 2048, "num_hidden_layers": 16, "num_attention_heads": 32,
  "num_key_value_heads": 8, "intermediate_size": 8192, "vocab_size": 128256, "tie_word_embeddings": true})";
}  // namespace

TEST_CASE("cli: estimate prints the JSON fields the issue names", "[cli]") {
  const auto r = run_cli({"estimate", "Llama-3.1-8B", "--gpu", "h200", "--mbs", "1", "--seq", "4096", "--ac", "full", "--format", "json"});
  REQUIRE(r.code == 0);
  const auto j = nlohmann::json::parse(r.out);
  for (const char* p : {"/memory/peak_allocated_bytes", "/memory/peak_reserved_bytes", "/memory/peak_phase",
                        "/memory/capacity_bytes", "/memory/breakdown", "/fits", "/params/total", "/throughput/tokens_per_s",
                        "/throughput/mfu"})
    CHECK(j.contains(nlohmann::json::json_pointer(p)));
  CHECK(j["params"]["total"] == 8'030'261'248LL);
  CHECK(j["memory"]["capacity_bytes"].get<double>() == Approx(143771.0 * 1048576 - 615.0625 * 1048576));
}

TEST_CASE("cli: estimate says where peak reserved comes from, and what keeps a plan from the replay", "[cli][allocator]") {
  // Llama-3.1-8B over four ml.g5.48xlarge (32 A10G), FSDP2, 1 x 2048, full checkpointing: replayed with the standard
  // loss (19.08 GiB reserved) and with the trainer's chunked loss; with per-op checkpointing the trace does not
  // describe the plan, and the cheap bound comes with the segments it does not hold, sized for this model (before,
  // nothing told them apart). (Liger's loss, once the example here, is replayed through the chunked loss's step since
  // 2026-12-07: replay_stand_in.)
  const std::vector<std::string> base = {"estimate", "Llama-3.1-8B", "--instance", "ml.g5.48xlarge", "--nodes", "4", "--mbs", "1",
                                         "--seq", "2048", "--ac", "full", "--sharding", "full"};
  const auto replayed = run_cli(base);
  REQUIRE(replayed.code == 0);
  CHECK_THAT(replayed.out, Catch::Contains("reserved: the step replayed through PyTorch's caching allocator"));
  auto chunked_args = base;
  chunked_args.insert(chunked_args.end(), {"--loss", "chunked"});
  CHECK_THAT(run_cli(chunked_args).out, Catch::Contains("reserved: the step replayed through PyTorch's caching allocator"));
  auto sac_args = base;
  *std::find(sac_args.begin(), sac_args.end(), "full") = "selective-op";  // --ac full → --ac selective-op
  const auto sac = run_cli(sac_args);
  REQUIRE(sac.code == 0);
  // the root: 2 x 128256 x 4096 + 4096 parameters, fp32 reduce-scatter input 3.91 GiB, bf16 all-gather buffer 1.96 GiB
  CHECK_THAT(sac.out, Catch::Contains("the caching-allocator replay does not describe per-op checkpointing; on FSDP2 "
                                      "across ranks the replay of the plans it describes keeps the root's reduce-scatter input "
                                      "(3.91 GiB here, often twice) and all-gather buffer (1.96 GiB) as segments of their own"));
  sac_args.insert(sac_args.end(), {"--format", "json"});
  const auto j = nlohmann::json::parse(run_cli(sac_args).out);
  CHECK(j["memory"]["replayed"] == false);
  CHECK(j["memory"]["not_replayed_because"] == "per-op checkpointing");
  auto md_args = base;
  md_args.insert(md_args.end(), {"--format", "markdown"});
  CHECK_THAT(run_cli(md_args).out, Catch::Contains("Peak reserved: the step replayed through PyTorch's caching allocator"));
}

TEST_CASE("cli: bad input exits 2 with one line naming the file, field and problem", "[cli]") {
  SECTION("malformed JSON") {
    const auto f = write_temp("bad.json", "{\"model_type\": \"llama\", ");
    const auto r = run_cli({"estimate", f});
    CHECK(r.code == 2);
    CHECK(lines(r.err) == 1);
    CHECK_THAT(r.err, Catch::Contains(f) && Catch::Contains("malformed JSON"));
  }
  SECTION("missing field") {
    const auto f = write_temp("missing.json", R"({"model_type": "llama", "hidden_size": 64})");
    const auto r = run_cli({"estimate", f});
    CHECK(r.code == 2);
    CHECK(lines(r.err) == 1);
    CHECK_THAT(r.err, Catch::Contains(f + ": /num_hidden_layers: missing required field"));
  }
  SECTION("non-numeric field") {
    const auto f = write_temp("nonnum.json", R"({"model_type": "llama", "hidden_size": "big", "num_hidden_layers": 2})");
    const auto r = run_cli({"estimate", f});
    CHECK(r.code == 2);
    CHECK_THAT(r.err, Catch::Contains("/hidden_size: expected an integer, got string"));
  }
  SECTION("zero layers") {
    std::string t = llama_like;
    t.replace(t.find("\"num_hidden_layers\": 16"), 23, "\"num_hidden_layers\": 0");
    const auto f = write_temp("zero.json", t);
    const auto r = run_cli({"estimate", f});
    CHECK(r.code == 2);
    CHECK_THAT(r.err, Catch::Contains("/num_hidden_layers: must be >= 1, got 0"));
  }
  SECTION("heads not dividing the hidden size") {
    std::string t = llama_like;
    t.replace(t.find("\"num_attention_heads\": 32"), 25, "\"num_attention_heads\": 30");
    t.replace(t.find("\"num_key_value_heads\": 8"), 24, "\"num_key_value_heads\": 6");
    const auto f = write_temp("heads.json", t);
    const auto r = run_cli({"estimate", f});
    CHECK(r.code == 2);
    CHECK_THAT(r.err, Catch::Contains("num_attention_heads=30 does not divide hidden_size=2048"));
  }
  SECTION("unsupported model_type") {
    std::string t = llama_like;
    t.replace(t.find("\"llama\""), 7, "\"mamba\"");
    const auto r = run_cli({"estimate", write_temp("mamba.json", t)});
    CHECK(r.code == 2);
    CHECK(lines(r.err) == 1);
    CHECK_THAT(r.err, Catch::Contains("unsupported model_type 'mamba'"));
  }
  SECTION("MoE with top-k above the experts") {
    std::string t = llama_like;
    t.replace(t.find("\"llama\""), 7, "\"mixtral\", \"num_local_experts\": 4, \"num_experts_per_tok\": 8");
    const auto r = run_cli({"estimate", write_temp("topk.json", t)});
    CHECK(r.code == 2);
    CHECK(lines(r.err) == 1);
    CHECK_THAT(r.err, Catch::Contains("/num_experts_per_tok") && Catch::Contains("exceeds the 4 experts"));
  }
  SECTION("MoE with zero experts") {
    std::string t = llama_like;
    t.replace(t.find("\"llama\""), 7, "\"qwen3_moe\", \"num_experts\": 0, \"num_experts_per_tok\": 1, \"moe_intermediate_size\": 64");
    const auto r = run_cli({"estimate", write_temp("zero.json", t)});
    CHECK(r.code == 2);
    CHECK(lines(r.err) == 1);
    CHECK_THAT(r.err, Catch::Contains("/num_experts: must be >= 1, got 0"));
  }
  SECTION("negative micro-batch") {
    const auto r = run_cli({"estimate", "Llama-3.2-1B", "--mbs=-1"});
    CHECK(r.code == 2);
    CHECK(lines(r.err) == 1);
    CHECK_THAT(r.err, Catch::Contains("--mbs") && Catch::Contains("-1"));
  }
  SECTION("non-numeric micro-batch") {
    const auto r = run_cli({"estimate", "Llama-3.2-1B", "--mbs", "four"});
    CHECK(r.code == 2);
    CHECK(lines(r.err) == 1);
    CHECK_THAT(r.err, Catch::Contains("--mbs"));
  }
  SECTION("unknown GPU") {
    const auto r = run_cli({"estimate", "Llama-3.2-1B", "--gpu", "h2000"});
    CHECK(r.code == 2);
    CHECK(lines(r.err) == 1);
    CHECK_THAT(r.err, Catch::Contains("unknown GPU 'h2000'") && Catch::Contains("did you mean"));
  }
  SECTION("unknown instance") {
    const auto r = run_cli({"recommend", "Llama-3.2-1B", "--instance", "ml.p6-b900.48xlarge"});
    CHECK(r.code == 2);
    CHECK_THAT(r.err, Catch::Contains("unknown instance 'ml.p6-b900.48xlarge'"));
  }
  SECTION("unknown preset") {
    const auto r = run_cli({"estimate", "Llama-3.1-9B"});
    CHECK(r.code == 2);
    CHECK(lines(r.err) == 1);
    CHECK_THAT(r.err, Catch::Contains("did you mean 'llama-3.1-8b'"));
  }
  SECTION("malformed hardware override") {
    const auto f = write_temp("hw.json", R"({"gpus": [{"id": "x", "architecture": "hopper", "hbm_total_mib": "lots"}]})");
    const auto r = run_cli({"--hardware", f, "hardware"});
    CHECK(r.code == 2);
    CHECK_THAT(r.err, Catch::Contains(f + ": /gpus/0/hbm_total_mib: expected a number, got string"));
  }
}

TEST_CASE("cli: a user hardware file adds a GPU", "[cli]") {
  const auto f = write_temp("hw_ok.json", R"({"gpus": [{"id": "mygpu", "architecture": "blackwell", "hbm_total_mib": 100000,
     "hbm_bandwidth_tb_per_s": 5, "nvlink_gb_per_s_per_direction": 900, "dense_tflop_per_s": {"bf16": 2000}}]})");
  const auto r = run_cli({"--hardware", f, "estimate", "Llama-3.2-1B", "--gpu", "mygpu", "--format", "json"});
  REQUIRE(r.code == 0);
  CHECK(nlohmann::json::parse(r.out)["memory"]["capacity_bytes"].get<double>() == Approx(100000.0 * 1048576));
}

TEST_CASE("cli: --check exits 1 when the configuration does not fit", "[cli]") {
  const auto r = run_cli({"estimate", "Llama-3.1-70B", "--gpu", "h100", "--gpus", "1", "--check"});
  CHECK(r.code == 1);
  CHECK_THAT(r.out, Catch::Contains("DOES NOT FIT"));
}

TEST_CASE("cli: recommend returns a fitting plan for 8B, 70B and 72B on one p6-b200 node", "[cli]") {
  for (const char* model : {"Llama-3.1-8B", "Llama-3.1-70B", "Qwen2.5-72B"}) {
    INFO(model);
    const auto r = run_cli({"recommend", model, "--instance", "ml.p6-b200.48xlarge", "--format", "json"});
    REQUIRE(r.code == 0);
    const auto j = nlohmann::json::parse(r.out);
    REQUIRE(!j["plans"].empty());
    const auto& best = j["plans"][0];
    CHECK(best["fits"] == true);
    // the headroom the error band needs for a plain "fits" (issue 16: instead of the fixed 5 %), and that verdict
    CHECK(j["search"]["headroom_source"].get<std::string>().find("error band") != std::string::npos);
    CHECK(best["memory"]["headroom"].get<double>() >= j["search"]["headroom"].get<double>());
    CHECK(best["verdict"] == "fits");
    CHECK(best["config"]["world_size"] == 8);
    CHECK(!j["explanation"].get<std::string>().empty());
    const auto t = run_cli({"recommend", model});
    REQUIRE(t.code == 0);
    CHECK_THAT(t.out, Catch::Contains("why: "));
  }
}

TEST_CASE("cli: hardware lists the catalog", "[cli]") {
  const auto r = run_cli({"hardware"});
  REQUIRE(r.code == 0);
  for (const char* s : {"h100", "h200", "b200", "b300", "ml.p5.48xlarge", "ml.p5e.48xlarge", "ml.p5en.48xlarge",
                        "ml.p6-b200.48xlarge", "ml.p6-b300.48xlarge"})
    CHECK_THAT(r.out, Catch::Contains(s));
  // every row lines up under its header: the second column starts where "arch" / "GPU" does, also after the
  // long ids (a100-40gb, h100-96gb; the table used to shift those rows by two characters)
  std::istringstream in(r.out);
  std::string line, header;
  int rows = 0;
  while (std::getline(in, line)) {
    if (line.empty()) { header.clear(); continue; }
    if (header.empty()) { header = line; continue; }
    const std::size_t col = header.find(header.rfind("GPU", 0) == 0 ? "arch" : "GPU ");
    REQUIRE(col != std::string::npos);
    INFO(line);
    CHECK(line[col - 1] == ' ');
    CHECK(line[col] != ' ');
    ++rows;
  }
  CHECK(rows >= 12);
}

TEST_CASE("cli: recommend plans MoE models with expert parallelism (Mixtral, Qwen3-30B-A3B on one p6-b200)", "[cli]") {
  for (const char* name : {"Mixtral-8x7B-v0.1", "Qwen3-30B-A3B"}) {
    INFO(name);
    const std::string model = name;  // bundled presets (byte copies of ../shared/models)
    const auto r = run_cli({"recommend", model, "--instance", "ml.p6-b200.48xlarge", "--format", "json"});
    REQUIRE(r.code == 0);
    const auto j = nlohmann::json::parse(r.out);
    REQUIRE(!j["plans"].empty());
    const auto& best = j["plans"][0];
    CHECK(best["fits"] == true);
    CHECK(best["config"]["world_size"] == 8);
    const int ep = best["config"]["ep"].get<int>();
    CHECK((ep == 1 || ep == 2 || ep == 4 || ep == 8));
    CHECK(best["params"]["active"].get<std::int64_t>() < best["params"]["total"].get<std::int64_t>());
    const auto t = run_cli({"recommend", model});
    REQUIRE(t.code == 0);
    CHECK_THAT(t.out, Catch::Contains(" EP ") && Catch::Contains("why: "));
  }
}

TEST_CASE("cli: recommend plans DeepSeek-V3 on the nodes it needs with expert parallelism", "[cli]") {
  const std::string model = "DeepSeek-V3-Base";
  // 671B parameters with fp32 master weights and AdamW: 16 B/param = 10.7 TB of state; 4 nodes (32 B200, 335 GB each) are too few
  const auto few = run_cli({"recommend", model, "--instance", "ml.p6-b200.48xlarge", "--nodes", "4", "--format", "json"});
  CHECK(few.code == 1);
  const auto r = run_cli({"recommend", model, "--instance", "ml.p6-b200.48xlarge", "--nodes", "10", "--format", "json"});
  REQUIRE(r.code == 0);
  const auto j = nlohmann::json::parse(r.out);
  REQUIRE(!j["plans"].empty());
  const auto& best = j["plans"][0];
  CHECK(best["config"]["world_size"] == 80);
  CHECK(best["config"]["ep"].get<int>() > 1);
  CHECK(best["params"]["total"] == 671'026'419'200);
  CHECK(best["params"]["mtp"].get<std::int64_t>() > 11'000'000'000);
  const auto t = run_cli({"recommend", model, "--nodes", "10"});
  REQUIRE(t.code == 0);
  CHECK_THAT(t.out, Catch::Contains(" EP "));
}

TEST_CASE("cli: estimate takes --ep for MoE models only", "[cli]") {
  const std::string mixtral = "Mixtral-8x7B-v0.1";
  const auto ok = run_cli({"estimate", mixtral, "--ep", "8", "--format", "json"});
  REQUIRE(ok.code == 0);
  const auto j = nlohmann::json::parse(ok.out);
  CHECK(j["config"]["ep"] == 8);
  CHECK(j["params"]["active"] == 12'879'925'248);
  const auto ep1 = nlohmann::json::parse(run_cli({"estimate", mixtral, "--format", "json"}).out);
  // without ep each GPU all-gathers all 8 experts of a block; with ep 8 only its own
  CHECK(j["memory"]["peak_allocated_bytes"].get<double>() < ep1["memory"]["peak_allocated_bytes"].get<double>());
  const auto dense = run_cli({"estimate", "Llama-3.1-8B", "--ep", "2"});
  CHECK(dense.code == 2);
  CHECK(lines(dense.err) == 1);
  const auto bad = run_cli({"estimate", mixtral, "--ep", "3"});
  CHECK(bad.code == 2);
  CHECK(lines(bad.err) == 1);
}

TEST_CASE("cli: gpt2 sequences are capped by its learned positions", "[cli]") {
  const std::string gpt2 = "gpt2";
  const auto ok = run_cli({"estimate", gpt2, "--seq", "1024"});
  CHECK(ok.code == 0);
  const auto bad = run_cli({"estimate", gpt2, "--seq", "2048"});
  CHECK(bad.code == 2);
  CHECK(lines(bad.err) == 1);
  CHECK_THAT(bad.err, Catch::Contains("n_positions"));
  const auto rec = run_cli({"recommend", gpt2, "--seq", "1024"});
  CHECK(rec.code == 0);
  // An explicit --seq past the positions is refused in one line; recommend evaluated no configuration and said "0
  // configurations evaluated ... try more nodes or a larger GPU" (exit 1).
  const auto rec_bad = run_cli({"recommend", gpt2, "--seq", "2048"});
  CHECK(rec_bad.code == 2);
  CHECK(lines(rec_bad.err) == 1);
  CHECK_THAT(rec_bad.err, Catch::Contains("--seq") && Catch::Contains("n_positions"));
}

TEST_CASE("cli: without --seq the default length is capped at the model's context", "[cli]") {
  // The default 4,096 tokens exceed gpt2's 1,024 learned positions: estimate refused with "--seq: sequence 4096
  // exceeds ..." although no --seq was given, and recommend evaluated nothing ("0 configurations evaluated").
  const auto est = run_cli({"estimate", "gpt2", "--format", "json"});
  REQUIRE(est.code == 0);
  CHECK(nlohmann::json::parse(est.out)["config"]["seq_len"] == 1024);
  const auto rec = run_cli({"recommend", "gpt2", "--format", "json"});
  REQUIRE(rec.code == 0);
  const auto rj = nlohmann::json::parse(rec.out);
  CHECK(rj["search"]["evaluated"].get<long>() > 0);
  CHECK(rj["plans"][0]["config"]["seq_len"] == 1024);
  // TinyLlama (max_position_embeddings 2048, RoPE): the default was 4096 with a warning that it exceeds the context.
  const std::string tiny = (test::shared_dir() / "models" / "TinyLlama-1.1B-Chat-v1.0.json").string();
  if (std::filesystem::exists(tiny)) {
    const auto t = run_cli({"estimate", tiny, "--gpu", "h200", "--format", "json"});
    REQUIRE(t.code == 0);
    CHECK(nlohmann::json::parse(t.out)["config"]["seq_len"] == 2048);
    CHECK(t.err.empty());
  }
  // a length given is kept (the context warning stays)
  const auto given = run_cli({"estimate", "Llama-3.1-8B", "--seq", "8192", "--format", "json"});
  CHECK(nlohmann::json::parse(given.out)["config"]["seq_len"] == 8192);
}

TEST_CASE("cli: estimate's table says how far over capacity a plan is, not a negative headroom", "[cli]") {
  // Llama 3.1 70B on one H100 printed "1075.65 GiB of 79.20 GiB (-1258.1% headroom) -> DOES NOT FIT".
  const auto r = run_cli({"estimate", "Llama-3.1-70B", "--gpu", "h100", "--gpus", "1", "--ascii"});
  REQUIRE(r.code == 0);
  CHECK_THAT(r.out, Catch::Contains("GiB over) -> DOES NOT FIT") && !Catch::Contains("-1258"));
  CHECK_THAT(r.out, !Catch::Contains("% headroom) -> DOES NOT FIT"));
  const auto ok = run_cli({"estimate", "Llama-3.2-1B", "--gpu", "h200", "--gpus", "1", "--ascii"});
  CHECK_THAT(ok.out, Catch::Contains("% headroom) -> fits"));
}

TEST_CASE("cli: a value CLI11 cannot convert is named as the range-checked flags name it", "[cli]") {
  // Before: "Could not convert: --mbs = x" (CLI11's words) for every INT / FLOAT option without a range validator,
  // and "--seq-tolerance nan" was taken.
  const std::vector<std::pair<std::vector<std::string>, std::string>> cases = {
      {{"estimate", "Llama-3.2-1B", "--mbs", "x"}, "--mbs: expected an integer, got 'x'"},
      {{"estimate", "Llama-3.2-1B", "--tp", "1.5"}, "--tp: expected an integer, got '1.5'"},
      {{"recommend", "Llama-3.2-1B", "--top", "99999999999"}, "--top: out of range: too large, got 99999999999"},
      {{"estimate", "Llama-3.2-1B", "--finetune", "lora", "--lora-alpha", "x"}, "--lora-alpha: expected a number, got 'x'"},
      {{"sweep", "Llama-3.2-1B", "--lora-dropout", "y", "--vary", "mbs=1,2"}, "--lora-dropout: expected a number, got 'y'"},
      {{"recommend", "Llama-3.2-1B", "--top", "x"}, "--top: expected an integer, got 'x'"},
      {{"recommend", "Llama-3.2-1B", "--seq-tolerance", "nan"}, "--seq-tolerance: must be a finite number, got 'nan'"},
  };
  for (const auto& [args, message] : cases) {
    const auto r = run_cli(args);
    INFO(args[0] << " " << args[2]);
    CHECK(r.code == 2);
    CHECK(lines(r.err) == 1);
    CHECK_THAT(r.err, Catch::Contains(message) && !Catch::Contains("Could not convert"));
  }
}

TEST_CASE("cli: recommend says why nothing could be evaluated instead of 'try more nodes'", "[cli]") {
  // --optimizer-in-backward forbids accumulation, which the default 4M-token global batch needs at every micro-batch:
  // recommend said "0 configurations evaluated ... try more nodes or a larger GPU" (more nodes are ruled out too).
  const auto one = run_cli({"recommend", "Llama-3.2-1B", "--gpu", "h200", "--stack", "torchtune", "--optimizer-in-backward"});
  CHECK(one.code == 1);
  CHECK(lines(one.err) == 1);
  CHECK_THAT(one.err, Catch::Contains("could be evaluated") && Catch::Contains("--global-batch-tokens 4096") &&
                          !Catch::Contains("try more nodes"));
  const auto node = run_cli({"recommend", "Llama-3.2-1B", "--instance", "ml.p5en.48xlarge", "--stack", "torchtune", "--optimizer-in-backward"});
  CHECK(node.code == 1);
  CHECK_THAT(node.err, Catch::Contains("one GPU") && Catch::Contains("not 8 GPUs") && !Catch::Contains("try more nodes"));
  // the suggested global batch gives plans
  const auto fixed = run_cli({"recommend", "Llama-3.2-1B", "--gpu", "h200", "--stack", "torchtune", "--optimizer-in-backward",
                              "--global-batch-tokens", "4096", "--format", "json"});
  REQUIRE(fixed.code == 0);
  CHECK(nlohmann::json::parse(fixed.out)["search"]["fitting"].get<long>() > 0);
}

TEST_CASE("cli: estimate --tokens on a bare --gpu gives GPU-hours and no $0 cost", "[cli]") {
  // "training 1e+09 tokens in 3.7 h on 8 node(s): 30 instance-hours, $0 at $0.00/h per instance"
  const auto r = run_cli({"estimate", "Llama-3.1-8B", "--gpu", "h100", "--gpus", "8", "--tokens", "1B"});
  REQUIRE(r.code == 0);
  CHECK_THAT(r.out, Catch::Contains("on 8 GPU(s)") && Catch::Contains("GPU-hours") && Catch::Contains("no cost") &&
                        !Catch::Contains("$0 at $0.00"));
  const auto j = nlohmann::json::parse(run_cli({"estimate", "Llama-3.1-8B", "--gpu", "h100", "--gpus", "8", "--tokens", "1B", "--format", "json"}).out);
  CHECK(!j["training"].contains("cost_usd"));
  const auto priced = run_cli({"estimate", "Llama-3.1-8B", "--gpu", "h100", "--gpus", "8", "--tokens", "1B", "--price-per-hour", "3"});
  CHECK_THAT(priced.out, Catch::Contains("at $3.00/h per GPU"));
  const auto inst = run_cli({"estimate", "Llama-3.1-8B", "--instance", "ml.p5.48xlarge", "--tokens", "1B"});
  CHECK_THAT(inst.out, Catch::Contains("per instance") && Catch::Contains("1 node(s)"));
}

TEST_CASE("cli: recommend's table shows the pipeline and tensor-parallel columns of the plans it lists", "[cli]") {
  // --top 1 on one p5 node: plan #1 is PP 2 interleaved; the table showed no PP column (only --top 2 did).
  const std::vector<std::string> args = {"recommend", "Llama-3.1-8B", "--instance", "ml.p5.48xlarge", "--top", "1", "--ascii"};
  const auto txt = run_cli(args);
  auto json_args = args;
  json_args.back() = "--format";
  json_args.emplace_back("json");
  const auto js = run_cli(json_args);
  REQUIRE(txt.code == 0);
  REQUIRE(js.code == 0);
  const auto cfg = nlohmann::json::parse(js.out)["plans"][0]["config"];
  const std::string header = txt.out.substr(txt.out.find("  #"), txt.out.find('\n', txt.out.find("  #")) - txt.out.find("  #"));
  INFO(header);
  if (cfg["pp"].get<int>() > 1) CHECK_THAT(header, Catch::Contains(" PP"));
  if (cfg["tp"].get<int>() > 1) CHECK_THAT(header, Catch::Contains(" TP"));
  CHECK((cfg["pp"].get<int>() > 1 || cfg["tp"].get<int>() > 1));  // the case this test is about
}

TEST_CASE("cli: a plan that does not fit never reads peak reserved below peak allocated", "[cli]") {
  // The replay stops at the request that fails: Mistral-7B, mbs 2, full checkpointing on one H100 read
  // "peak allocated 110.05 GiB, peak reserved 109.43 GiB".
  const auto r = run_cli({"estimate", "Mistral-7B-v0.1", "--gpu", "h100", "--ac", "full", "--mbs", "2", "--format", "json"});
  REQUIRE(r.code == 0);
  const auto j = nlohmann::json::parse(r.out);
  CHECK_FALSE(j["fits"].get<bool>());
  CHECK(j["memory"]["peak_reserved_bytes"].get<double>() >= j["memory"]["peak_allocated_bytes"].get<double>());
}



TEST_CASE("cli: without sequence parallel the norms and residual adds run on the whole sequence on every TP rank", "[cli]") {
  // --no-sequence-parallel left the memory-bound time as it is with sequence parallel (0.0495 s either way, Llama 3 8B,
  // TP 8 on p5), though its help says the norms then run on the whole sequence on every rank.
  auto mb = [](bool sp) {
    std::vector<std::string> a{"estimate", "Llama-3.1-8B", "--instance", "ml.p5.48xlarge", "--stack", "megatron", "--sharding", "none",
                               "--ac", "full", "--tp", "8", "--format", "json"};
    if (!sp) a.emplace_back("--no-sequence-parallel");
    const auto r = run_cli(a);
    REQUIRE(r.code == 0);
    return nlohmann::json::parse(r.out)["throughput"]["memory_bound_s"].get<double>();
  };
  const double with_sp = mb(true), without = mb(false);
  CHECK(without > 1.2 * with_sp);
  CHECK(without < 8 * with_sp);  // the q-, k-, v- and MLP-width terms stay split over the ranks
}

TEST_CASE("cli: --moe-a2a-overlap is refused where Megatron-Core refuses it", "[cli][moe]") {
  // It was accepted on a dense model and at ep 1, printed "MoE all-to-all overlap" in the config line and did nothing.
  // Megatron-Core asserts ep > 1, no full recomputation and, with pp > 1, a virtual pipeline (transformer_config.py).
  const auto dense = run_cli({"estimate", "Llama-3.1-8B", "--gpu", "h100", "--gpus", "8", "--moe-a2a-overlap"});
  CHECK(dense.code == 2);
  CHECK(lines(dense.err) == 1);
  CHECK_THAT(dense.err, Catch::Contains("--moe-a2a-overlap: ") && Catch::Contains("got ep 1"));
  const auto full = run_cli({"estimate", "Qwen3-30B-A3B", "--gpu", "h100", "--gpus", "8", "--ep", "8", "--grad-accum", "4",
                             "--ac", "full", "--moe-a2a-overlap"});
  CHECK(full.code == 2);
  CHECK_THAT(full.err, Catch::Contains("full recomputation") && Catch::Contains("activation_checkpointing full"));
  const auto pp = run_cli({"estimate", "Qwen3-30B-A3B", "--gpu", "h100", "--gpus", "8", "--ep", "4", "--pp", "2",
                           "--grad-accum", "4", "--stack", "megatron", "--sharding", "optimizer", "--moe-a2a-overlap"});
  CHECK(pp.code == 2);
  CHECK_THAT(pp.err, Catch::Contains("interleaved schedule"));
  // where Megatron runs it, it is accepted and hides the all-to-all behind the other micro-batches
  const auto ok = run_cli({"estimate", "Qwen3-30B-A3B", "--gpu", "h100", "--gpus", "8", "--ep", "8", "--grad-accum", "4",
                           "--moe-a2a-overlap", "--format", "json"});
  REQUIRE(ok.code == 0);
  CHECK(nlohmann::json::parse(ok.out)["config"]["moe_a2a_overlap"] == true);
  // recommend sets it only on the candidates Megatron would run with it
  const auto rec = run_cli({"recommend", "Qwen3-30B-A3B", "--instance", "ml.p5.48xlarge", "--moe-a2a-overlap", "--top", "20",
                            "--format", "json"});
  REQUIRE(rec.code == 0);
  const auto rec_json = nlohmann::json::parse(rec.out);  // a named object: the plans of a temporary would dangle
  for (const auto& pl : rec_json["plans"]) {
    const auto& c = pl["config"];
    const bool allowed = c["ep"].get<int>() > 1 && c["activation_checkpointing"] != "full" &&
                         (c["pp"].get<int>() == 1 || c["pp_schedule"] == "interleaved");
    CHECK(c["moe_a2a_overlap"] == allowed);
  }
}

TEST_CASE("cli: a bare GPU is one node of its interconnect in recommend as in estimate", "[cli]") {
  // recommend --gpu h100 --nodes 16 laid the GPUs out one per node (gpus_per_node 1 in its JSON, no tensor parallelism
  // searched: "must stay within a node of 1 GPUs") while estimate --gpu h100 --gpus 16 puts them on one node of 16.
  const auto rec = run_cli({"recommend", "Llama-3.1-8B", "--gpu", "h100", "--nodes", "16", "--top", "1", "--format", "json"});
  REQUIRE(rec.code == 0);
  const auto c = nlohmann::json::parse(rec.out)["plans"][0]["config"];
  CHECK(c["world_size"] == 16);
  CHECK(c["gpus_per_node"] == 16);
  const auto est = run_cli({"estimate", "Llama-3.1-8B", "--gpu", "h100", "--gpus", "16"});
  REQUIRE(est.code == 0);
  CHECK_THAT(est.out, Catch::Contains("16 x h100 (one node on NVLink, no network"));
  CHECK_THAT(run_cli({"estimate", "Llama-3.1-8B", "--gpu", "l40s", "--gpus", "2"}).out, Catch::Contains("one node on PCIe"));
}

TEST_CASE("bug: recommend --emit sagemaker names the refusal of a pinned setting the trainer cannot run", "[cli][sagemaker]") {
  // found by a helper's sweep: --stack torchtitan (or torchtune, megatron, --offload optimizer) with --emit sagemaker
  // said "no configuration of Llama-3.2-1B fits ... nothing emitted" (exit 1) where 4,017 plans fit
  for (const auto& [flags, id] : std::vector<std::pair<std::vector<std::string>, std::string>>{
           {{"--stack", "torchtitan"}, "T-stack"}, {{"--stack", "megatron"}, "T-stack"}, {{"--offload", "optimizer"}, "T-offload-optimizer"}}) {
    std::vector<std::string> a{"recommend", "Llama-3.2-1B", "--instance", "ml.p5.48xlarge", "--emit", "sagemaker"};
    a.insert(a.end(), flags.begin(), flags.end());
    const auto r = run_cli(a);
    INFO(flags.back());
    CHECK(r.code == 2);
    CHECK_THAT(r.err, Catch::Contains(id));
  }
  // --offload auto keeps the sets the trainer runs
  const auto ok = run_cli({"recommend", "Llama-3.2-1B", "--instance", "ml.p5.48xlarge", "--offload", "auto", "--emit", "plan"});
  CHECK(ok.code == 0);
}

TEST_CASE("recommend: when plan #1 is a layout the reference trainer refuses, the table says what --emit launches", "[cli][sagemaker]") {
  // plan #1 of Llama-3.1-8B on p5en is the distributed optimizer (T-zero1); --emit sagemaker picks the best plan the
  // trainer runs, which the table did not say
  const auto r = run_cli({"recommend", "Llama-3.1-8B", "--instance", "ml.p5en.48xlarge", "--top", "5"});
  REQUIRE(r.code == 0);
  const auto j = nlohmann::json::parse(run_cli({"recommend", "Llama-3.1-8B", "--instance", "ml.p5en.48xlarge", "--top", "5", "--format", "json"}).out);
  const auto& plans = j["plans"];
  REQUIRE(plans.size() == 5);
  const bool first_runs = plans[0]["reference_trainer"]["runs"].get<bool>();
  for (const auto& p : plans) CHECK(p["reference_trainer"]["runs"].get<bool>() == p["reference_trainer"]["refusals"].empty());
  if (!first_runs) {
    CHECK_THAT(r.out, Catch::Contains("launch: plan #1 is not one the reference trainer runs"));
    CHECK(j.contains("launch"));
    // the row it names is the first that runs, and --emit plan-for-SageMaker launches that plan
    std::size_t first = 0;
    while (first < plans.size() && !plans[first]["reference_trainer"]["runs"].get<bool>()) ++first;
    if (first < plans.size()) CHECK_THAT(r.out, Catch::Contains(fmt::format("#{}", first + 1)));
  } else {
    CHECK_THAT(r.out, !Catch::Contains("launch:"));
  }
  // a MoE model: the trainer refuses the model
  const auto moe = nlohmann::json::parse(run_cli({"recommend", "Qwen3-30B-A3B", "--instance", "ml.p5en.48xlarge", "--top", "1", "--format", "json"}).out);
  CHECK_FALSE(moe["plans"][0]["reference_trainer"]["runs"].get<bool>());
  CHECK_THAT(moe["launch"].get<std::string>(), Catch::Contains("T-model"));
}

TEST_CASE("bug: report --plan keeps the plan file's headroom", "[cli][report]") {
  // found by a helper's sweep: a plan with "headroom": 0.7 was reported "fits, 58.0% free (limit 4% free)" while
  // check said BWP002 "under the 70.0% headroom"
  nlohmann::json p = nlohmann::json::parse(std::ifstream(std::string(BWPLAN_SOURCE_DIR) + "/configs/examples/llama-3.1-8b-p6-b200.json"));
  p["headroom"] = 0.7;
  const auto f = std::filesystem::temp_directory_path() / "bwplan_report_headroom.json";
  std::ofstream(f) << p.dump(2);
  const auto r = run_cli({"report", "--plan", f.string(), "--top", "1", "-o", "-"});
  INFO(r.err);
  REQUIRE(r.code == 0);
  CHECK_THAT(r.out, Catch::Contains("--headroom 0.7") && !Catch::Contains("limit 4% free"));
}

TEST_CASE("bug: what the trainer refuses in a plan file, and a plan's model directory, name the plan file's member", "[cli][sagemaker]") {
  // found by a helper's sweep: `sagemaker --plan lc.json` said "--loss: loss chunked, tp 2: ..." (a flag nobody gave);
  // "model": "/tmp" said "/tmp: is a directory without a config.json" without the plan file
  const auto dir = std::filesystem::temp_directory_path();
  const auto lc = dir / "bwplan_plan_loss_tp.json";
  REQUIRE(run_cli({"estimate", "Llama-3.2-1B", "--instance", "ml.p5.48xlarge", "--loss", "chunked", "--tp", "2", "--emit", "plan", "-o",
                   lc.string()}).code == 0);
  const auto r = run_cli({"sagemaker", "--plan", lc.string()});
  CHECK(r.code == 2);
  CHECK_THAT(r.err, Catch::Contains(lc.filename().string()) && Catch::Contains("/loss") && !Catch::Contains("--loss"));
  nlohmann::json p = nlohmann::json::parse(std::ifstream(lc));
  p["model"] = dir.string();
  p["loss"] = "standard";
  const auto md = dir / "bwplan_plan_model_dir.json";
  std::ofstream(md) << p.dump(2);
  const auto m = run_cli({"estimate", "--plan", md.string()});
  CHECK(m.code == 2);
  CHECK_THAT(m.err, Catch::Contains(md.filename().string()) && Catch::Contains("/model") && Catch::Contains("is a directory without a config.json"));
}

TEST_CASE("bug: the node comparison prints whole percents without -0% or a reason for 100%", "[cli][fleet]") {
  // found by a helper's sweep: "a second node buys +100% tokens/s (100% scaling efficiency) at -0% cost per token
  // (above 100% because the memory that sharding frees lets the plan change: ...)" for a scaling of 100.2 %
  const auto r = run_cli({"recommend", "Qwen2.5-14B", "--instance", "ml.p5en.48xlarge", "--seq", "32768", "--nodes", "auto", "--max-nodes", "4"});
  REQUIRE(r.code == 0);
  CHECK_THAT(r.out, Catch::Contains("a second node buys") && !Catch::Contains("-0%") &&
                        !Catch::Contains("100% scaling efficiency) at +0% cost per token (above 100%"));
}
