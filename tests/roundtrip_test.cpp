// The plan round trip (issue 11, must show 1): over a generated grid of plans covering every precision,
// checkpointing mode, sharding mode (the distributed optimizer included), tp, cp, ep (a MoE model), pp with
// both schedules (issue 13), master weights, loss and optimizer, CPU offload (issue 14), every
// path a plan takes through the tool gives the same peak reserved memory and tokens/s:
//   estimate with flags  ==  estimate --emit plan → estimate --plan  ==  check on that file
//   ==  the report's reproduce line  ==  the sweep row of the same point.
#include "report.hpp"
#include "test_util.hpp"

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include <filesystem>
#include <fstream>
#include <iostream>
#include <set>
#include <sstream>

using namespace bwplan;
using test::run_cli;
namespace fs = std::filesystem;

namespace {

struct grid_plan {
  std::vector<std::string> args;  ///< estimate arguments after the subcommand
  std::string label;
};

std::string moe_config() { return (fs::path(BWPLAN_SOURCE_DIR) / "tests" / "data" / "qwen3-30b-a3b.json").string(); }

/// A deterministic grid: every value of every dimension appears, combined by a fixed stride so that
/// neighbouring plans differ in several settings at once. Only legal plans are kept (the rules are the tool's).
std::vector<grid_plan> make_grid() {
  const std::vector<std::string> precisions{"bf16", "fp8", "fp8-rowwise", "mxfp8", "nvfp4"};
  const std::vector<std::string> acs{"none", "full", "every-2", "every-3", "selective-op", "selective-attn"};
  const std::vector<std::string> shardings{"none", "full", "hybrid", "grad-op", "optimizer"};
  const std::vector<int> pps{1, 1, 2, 4};  // half the plans without pipeline parallelism
  const std::vector<int> tps{1, 2, 4};
  const std::vector<int> cps{1, 2};
  const std::vector<std::string> masters{"fp32", "bf16"};
  const std::vector<std::string> losses{"standard", "chunked", "liger"};
  const std::vector<std::string> optims{"fused", "foreach"};
  const std::vector<int> mbss{1, 2, 4};
  const std::vector<int> nodes{1, 2};
  std::vector<grid_plan> out;
  for (int i = 0; out.size() < 330 && i < 5000; ++i) {
    const bool moe = i % 4 == 3;
    const std::string prec = precisions[static_cast<std::size_t>(i) % precisions.size()];
    const std::string ac = acs[static_cast<std::size_t>(i / 5) % acs.size()];
    const std::string shard = shardings[static_cast<std::size_t>(i / 3) % shardings.size()];
    const int tp = tps[static_cast<std::size_t>(i / 7) % tps.size()];
    const int cp = cps[static_cast<std::size_t>(i / 2) % cps.size()];
    const int ep = moe ? (i % 8 == 3 ? 1 : 2) : 1;
    const std::string master = masters[static_cast<std::size_t>(i / 11) % 2];
    const std::string loss = losses[static_cast<std::size_t>(i / 13) % losses.size()];
    const std::string opt = optims[static_cast<std::size_t>(i / 17) % 2];
    const int mbs = mbss[static_cast<std::size_t>(i / 19) % mbss.size()];
    const int n = nodes[static_cast<std::size_t>(i / 23) % nodes.size()];
    const int pp = pps[static_cast<std::size_t>(i / 29) % pps.size()];
    const bool interleaved = pp > 1 && i % 2 == 0;  // interleaved: micro-batches in groups of pp
    const std::string accum = std::to_string(interleaved ? pp * (1 + i % 2) : 1 + i % 3);
    std::vector<std::string> a{moe ? moe_config() : std::string(i % 2 ? "Llama-3.2-1B" : "Llama-3.1-8B"),
                               "--instance", "ml.p6-b200.48xlarge", "--nodes", std::to_string(n), "--mbs", std::to_string(mbs),
                               "--seq", i % 3 ? "4096" : "2048", "--grad-accum", accum, "--precision", prec,
                               "--ac", ac, "--sharding", shard, "--tp", std::to_string(tp), "--cp", std::to_string(cp),
                               "--ep", std::to_string(ep), "--master", master, "--loss", loss, "--optimizer-impl", opt};
    if (pp > 1) a.insert(a.end(), {"--pp", std::to_string(pp), "--pp-schedule", interleaved ? "interleaved" : "1f1b", "--vpp", interleaved ? "2" : "1"});
    if (prec == "fp8" && shard == "full" && i % 2 == 0) a.emplace_back("--fp8-all-gather");
    if (prec != "bf16" && i % 5 == 1) { a.emplace_back("--bf16-layers"); a.emplace_back(i % 2 ? "first:1,last:2" : "0.25"); }
    if (shard == "hybrid" && n == 2 && i % 2 == 0) { a.emplace_back("--shard-group"); a.emplace_back(std::to_string(8 / tp)); }
    // the training stack, torch.compile and the allocator setting (the stacks' own rules keep the legal ones)
    const char* stacks[] = {"hf", "torchtitan", "torchtune", "megatron"};
    const std::string stack = stacks[static_cast<std::size_t>(i / 29) % 4];
    if (stack != "hf" || i % 31 == 5) { a.emplace_back("--stack"); a.emplace_back(stack); }
    if (i % 7 == 2) a.emplace_back("--compile");
    if (i % 9 == 4) a.emplace_back("--expandable-segments");
    // CPU offload (issue 14): every set, on the plans whose layout can run it (offload_violation keeps the legal ones)
    const char* offloads[] = {"optimizer", "optimizer,params", "optimizer,activations", "optimizer,params,activations", "activations"};
    if (i % 7 == 3) { a.emplace_back("--offload"); a.emplace_back(offloads[static_cast<std::size_t>(i / 7) % 5]); }
    // keep the legal ones: the tool's own rules decide
    std::vector<std::string> probe{"estimate"};
    probe.insert(probe.end(), a.begin(), a.end());
    probe.insert(probe.end(), {"--format", "json"});
    if (run_cli(probe).code != 0) continue;
    std::string label;
    for (const auto& x : a) label += x + " ";
    out.push_back({a, label});
  }
  return out;
}

struct numbers {
  double reserved = 0;
  double tokens_per_s = 0;
};

numbers from_estimate(const nlohmann::json& j) {
  return {j["memory"]["peak_reserved_bytes"].get<double>(), j["throughput"]["tokens_per_s"].get<double>()};
}

numbers estimate(std::vector<std::string> args) {
  args.insert(args.begin(), "estimate");
  args.insert(args.end(), {"--format", "json"});
  const auto r = run_cli(args);
  INFO(r.err);
  REQUIRE(r.code == 0);
  return from_estimate(nlohmann::json::parse(r.out));
}

/// Splits a command line the way a POSIX shell would for the quoting shell_quote writes.
std::vector<std::string> shell_split(const std::string& line) {
  std::vector<std::string> out;
  std::string cur;
  bool in_word = false, quoted = false;
  for (std::size_t i = 0; i < line.size(); ++i) {
    const char ch = line[i];
    if (quoted) {
      if (ch == '\'') quoted = false;
      else cur += ch;
    } else if (ch == '\'') {
      quoted = true;
      in_word = true;
    } else if (ch == '\\' && i + 1 < line.size()) {
      cur += line[++i];
      in_word = true;
    } else if (ch == ' ') {
      if (in_word) out.push_back(cur);
      cur.clear();
      in_word = false;
    } else {
      cur += ch;
      in_word = true;
    }
  }
  if (in_word) out.push_back(cur);
  return out;
}

}  // namespace

