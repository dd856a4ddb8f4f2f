// Output formats: Markdown tables, terminal memory bars, the progress bar, sweeps, and golden files
// for the Markdown, CSV and plain-table outputs.
#include "cli.hpp"
#include "markdown.hpp"
#include "sweep.hpp"
#include "term.hpp"
#include "test_util.hpp"

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include <cstdlib>
#include <fstream>
#include <sstream>

using namespace bwplan;
using namespace bwplan::cli;
using test::run_cli;

namespace {

std::string read_file(const std::filesystem::path& p) {
  std::ifstream f(p, std::ios::binary);
  std::ostringstream s;
  s << f.rdbuf();
  return s.str();
}

/// Compares `actual` with tests/golden/`name`; with BWPLAN_UPDATE_GOLDEN=1 rewrites the file instead.
void check_golden(const std::string& name, const std::string& actual) {
  const std::filesystem::path path = std::filesystem::path(BWPLAN_GOLDEN_DIR) / name;
  if (const char* u = std::getenv("BWPLAN_UPDATE_GOLDEN"); u && *u && std::string(u) != "0") {
    std::ofstream(path, std::ios::binary) << actual;
    WARN("updated " << path.string());
    return;
  }
  INFO("golden file " << path.string() << " (regenerate with BWPLAN_UPDATE_GOLDEN=1 after an intended change)");
  REQUIRE(std::filesystem::exists(path));
  CHECK(actual == read_file(path));
}

int count(const std::string& s, const std::string& what) {
  int n = 0;
  for (std::size_t p = s.find(what); p != std::string::npos; p = s.find(what, p + what.size())) ++n;
  return n;
}

/// Segments with `context`, `params` and `acts` bytes (the rest zero).
std::vector<bytes> segs(double context, double params, double acts) {
  std::vector<bytes> v(mc_count);
  v[mc_context] = bytes::base(context);
  v[mc_parameters] = bytes::base(params);
  v[mc_activations] = bytes::base(acts);
  return v;
}

}  // namespace

TEST_CASE("output: token counts print with the suffixes --tokens reads, never in exponent form", "[output]") {
  CHECK(human_tokens(1e11) == "100B");
  CHECK(human_tokens(2.5e12) == "2.5T");
  CHECK(human_tokens(1e18) == "1000000T");
  CHECK(human_tokens(4194304) == "4.194M");
  CHECK(human_tokens(1234) == "1.234K");
  CHECK(human_tokens(512) == "512");
  for (double v : {1.0, 999.0, 1e3, 7.5e6, 1e9, 3.3e15, 1e18}) {
    const std::string s = human_tokens(v);
    CHECK(s.find('e') == std::string::npos);
    CHECK(parse_token_count(s, "t") == Approx(v).epsilon(5e-4));  // the printed count reads back within its 4 digits
  }
}

TEST_CASE("markdown: tables are aligned, escaped and padded", "[markdown]") {
  const std::string t = markdown_table({{"GPU"}, {"GiB", md_align::right}, {"note", md_align::center}},
                                       {{"h200", "139.78", "a|b"}, {"b200", "178.35"}});
  CHECK(t ==
        "| GPU  |    GiB | note |\n"
        "| :--- | -----: | :--: |\n"
        "| h200 | 139.78 | a\\|b |\n"
        "| b200 | 178.35 |      |\n");
  CHECK(md_escape("x\ny|z") == "x y\\|z");
}

TEST_CASE("term: memory bars in ASCII, Unicode and colour", "[term]") {
  const bytes cap = bytes::base(100);
  // 20 cells: context 10% → 2 cells, parameters 20% → 4, activations 30% → 6; headroom mark at cell 18.
  CHECK(memory_bar(segs(10, 20, 30), cap, 0.1, 20, {false, false}) == "[CCPPPPAAAAAA......|.]");
  CHECK(memory_bar(segs(10, 20, 30), cap, 0.1, 20, {true, false}) == "▕▙▙████▚▚▚▚▚▚······│·▏");
  const std::string coloured = memory_bar(segs(10, 20, 30), cap, 0.1, 20, {true, true});
  CHECK_THAT(coloured, Catch::Contains("\x1b[38;5;25m████\x1b[0m"));  // parameters in Okabe-Ito blue
  CHECK_THAT(coloured, Catch::Contains("\x1b[38;5;214m██████\x1b[0m"));  // activations in orange
  // over capacity: every cell filled and an overflow mark
  CHECK(memory_bar(segs(50, 50, 50), cap, 0.0, 10, {false, false}) == "[CCCCCPPPPP]>");
  // the legend lists non-empty segments with their glyphs and sizes
  std::vector<bytes> v(mc_count);
  v[mc_parameters] = 2 * gib;
  v[mc_optimizer] = bytes::base(0.5 * gib.raw());
  CHECK(memory_legend(v, {false, false}, "  ") == "  P parameters 2.00 GiB  O optimizer states 0.50 GiB\n");
}

