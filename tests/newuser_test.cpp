// What a new user trips over (issue 17): the items outside input hardening, each with a test that failed on
// main before the fix: honest MFU, costs of plans that do not fit, super-linear scaling explained, --seq auto,
// the global batch (suffixes, rounding, headers), --train-tokens suffixes, estimate --nodes with --gpu, the
// hardware line of a partial instance, --emit after a fleet search, pinned recommend settings, ties, and the
// nvfp4 hint on GPUs without FP4.
#include "test_util.hpp"

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include <regex>
#include <string>

using namespace bwplan;
using test::run_cli;

TEST_CASE("new user: MFU against the format's peak beside the bf16-equivalent, each labelled", "[newuser]") {
  const auto j = run_cli({"estimate", "Llama-3.1-70B", "--instance", "ml.p6-b200.48xlarge", "--precision", "fp8", "--ac", "full",
                          "--format", "json"});
  REQUIRE(j.code == 0);
  const auto t = nlohmann::json::parse(j.out)["throughput"];
  CHECK(t["mfu_basis"] == "bf16 dense peak (bf16-equivalent)");
  CHECK(t["mfu_format_basis"] == "fp8 dense peak");
  CHECK(t["mfu_format_peak"].get<double>() == Approx(t["mfu"].get<double>() / 2).epsilon(1e-9));  // B200: fp8 = 2 x bf16
  CHECK(t["mfu_format_peak"].get<double>() < 1.0);
  const auto text = run_cli({"estimate", "Llama-3.1-70B", "--instance", "ml.p6-b200.48xlarge", "--precision", "fp8", "--ac", "full"});
  CHECK_THAT(text.out, Catch::Contains("of the bf16 peak") && Catch::Contains("of the fp8 peak"));
  const auto r = run_cli({"recommend", "Llama-3.1-8B"});
  CHECK_THAT(r.out, Catch::Contains("MFU(fmt)") && Catch::Contains("MFU(bf16)"));
}

TEST_CASE("new user: a plan that does not fit gets no unmarked time and cost", "[newuser]") {
  const auto r = run_cli({"estimate", "Llama-3.1-70B", "--instance", "ml.p6-b200.48xlarge", "--nodes", "2", "--sharding", "hybrid",
                          "--tp", "2", "--seq", "8192", "--tokens", "100B"});
  REQUIRE(r.code == 0);
  if (r.out.find("DOES NOT FIT") != std::string::npos) CHECK_THAT(r.out, Catch::Contains("NOT RUNNABLE"));
  const auto nf = run_cli({"estimate", "Llama-3.1-70B", "--gpu", "h100", "--tokens", "1B"});
  CHECK_THAT(nf.out, Catch::Contains("DOES NOT FIT") && Catch::Contains("NOT RUNNABLE"));
}

TEST_CASE("new user: --seq auto answers 'the longest sequence that keeps most of the best throughput'", "[newuser]") {
  const auto r = run_cli({"recommend", "Llama-3.1-70B", "--seq", "auto", "--format", "json", "--top", "20"});
  INFO(r.err);
  REQUIRE(r.code == 0);
  const auto j = nlohmann::json::parse(r.out);
  const auto& plans = j["plans"];
  REQUIRE(plans.size() >= 2);
  double fastest = 0;
  for (const auto& p : plans) fastest = std::max(fastest, p["throughput"]["tokens_per_s"].get<double>());
  const auto& first = plans[0];
  CHECK(first["config"]["seq_len"].get<int>() > 1024);  // not simply the shortest
  CHECK(first["throughput"]["tokens_per_s"].get<double>() >= 0.9 * fastest);
  for (const auto& p : plans)  // no longer length is within the tolerance
    if (p["config"]["seq_len"].get<int>() > first["config"]["seq_len"].get<int>())
      CHECK(p["throughput"]["tokens_per_s"].get<double>() < 0.9 * fastest);
  CHECK_THAT(j["explanation"].get<std::string>(), Catch::Contains("the longest whose tokens/s"));
}