TEST_CASE("plan round trip: flags, plan file, check, report reproduce line and sweep row agree", "[plan][roundtrip]") {
  const auto grid = make_grid();
  REQUIRE(grid.size() >= 300);
  // coverage of the grid: every value of every dimension appears
  std::set<std::string> seen;
  for (const auto& g : grid)
    for (std::size_t i = 0; i + 1 < g.args.size(); ++i)
      if (g.args[i].rfind("--", 0) == 0) seen.insert(g.args[i] + "=" + g.args[i + 1]);
  for (const char* v : {"--precision=bf16", "--precision=fp8", "--precision=fp8-rowwise", "--precision=mxfp8", "--precision=nvfp4",
                        "--ac=none", "--ac=full", "--ac=every-2", "--ac=selective-op", "--ac=selective-attn", "--sharding=none",
                        "--sharding=full", "--sharding=hybrid", "--sharding=grad-op", "--sharding=optimizer", "--pp=2", "--pp=4",
                        "--pp-schedule=1f1b", "--pp-schedule=interleaved", "--vpp=2", "--tp=1", "--tp=2", "--tp=4", "--cp=1", "--cp=2",
                        "--ep=1", "--ep=2", "--master=fp32", "--master=bf16", "--loss=standard", "--loss=chunked", "--loss=liger",
                        "--optimizer-impl=fused", "--optimizer-impl=foreach", "--stack=torchtitan", "--stack=torchtune",
                        "--stack=megatron", "--offload=optimizer", "--offload=optimizer,params", "--offload=optimizer,activations"})
    CHECK(seen.count(v) == 1);

  const std::string dir = (fs::path(BWPLAN_TEST_OUTPUT_DIR) / "roundtrip").string();
  fs::create_directories(dir);
  int i = 0;
  for (const auto& g : grid) {
    INFO("plan " << i << ": " << g.label);
    // 1. estimate with flags
    const numbers flags = estimate(g.args);
    // 2. estimate --emit plan, then estimate --plan
    const std::string file = dir + "/plan-" + std::to_string(i++) + ".json";
    std::vector<std::string> emit{"estimate"};
    emit.insert(emit.end(), g.args.begin(), g.args.end());
    emit.insert(emit.end(), {"--emit", "plan", "-o", file});
    REQUIRE(run_cli(emit).code == 0);
    const numbers from_file = estimate({"--plan", file});
    CHECK(from_file.reserved == flags.reserved);
    CHECK(from_file.tokens_per_s == flags.tokens_per_s);
    // 3. check on that file
    const auto c = run_cli({"check", "--format", "json", file});
    INFO(c.out << c.err);
    REQUIRE(c.code != 2);
    const auto cj = nlohmann::json::parse(c.out);
    const numbers checked = from_estimate(cj["plans"][0]["estimate"]);
    CHECK(checked.reserved == flags.reserved);
    CHECK(checked.tokens_per_s == flags.tokens_per_s);
    // 4. the report's reproduce line: the estimate arguments between "report" and the report's own flags
    const plan_document d = io::load_plan(file);
    const hardware_catalog cat = cli::context{std::cout, std::cerr, {}, {}}.catalog();
    std::ostringstream so, se;
    const cli::context ctx{so, se, {}, {}};
    cli::plan_options po;
    po.plan_file = file;
    const cli::resolved_plan rp = cli::resolve_plan(ctx, cat, po);
    const auto words = shell_split(cli::report_command_line(rp.p, 0.05, 5, 4'194'304, 64, "r.html"));
    REQUIRE(words.size() > 3);
    CHECK(words[0] == "bwplan");
    CHECK(words[1] == "report");
    std::vector<std::string> repro;
    for (std::size_t k = 2; k < words.size() && words[k] != "--headroom"; ++k) repro.push_back(words[k]);
    const numbers reproduced = estimate(repro);
    CHECK(reproduced.reserved == flags.reserved);
    CHECK(reproduced.tokens_per_s == flags.tokens_per_s);
    // 5. the sweep row of the same point (one value on the mbs axis)
    std::vector<std::string> sweep{"sweep"};
    sweep.insert(sweep.end(), g.args.begin(), g.args.end());
    const auto mbs = std::find(g.args.begin(), g.args.end(), "--mbs");
    sweep.insert(sweep.end(), {"--vary", "mbs=" + *(mbs + 1), "--format", "json"});
    const auto s = run_cli(sweep);
    INFO(s.err);
    REQUIRE(s.code == 0);
    const auto pt = nlohmann::json::parse(s.out)["points"][0];
    CHECK(pt["peak_reserved_gib"].get<double>() * 1073741824.0 == Approx(flags.reserved).epsilon(1e-12));
    CHECK(pt["tokens_per_s"].get<double>() == flags.tokens_per_s);
    CHECK(pt["precision"] == *(std::find(g.args.begin(), g.args.end(), "--precision") + 1));
    CHECK(pt["ac"] == *(std::find(g.args.begin(), g.args.end(), "--ac") + 1));
    const auto off = std::find(g.args.begin(), g.args.end(), "--offload");
    CHECK(pt["offload"] == (off == g.args.end() ? std::string("none") : *(off + 1)));
  }
}

