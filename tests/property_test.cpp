// Property (issue 17): no output of any command holds NaN, inf, or a negative time, size or price. Every JSON
// output of estimate, recommend (one instance and a fleet), sweep and check over a spread of plans is walked
// number by number; the text outputs are scanned for "nan" and "inf".
#include "test_util.hpp"

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include <cmath>
#include <filesystem>
#include <regex>
#include <string>
#include <vector>

using namespace bwplan;
using test::run_cli;
namespace fs = std::filesystem;

namespace {

/// Keys whose values are times, sizes, prices or rates: never negative.
bool nonnegative_key(const std::string& k) {
  for (const char* suffix : {"_s", "_bytes", "_gib", "_usd", "usd", "_per_s", "_per_gpu", "seconds", "hours", "tokens", "price",
                             "capacity", "mfu", "_flops_per_step", "world_size", "evaluated", "fitting"})
    if (k.size() >= std::string(suffix).size() && k.compare(k.size() - std::string(suffix).size(), std::string::npos, suffix) == 0)
      return true;
  return false;
}

void walk(const nlohmann::json& j, const std::string& path, std::vector<std::string>& bad) {
  if (j.is_object()) {
    for (auto it = j.begin(); it != j.end(); ++it) {
      const std::string p = path + "/" + it.key();
      if (it.value().is_number_float() || it.value().is_number_integer()) {
        const double v = it.value().get<double>();
        if (!std::isfinite(v)) bad.push_back(p + " = " + it.value().dump());
        else if (v < 0 && nonnegative_key(it.key()) && it.key() != "headroom") bad.push_back(p + " = " + it.value().dump());
      } else {
        walk(it.value(), p, bad);
      }
    }
  } else if (j.is_array()) {
    for (std::size_t i = 0; i < j.size(); ++i) {
      if (j[i].is_number() && !std::isfinite(j[i].get<double>())) bad.push_back(path + "/" + std::to_string(i));
      else walk(j[i], path + "/" + std::to_string(i), bad);
    }
  }
}

void check_json_output(const std::vector<std::string>& args) {
  const auto r = run_cli(args);
  std::string cmd;
  for (const auto& a : args) cmd += a + " ";
  INFO(cmd << "\n" << r.err);
  REQUIRE(r.code != 2);
  // nlohmann writes NaN and inf as null: a null number is as bad, so look for them in the text too
  CHECK_THAT(r.out, !Catch::Contains("nan") && !Catch::Contains(": null,"));
  std::vector<std::string> bad;
  walk(nlohmann::json::parse(r.out), "", bad);
  for (const auto& b : bad) FAIL_CHECK(b);
}

void check_text_output(const std::vector<std::string>& args) {
  const auto r = run_cli(args);
  std::string cmd;
  for (const auto& a : args) cmd += a + " ";
  INFO(cmd << "\n" << r.err);
  REQUIRE(r.code != 2);
  static const std::regex non_finite(R"((^|[^a-z])(nan|inf)([^a-z]|$))", std::regex::icase);
  CHECK_FALSE(std::regex_search(r.out, non_finite));
  CHECK_THAT(r.out, !Catch::Contains("$-") && !Catch::Contains("-$"));
}

}  // namespace

TEST_CASE("property: estimate outputs hold no NaN, inf or negative time, size or price", "[property]") {
  const std::string moe = (fs::path(BWPLAN_SOURCE_DIR) / "tests" / "data" / "qwen3-30b-a3b.json").string();
  const std::vector<std::vector<std::string>> plans{
      {"Llama-3.2-1B", "--gpu", "h200", "--mbs", "1", "--seq", "1"},
      {"Llama-3.1-8B", "--instance", "ml.p5.48xlarge", "--gpus", "4", "--tokens", "1T"},
      {"Llama-3.1-70B", "--gpu", "h100", "--mbs", "64", "--seq", "131072", "--sharding", "none", "--tokens", "1B"},
      {"Llama-3.1-405B", "--instance", "ml.p6-b200.48xlarge", "--nodes", "16", "--tp", "8", "--cp", "4", "--precision", "nvfp4",
       "--ac", "full", "--tokens", "10T"},
      {moe, "--instance", "ml.p6-b200.48xlarge", "--nodes", "2", "--ep", "16", "--precision", "mxfp8", "--ac", "selective-op"},
      // QLoRA on the MoE model with expert parallelism and no sharding (its device peak was negative)
      {moe, "--instance", "ml.p6-b200.48xlarge", "--nodes", "2", "--ep", "8", "--finetune", "qlora", "--sharding", "none",
       "--master", "bf16", "--offload", "optimizer"},
      {"Llama-3.1-8B", "--instance", "ml.p5en.48xlarge", "--nodes", "4", "--sharding", "hybrid", "--grad-accum", "64", "--loss",
       "chunked", "--master", "bf16", "--optimizer-impl", "foreach"},
      {"Qwen3-32B", "--instance", "ml.p6-b200.48xlarge", "--precision", "fp8", "--fp8-all-gather", "--ac", "every-3"}};
  for (const auto& p : plans) {
    std::vector<std::string> j{"estimate"};
    j.insert(j.end(), p.begin(), p.end());
    std::vector<std::string> t = j;
    j.insert(j.end(), {"--format", "json"});
    check_json_output(j);
    check_text_output(t);
    t.insert(t.end(), {"--format", "markdown"});
    check_text_output(t);
  }
}

TEST_CASE("property: recommend, sweep and check outputs hold no NaN, inf or negative numbers", "[property]") {
  check_json_output({"recommend", "Llama-3.1-70B", "--instance", "ml.p6-b200.48xlarge", "--top", "5", "--format", "json"});
  check_json_output({"recommend", "Llama-3.1-8B", "--instance", "ml.p5en.48xlarge,ml.p6-b200.48xlarge", "--nodes", "auto",
                     "--max-nodes", "4", "--tokens", "100B", "--objective", "cost", "--format", "json"});
  check_text_output({"recommend", "Llama-3.1-8B", "--instance", "ml.p5en.48xlarge,ml.p6-b200.48xlarge", "--nodes", "auto",
                     "--max-nodes", "4", "--tokens", "100B"});
  check_text_output({"recommend", "Qwen2.5-7B", "--seq", "auto", "--top", "3"});
  check_json_output({"sweep", "Llama-3.1-8B", "--vary", "mbs=1..64:x2", "--vary", "precision=bf16,fp8,nvfp4", "--vary",
                     "ac=none,selective-op", "--format", "json"});
  check_json_output({"check", "--format", "json", (fs::path(BWPLAN_SOURCE_DIR) / "configs" / "examples" / "llama-3.1-70b-one-h100.json").string(),
                     (fs::path(BWPLAN_SOURCE_DIR) / "configs" / "examples" / "llama-3.1-8b-p6-b200.json").string()});
}
