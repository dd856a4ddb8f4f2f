// Calibration bounds of the core issue: bwplan estimate against the measured H200 runs in
// ../shared/groundtruth/h200-calibration.jsonl (the same flag mapping as shared/tools/accuracy.py).
#include "test_util.hpp"

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <iterator>

using namespace bwplan;

namespace {

std::vector<std::string> flags_for(const nlohmann::json& r) {
  std::vector<std::string> f{"--gpu", "h200", "--gpus", "1", "--mbs", std::to_string(r.at("mbs").get<int>()), "--seq",
                             std::to_string(r.at("seq").get<int>())};
  const std::string recipe = r.at("recipe");
  if (recipe == "amp") f.insert(f.end(), {"--sharding", "none", "--master", "fp32"});
  if (recipe == "fsdp2") f.insert(f.end(), {"--sharding", "full", "--master", "fp32"});
  if (recipe == "bf16") f.insert(f.end(), {"--sharding", "none", "--master", "bf16"});
  const std::string ac = r.at("ac");
  if (ac == "none") f.insert(f.end(), {"--ac", "none"});
  if (ac == "full") f.insert(f.end(), {"--ac", "full"});
  if (ac == "half") f.insert(f.end(), {"--ac", "full", "--ac-every", "2"});
  if (r.value("optim", "") == "foreach") f.insert(f.end(), {"--optimizer-impl", "foreach"});
  return f;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const std::size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

}  // namespace

TEST_CASE("validation: H200 ground truth within the core issue's bounds", "[validation]") {
  if (!test::have_shared()) return;
  const auto gt = test::shared_dir() / "groundtruth";
  std::ifstream in(gt / "h200-calibration.jsonl");
  if (!in) FAIL("cannot read " << (gt / "h200-calibration.jsonl").string());
  std::vector<double> mem_err, tps_err, res_err;
  int rows = 0, oom_rows = 0;
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty()) continue;
    const auto r = nlohmann::json::parse(line);
    if (r.value("kind", "") == "env") continue;
    ++rows;
    std::vector<std::string> args{"estimate", (gt / "models" / (r.at("model").get<std::string>() + ".json")).string()};
    const auto f = flags_for(r);
    args.insert(args.end(), f.begin(), f.end());
    args.insert(args.end(), {"--format", "json"});
    const auto res = test::run_cli(args);
    INFO(line.substr(0, 120));
    INFO(res.err);
    REQUIRE(res.code == 0);
    const auto out = nlohmann::json::parse(res.out);
    if (!r.at("ok").get<bool>()) {
      ++oom_rows;
      CHECK(out.at("fits").get<bool>() == false);
      continue;
    }
    CHECK(out.at("fits").get<bool>() == true);
    const double est = out.at("memory").at("peak_allocated_bytes").get<double>();
    const double meas = r.at("peak_allocated").get<double>();
    mem_err.push_back(std::abs(est / meas - 1));
    const double res_est = out.at("memory").at("peak_reserved_bytes").get<double>();
    res_err.push_back(std::abs(res_est / r.at("peak_reserved").get<double>() - 1));
    CHECK(res_err.back() <= 0.06);  // issue 15, must-show 1: caching-allocator replay
    const double tps = out.at("throughput").at("tokens_per_s").get<double>();
    tps_err.push_back(std::abs(tps / r.at("tokens_per_s").get<double>() - 1));
    CHECK(std::abs(est / meas - 1) <= 0.10);
  }
  REQUIRE(rows == 29);
  REQUIRE(oom_rows == 2);
  REQUIRE(mem_err.size() == 27);
  const double med = median(mem_err), mx = *std::max_element(mem_err.begin(), mem_err.end());
  const double tmed = median(tps_err);
  const double rmed = median(res_err), rmx = *std::max_element(res_err.begin(), res_err.end());
  INFO("peak allocated: median " << med << ", max " << mx << "; peak reserved: median " << rmed << ", max " << rmx
                                 << "; tokens/s median " << tmed);
  CHECK(med <= 0.05);
  CHECK(mx <= 0.10);
  CHECK(rmed <= 0.02);  // issue 15, must-show 1
  CHECK(rmx <= 0.06);
  CHECK(tmed <= 0.15);
  // issue 13: the throughput terms that follow the shape must not make the H200 rows worse than the former model
  // (median 3.0 %, max 13.5 %, the impl=hf run); they give 2.7 % and 13.1 %
  const double tmx = *std::max_element(tps_err.begin(), tps_err.end());
  INFO("tokens/s: median " << tmed << ", max " << tmx);
  CHECK(tmed <= 0.030);
  CHECK(tmx <= 0.135);
}

TEST_CASE("validation: docs/validation.md is current", "[validation]") {
  if (!test::have_shared()) return;
  const auto runs = test::shared_dir() / "groundtruth" / "h200-calibration.jsonl";
  const auto r = test::run_cli({"validate", runs.string(), "--format", "markdown"});
  REQUIRE(r.code == 0);
  std::ifstream in(std::filesystem::path(BWPLAN_SOURCE_DIR) / "docs" / "validation.md");
  REQUIRE(in);
  const std::string doc((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  INFO("regenerate the part before the public-runs marker with: ./build/bwplan validate ../shared/groundtruth/h200-calibration.jsonl "
       "--format markdown (replace that part only: the rest of the file is tools/public_runs.py's and hand-kept)");
  // The generated part (validate's output), then the public-runs section (tools/public_runs.py, checked by the
  // public_runs_table test), then hand-kept sections (fine-tuning cases, tests/data/finetune-memory.json) after
  // the marker.
  const std::string marker = "<!-- hand-kept sections below: not generated by bwplan validate -->";
  CHECK(doc.substr(0, std::min(doc.size(), r.out.size())) == r.out);
  const std::string rest = doc.size() > r.out.size() ? doc.substr(r.out.size()) : std::string();
  CHECK((rest.empty() || rest.rfind("\n<!-- public-runs:begin", 0) == 0 || rest.rfind("\n" + marker, 0) == 0));
}