TEST_CASE("plan round trip: the real report's reproduce line gives the report's own numbers", "[plan][roundtrip][report]") {
  const std::string dir = (fs::path(BWPLAN_TEST_OUTPUT_DIR) / "roundtrip").string();
  fs::create_directories(dir);
  const std::vector<std::vector<std::string>> plans{
      {moe_config(), "--instance", "ml.p6-b200.48xlarge", "--nodes", "2", "--precision", "fp8", "--ep", "4", "--tp", "2",
       "--ac", "selective-op", "--bf16-layers", "last:2", "--sharding", "hybrid", "--shard-group", "4", "--seq", "4096"},
      {"Llama-3.1-8B", "--instance", "ml.p6-b200.48xlarge", "--ac", "selective-op", "--precision", "mxfp8", "--cp", "2"}};
  int i = 0;
  for (const auto& p : plans) {
    const std::string html = dir + "/report-" + std::to_string(i++) + ".html";
    std::vector<std::string> args{"report"};
    args.insert(args.end(), p.begin(), p.end());
    args.insert(args.end(), {"--sweep-max-mbs", "2", "-o", html});
    const auto r = run_cli(args);
    INFO(r.err);
    REQUIRE(r.code == 0);
    std::ifstream f(html);
    std::stringstream ss;
    ss << f.rdbuf();
    const std::string text = ss.str();
    const auto at = text.find("<code>bwplan report ");
    REQUIRE(at != std::string::npos);
    std::string line = text.substr(at + 6, text.find("</code>", at) - at - 6);
    for (auto [from, to] : {std::pair{"&#39;", "'"}, std::pair{"&quot;", "\""}, std::pair{"&lt;", "<"}, std::pair{"&gt;", ">"},
                            std::pair{"&amp;", "&"}})
      for (std::size_t k; (k = line.find(from)) != std::string::npos;) line.replace(k, std::string(from).size(), to);
    const auto words = shell_split(line);
    std::vector<std::string> repro;
    for (std::size_t k = 2; k < words.size() && words[k] != "--headroom"; ++k) repro.push_back(words[k]);
    const numbers a = estimate(std::vector<std::string>(p.begin(), p.end()));
    const numbers b = estimate(repro);
    CHECK(a.reserved == b.reserved);
    CHECK(a.tokens_per_s == b.tokens_per_s);
  }
}