TEST_CASE("new user: the global batch takes suffixes, is shown in the header and its rounding is said", "[newuser]") {
  const auto m = run_cli({"recommend", "Llama-3.1-8B", "--global-batch-tokens", "4M"});
  INFO(m.err);
  REQUIRE(m.code == 0);
  CHECK_THAT(m.out, Catch::Contains("global batch 4000000 tokens asked"));
  const auto r = run_cli({"recommend", "Llama-3.1-8B", "--global-batch-tokens", "1000000"});
  REQUIRE(r.code == 0);
  CHECK_THAT(r.out, Catch::Contains("global batch: plan #1 runs") && Catch::Contains("rounds up to whole micro-batches"));
  CHECK(run_cli({"recommend", "Llama-3.1-8B", "--global-batch-tokens", "9223372036854775807"}).code == 2);
  // --train-tokens takes the same suffixes as --tokens
  const auto s = run_cli({"sagemaker", "Llama-3.1-8B", "--instance", "ml.p5en.48xlarge", "--train-tokens", "10B"});
  INFO(s.err);
  CHECK(s.code == 0);
  CHECK_THAT(s.err, !Catch::Contains("Could not convert"));
}

TEST_CASE("new user: estimate honours --nodes with --gpu, and a partial instance reads right", "[newuser]") {
  const auto g = run_cli({"estimate", "Llama-3.1-8B", "--gpu", "b200", "--nodes", "2", "--format", "json"});
  REQUIRE(g.code == 0);
  CHECK(nlohmann::json::parse(g.out)["config"]["world_size"] == 2);
  const auto p = run_cli({"estimate", "Llama-3.1-8B", "--instance", "ml.p5.48xlarge", "--gpus", "4"});
  REQUIRE(p.code == 0);
  CHECK_THAT(p.out, Catch::Contains("4 x h100 (4 of the 8 GPUs of 1 x ml.p5.48xlarge)") && !Catch::Contains("(0 x"));
}

TEST_CASE("new user: --emit works after --nodes auto and --tokens (it emits the picked plan)", "[newuser]") {
  const auto r = run_cli({"recommend", "Llama-3.1-8B", "--instance", "ml.p5en.48xlarge", "--nodes", "auto", "--max-nodes", "2",
                          "--tokens", "10B", "--objective", "cost", "--emit", "plan"});
  INFO(r.err);
  REQUIRE(r.code == 0);
  const auto j = nlohmann::json::parse(r.out);
  CHECK(j["instance"] == "ml.p5en.48xlarge");
  CHECK(j["nodes"].get<int>() >= 1);
}

TEST_CASE("new user: recommend pins --mbs, --ac, --master and --precision", "[newuser]") {
  const auto r = run_cli({"recommend", "Llama-3.1-8B", "--mbs", "2", "--ac", "selective-op", "--master", "bf16", "--precision", "bf16",
                          "--format", "json", "--top", "3"});
  INFO(r.err);
  REQUIRE(r.code == 0);
  const auto doc = nlohmann::json::parse(r.out);  // named: a subobject of a temporary would dangle in the loop
  REQUIRE(!doc["plans"].empty());
  for (const auto& p : doc["plans"]) {
    CHECK(p["config"]["micro_batch_size"] == 2);
    CHECK(p["config"]["activation_checkpointing"] == "selective-op");
    CHECK(p["config"]["master_weights"] == "bf16");
    CHECK(p["config"]["precision"] == "bf16");
  }
}

TEST_CASE("new user: ties are said to be ties, nvfp4 is not suggested where it cannot run", "[newuser]") {
  const auto r = run_cli({"recommend", "Llama-3.1-8B"});
  REQUIRE(r.code == 0);
  CHECK_THAT(r.out, !Catch::Contains("why: 0.0% more tokens/s"));
  const auto h = run_cli({"recommend", "Llama-3.1-8B", "--instance", "ml.p5en.48xlarge"});
  REQUIRE(h.code == 0);
  CHECK_THAT(h.out, !Catch::Contains("nvfp4 needs --numerics aggressive"));
}

TEST_CASE("new user: scaling above 100% from 1 to 2 nodes is explained", "[newuser]") {
  const auto r = run_cli({"recommend", "Llama-3.1-70B", "--instance", "ml.p5en.48xlarge", "--nodes", "auto", "--max-nodes", "2"});
  INFO(r.err);
  REQUIRE(r.code != 2);
  const std::regex eff(R"(\(([0-9]+)% scaling efficiency\))");
  std::smatch mm;
  if (std::regex_search(r.out, mm, eff) && std::stoi(mm[1]) > 100) CHECK_THAT(r.out, Catch::Contains("above 100% because"));
}