TEST_CASE("term: Unicode and colour only on a terminal, --ascii and NO_COLOR turn them off", "[term]") {
  std::ostringstream s;
  CHECK_FALSE(is_terminal(s));
  CHECK_FALSE(style_for(s, false).unicode);
  CHECK_FALSE(style_for(s, false).colour);
  const char* old_nc = std::getenv("NO_COLOR");
  const std::string saved = old_nc ? old_nc : "";
  ::unsetenv("NO_COLOR");
  ::setenv("TERM", "xterm-256color", 1);
  CHECK(style_for_terminal(true, false).unicode);
  CHECK(style_for_terminal(true, false).colour);
  CHECK_FALSE(style_for_terminal(true, true).unicode);
  ::setenv("NO_COLOR", "1", 1);
  CHECK(style_for_terminal(true, false).unicode);
  CHECK_FALSE(style_for_terminal(true, false).colour);
  ::setenv("NO_COLOR", "", 1);  // empty: not set (no-color.org)
  CHECK(style_for_terminal(true, false).colour);
  if (old_nc) ::setenv("NO_COLOR", saved.c_str(), 1); else ::unsetenv("NO_COLOR");
}

TEST_CASE("term: the progress bar stays silent before its delay and erases itself", "[term]") {
  std::ostringstream quiet;
  {
    progress_bar b(quiet, "search", 100, true, std::chrono::milliseconds(60000));
    b.update(50);
    CHECK_FALSE(b.shown());
  }
  CHECK(quiet.str().empty());
  std::ostringstream off;
  {
    progress_bar b(off, "search", 100, false, std::chrono::milliseconds(0));
    b.update(50);
  }
  CHECK(off.str().empty());
  std::ostringstream on;
  progress_bar b(on, "search", 200, true, std::chrono::milliseconds(0), false);
  b.update(100);
  CHECK(b.shown());
  CHECK(on.str() == "\rsearch ###############...............  50% (100/200)");
  b.finish();
  CHECK(on.str().substr(on.str().size() - 1) == "\r");
  CHECK_THAT(on.str(), Catch::EndsWith(std::string(52, ' ') + "\r"));
}

TEST_CASE("sweep: --vary specs expand ranges, lists and steps", "[sweep]") {
  CHECK(parse_vary("mbs=1..64").values.size() == 64);
  CHECK(parse_vary("mbs=1..64:x2").values == std::vector<std::string>{"1", "2", "4", "8", "16", "32", "64"});
  CHECK(parse_vary("seq=2048,4096,8192").values == std::vector<std::string>{"2048", "4096", "8192"});
  CHECK(parse_vary("mbs=2..10:4,32").values == std::vector<std::string>{"2", "6", "10", "32"});
  CHECK(parse_vary("ac=none,full,2,0").values == std::vector<std::string>{"none", "full", "every-2", "none"});
  CHECK(parse_vary("seq_len=1024").key == "seq");
  for (const char* bad : {"mbs", "=4", "foo=1", "mbs=", "mbs=4..1", "mbs=1..8:x1", "mbs=1..8:0", "mbs=a", "mbs=1,,2",
                          "sharding=zero3", "ac=-1", "mbs=1..1000000"}) {
    INFO(bad);
    CHECK_THROWS_AS(parse_vary(bad), invalid_request);
  }
  CHECK_THROWS_WITH(parse_vary("mbz=1"), Catch::Contains("did you mean 'mbs'"));
}

TEST_CASE("sweep: the CLI evaluates the grid, last --vary fastest, and rejects bad specs with exit 2", "[sweep][cli]") {
  const auto r = run_cli({"sweep", "Llama-3.1-8B", "--instance", "ml.p6-b200.48xlarge", "--vary", "mbs=1..64:x2", "--vary",
                          "seq=2048,4096,8192", "--format", "json"});
  REQUIRE(r.code == 0);
  const auto j = nlohmann::json::parse(r.out);
  REQUIRE(j["points"].size() == 21);
  CHECK(j["points"][0]["mbs"] == 1);
  CHECK(j["points"][0]["seq"] == 2048);
  CHECK(j["points"][1]["seq"] == 4096);
  CHECK(j["points"][3]["mbs"] == 2);
  CHECK(j["points"][20]["mbs"] == 64);
  CHECK(j["points"][20]["seq"] == 8192);
  // memory grows with the tokens per micro-batch; the largest point does not fit on a B200
  CHECK(j["points"][1]["device_peak_gib"].get<double>() > j["points"][0]["device_peak_gib"].get<double>());
  CHECK(j["points"][20]["fits"] == false);
  CHECK(j["points"][0]["fits"] == true);
  CHECK(j["points"][0]["world_size"] == 8);
  // the same point through estimate
  const auto e = run_cli({"estimate", "Llama-3.1-8B", "--instance", "ml.p6-b200.48xlarge", "--mbs", "2", "--seq", "4096",
                          "--format", "json"});
  REQUIRE(e.code == 0);
  const auto ej = nlohmann::json::parse(e.out);
  CHECK(j["points"][4]["device_peak_gib"].get<double>() * 1073741824.0 ==
        Approx(ej["memory"]["device_peak_bytes"].get<double>()));
  CHECK(j["points"][4]["tokens_per_s"].get<double>() == Approx(ej["throughput"]["tokens_per_s"].get<double>()));

  for (const char* bad : {"mbs=0..4", "mbs=x", "bogus=1", "mbs=4..2"}) {
    INFO(bad);
    const auto b = run_cli({"sweep", "Llama-3.2-1B", "--vary", bad});
    CHECK(b.code == 2);
    CHECK(std::count(b.err.begin(), b.err.end(), '\n') == 1);
    CHECK_THAT(b.err, Catch::StartsWith("bwplan: error: "));
  }
  const auto twice = run_cli({"sweep", "Llama-3.2-1B", "--vary", "mbs=1,2", "--vary", "mbs=4"});
  CHECK(twice.code == 2);
  CHECK_THAT(twice.err, Catch::Contains("given twice"));
  const auto none = run_cli({"sweep", "Llama-3.2-1B"});
  CHECK(none.code == 2);
  CHECK_THAT(none.err, Catch::Contains("--vary"));
}

TEST_CASE("planner: the progress callback counts every evaluated configuration", "[planner]") {
  const hardware_catalog cat = [] {
    std::ostringstream o, e;
    context ctx{o, e, {}, {}};
    return ctx.catalog();
  }();
  std::ostringstream o, e;
  context ctx{o, e, {}, {}};
  const model_spec m = ctx.model("Llama-3.1-8B");
  const auto& inst = cat.instance("ml.p6-b200.48xlarge");
  plan_request req;
  req.seq_lens = {2048, 8192};
  std::int64_t calls = 0, last = 0, total = 0;
  req.progress = [&](std::int64_t done, std::int64_t t) { ++calls; last = done; total = t; };
  const auto r = search_plans(m, cat.gpu(inst.gpu), &inst, req, 5);
  CHECK(calls == r.evaluated);
  CHECK(last == r.evaluated);
  CHECK(total == r.evaluated);
  CHECK(plan_search_size(req, 8) == r.evaluated);
}

TEST_CASE("golden: estimate and recommend --format markdown", "[golden][markdown]") {
  const auto e = run_cli({"estimate", "Llama-3.1-8B", "--instance", "ml.p6-b200.48xlarge", "--mbs", "2", "--seq", "4096", "--ac",
                          "full", "--format", "markdown"});
  REQUIRE(e.code == 0);
  check_golden("estimate_llama-3.1-8b_p6-b200.md", e.out);
  const auto r = run_cli({"recommend", "Llama-3.1-8B", "--instance", "ml.p6-b200.48xlarge", "--format", "markdown"});
  REQUIRE(r.code == 0);
  check_golden("recommend_llama-3.1-8b_p6-b200.md", r.out);
  const auto big = run_cli({"estimate", "Llama-3.1-70B", "--gpu", "h100", "--gpus", "1", "--format", "markdown"});
  REQUIRE(big.code == 0);
  check_golden("estimate_llama-3.1-70b_h100_nofit.md", big.out);
}

TEST_CASE("golden: sweep --format csv", "[golden][sweep]") {
  const auto r = run_cli({"sweep", "Llama-3.1-8B", "--instance", "ml.p6-b200.48xlarge", "--vary", "mbs=1..8:x2", "--vary",
                          "seq=2048,4096", "--vary", "ac=none,full", "--format", "csv"});
  REQUIRE(r.code == 0);
  CHECK(count(r.out, "\n") == 1 + 4 * 2 * 2);
  check_golden("sweep_llama-3.1-8b_p6-b200.csv", r.out);
}

TEST_CASE("golden: estimate and recommend tables with the ASCII memory bar (stdout not a terminal)", "[golden][term]") {
  const auto e = run_cli({"estimate", "Llama-3.1-8B", "--instance", "ml.p6-b200.48xlarge", "--mbs", "2", "--seq", "4096", "--ac",
                          "full"});
  REQUIRE(e.code == 0);
  CHECK(e.out.find("\x1b[") == std::string::npos);  // no colour off a terminal
  check_golden("estimate_llama-3.1-8b_p6-b200.txt", e.out);
  const auto r = run_cli({"recommend", "Llama-3.1-8B", "--instance", "ml.p6-b200.48xlarge", "--top", "3"});
  REQUIRE(r.code == 0);
  check_golden("recommend_llama-3.1-8b_p6-b200.txt", r.out);
}
