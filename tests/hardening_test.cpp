// Hostile and careless input (issue 17): bounded regular-file reads, JSON depth and gemma3 text_config,
// numbers checked where they enter from flags, write errors, "did you mean", completion, readable help,
// models by Hugging Face id and the presets of every shared config. Each test fails on the code before it.
#include "test_util.hpp"

#include <bwplan/io/file.hpp>
#include <bwplan/io/hf_cache.hpp>
#include <bwplan/io/json.hpp>

#include <catch2/catch.hpp>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <sys/stat.h>

#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <limits>
#include <streambuf>
#include <string>
#include <vector>

using namespace bwplan;
using test::run_cli;

namespace {

namespace fs = std::filesystem;

fs::path temp_path(const std::string& name) { return fs::temp_directory_path() / ("bwplan_hardening_" + name); }

std::string write_temp(const std::string& name, const std::string& text) {
  const auto p = temp_path(name);
  std::ofstream(p, std::ios::binary) << text;
  return p.string();
}

int lines(const std::string& s) { return static_cast<int>(std::count(s.begin(), s.end(), '\n')); }

/// One line on stderr, exit 2, naming `what`.
void check_usage_error(const test::cli_result& r, const std::string& what) {
  INFO("stderr: " << r.err);
  CHECK(r.code == 2);
  CHECK(lines(r.err) == 1);
  CHECK_THAT(r.err, Catch::Contains(what));
  CHECK_THAT(r.err, !Catch::Contains("internal"));
}

const char* llama_like = R"({"model_type": "llama", "hidden_size": 2048, "num_hidden_layers": 16, "num_attention_heads": 32,
  "num_key_value_heads": 8, "intermediate_size": 8192, "vocab_size": 128256, "tie_word_embeddings": true})";

/// Sets an environment variable for the life of the object, restoring the previous value.
class scoped_env {
 public:
  scoped_env(const char* name, const std::string& value) : name_(name) {
    if (const char* old = std::getenv(name)) old_ = old;
    ::setenv(name, value.c_str(), 1);
  }
  scoped_env(const scoped_env&) = delete;
  scoped_env& operator=(const scoped_env&) = delete;
  ~scoped_env() {
    if (old_) ::setenv(name_, old_->c_str(), 1);
    else ::unsetenv(name_);
  }

 private:
  const char* name_;
  std::optional<std::string> old_;
};

/// A stream buffer that fails every write, as a full device does.
struct full_device_buf : std::streambuf {
  int_type overflow(int_type) override { return traits_type::eof(); }
  std::streamsize xsputn(const char*, std::streamsize) override { return 0; }
};

}  // namespace

// ---- 1. reading files: regular files only, bounded, no NUL, never blocking

TEST_CASE("hardening: read_text_file refuses a directory, a device, a FIFO, an over-sized file and a NUL byte", "[hardening]") {
  SECTION("directory") {
    const auto d = temp_path("dir");
    fs::create_directories(d);
    CHECK_THROWS_WITH(io::read_text_file(d), Catch::Contains("is a directory"));
  }
  SECTION("/dev/zero is not read (it would grow without end)") {
    if (!fs::exists("/dev/zero")) return;
    CHECK_THROWS_WITH(io::read_text_file("/dev/zero"), Catch::Contains("not a regular file"));
  }
  SECTION("a FIFO is refused without waiting for a writer") {
    const auto f = temp_path("fifo");
    fs::remove(f);
    REQUIRE(::mkfifo(f.c_str(), 0600) == 0);
    const auto t0 = std::chrono::steady_clock::now();
    CHECK_THROWS_WITH(io::read_text_file(f), Catch::Contains("not a regular file"));
    CHECK(std::chrono::steady_clock::now() - t0 < std::chrono::seconds(5));
    fs::remove(f);
  }
  SECTION("larger than the limit, which the message names") {
    const auto f = temp_path("big.json");
    std::ofstream(f).close();
    fs::resize_file(f, io::max_input_bytes + 1);  // sparse: no 64 MiB written
    CHECK_THROWS_WITH(io::read_text_file(f), Catch::Contains("larger than the 64 MiB limit"));
    fs::remove(f);
  }
  SECTION("a NUL byte, and what follows it, are not ignored") {
    static constexpr char text[] = "{\"model_type\": \"llama\"}\0{\"junk\": ";  // 33 bytes and the terminator
    const auto f = write_temp("nul.json", std::string(text, sizeof text - 1));  // (35 read past the literal: ASan)
    CHECK_THROWS_WITH(io::read_text_file(f), Catch::Contains("NUL byte"));
    CHECK_THROWS_WITH(io::parse_json(std::string("{}\0]]]", 6), "x.json"), Catch::Contains("NUL byte"));
  }
  SECTION("missing file and over-long name: one short line naming the path") {
    CHECK_THROWS_WITH(io::read_text_file("/nonexistent/bwplan.json"), Catch::Contains("/nonexistent/bwplan.json: no such file"));
    const std::string longname(100'000, 'a');
    try {
      (void)io::read_text_file(longname);
      FAIL("read an over-long path");
    } catch (const config_error& e) {
      CHECK(std::string(e.what()).size() < 400);
      CHECK_THAT(e.what(), Catch::Contains("file name too long") && Catch::Contains("aaa..."));
    }
  }
}

TEST_CASE("hardening: the CLI reports unreadable models, plans and catalogs in one line", "[hardening]") {
  const auto d = temp_path("modeldir");
  fs::create_directories(d);
  fs::remove(d / "config.json");
  check_usage_error(run_cli({"estimate", d.string()}), "is a directory without a config.json");
  check_usage_error(run_cli({"--hardware", "/dev/zero", "hardware"}), "/dev/zero: is not a regular file");
  check_usage_error(run_cli({"estimate", "/dev/zero"}), "/dev/zero: is not a regular file");
  const auto plan = write_temp("plan-dir.json", R"({"model": "/dev/zero", "gpu": "h100"})");
  check_usage_error(run_cli({"estimate", "--plan", plan}), "/dev/zero: is not a regular file");
  SECTION("an over-long path: the path cut to 200 characters, no 'internal: filesystem error'") {
    const std::string longname(100'000, 'x');
    for (const std::vector<std::string>& args : {std::vector<std::string>{"estimate", longname},
                                                std::vector<std::string>{"estimate", "--plan", longname},
                                                std::vector<std::string>{"--hardware", longname, "hardware"},
                                                std::vector<std::string>{"validate", longname}}) {
      const auto r = run_cli(args);
      INFO(args.front() << " " << args[1].substr(0, 20));
      CHECK(r.code == 2);
      CHECK(lines(r.err) == 1);
      CHECK(r.err.size() < 1200);
      CHECK_THAT(r.err, !Catch::Contains("internal"));
    }
  }
}

TEST_CASE("hardening: JSON nested deeper than 256 levels is refused before it is parsed", "[hardening]") {
  std::string deep = R"({"model_type": "gemma3", "text_config": )";
  for (int i = 0; i < 100'000; ++i) deep += "[";
  for (int i = 0; i < 100'000; ++i) deep += "]";
  deep += "}";
  CHECK_THROWS_WITH(io::parse_json(deep, "deep.json"), Catch::Contains("nested deeper than 256 levels"));
  const auto f = write_temp("deep.json", deep);
  check_usage_error(run_cli({"estimate", f}), "nested deeper than 256 levels");
  // brackets inside strings and comments do not count
  std::string ok = "{\"a\": \"";
  for (int i = 0; i < 1000; ++i) ok += "[{";
  ok += "\"} // [[[[[[\n";
  CHECK_NOTHROW(io::parse_json(ok, "ok.json"));
}

TEST_CASE("hardening: gemma3 text_config is read in place, once, with /text_config in error pointers", "[hardening]") {
  const std::string inner = R"({"hidden_size": 2560, "num_hidden_layers": 34, "num_attention_heads": 8, "num_key_value_heads": 4,
    "head_dim": 256, "intermediate_size": 10240, "vocab_size": 262208})";
  SECTION("a multimodal config reads the language model") {
    const auto m = io::model_from_json(nlohmann::json::parse(R"({"model_type": "gemma3", "text_config": )" + inner + "}"), "g.json");
    CHECK(m.family == "gemma3");
    CHECK(m.layers == 34);
    CHECK(m.qk_norm);
    CHECK(m.norms_per_block == 4);
  }
  SECTION("a missing field inside text_config is located under /text_config") {
    const auto f = write_temp("gemma3-missing.json",
                              "{\"model_type\": \"gemma3\",\n \"text_config\": {\"hidden_size\": 64,\n \"num_hidden_layers\": \"two\"}}");
    const auto r = run_cli({"estimate", f});
    check_usage_error(r, "/text_config/num_hidden_layers: expected an integer, got string");
    CHECK_THAT(r.err, Catch::Contains("(line 3"));
  }
  SECTION("a text_config holding another one is refused at once, not re-read level by level") {
    std::string chain = inner;
    for (int i = 0; i < 200; ++i) chain = R"({"model_type": "gemma3", "text_config": )" + chain + "}";
    const auto t0 = std::chrono::steady_clock::now();
    CHECK_THROWS_WITH(io::model_from_json(nlohmann::json::parse(chain), "chain.json"),
                      Catch::Contains("/text_config/model_type") && Catch::Contains("not another multimodal gemma3"));
    const std::string two = R"({"model_type": "gemma3", "text_config": {"text_config": )" + inner + "}}";
    CHECK_THROWS_WITH(io::model_from_json(nlohmann::json::parse(two), "two.json"), Catch::Contains("/text_config/text_config"));
    CHECK(std::chrono::steady_clock::now() - t0 < std::chrono::seconds(2));
  }
}

TEST_CASE("hardening: validate refuses a directory, an empty file and a field of the wrong type", "[hardening]") {
  const auto d = temp_path("runs-dir");
  fs::create_directories(d);
  check_usage_error(run_cli({"validate", d.string()}), "is a directory");
  check_usage_error(run_cli({"validate", write_temp("empty.jsonl", "")}), "no runs in the file");
  check_usage_error(run_cli({"validate", write_temp("blank.jsonl", "\n  \n")}), "no runs in the file");
  const auto bad = write_temp("bad.jsonl", "{\"kind\": \"env\", \"gpu\": \"NVIDIA H200\"}\n"
                                           "{\"model\": \"m\", \"recipe\": \"amp\", \"mbs\": \"one\", \"seq\": 2048, \"ac\": \"none\"}\n");
  check_usage_error(run_cli({"validate", bad}), "bad.jsonl:2: /mbs: expected an integer");
  const auto arr = write_temp("arr.jsonl", "[1, 2]\n");
  check_usage_error(run_cli({"validate", arr}), "arr.jsonl:1: expected a JSON object");
  const auto kind = write_temp("kind.jsonl", "{\"kind\": 3}\n");
  check_usage_error(run_cli({"validate", kind}), "kind.jsonl:1: /kind: expected a string");
}

// ---- 2. numbers checked where they enter from flags

TEST_CASE("hardening: non-finite and out-of-range numbers in flags are one line and exit 2, naming the flag", "[hardening]") {
  const std::string i64max = std::to_string(std::numeric_limits<std::int64_t>::max());
  struct bad_flag {
    std::vector<std::string> args;
    std::string flag;
  };
  const std::vector<bad_flag> cases{
      {{"estimate", "Llama-3.2-1B", "--gpu", "b200", "--precision", "fp8", "--bf16-layers", "nan"}, "--bf16-layers"},
      {{"estimate", "Llama-3.2-1B", "--gpu", "b200", "--precision", "fp8", "--bf16-layers", "first:" + i64max + ",last:" + i64max},
       "--bf16-layers"},
      {{"estimate", "Llama-3.2-1B", "--price-per-hour", "nan", "--tokens", "1B"}, "--price-per-hour"},
      {{"estimate", "Llama-3.2-1B", "--price-per-hour", "inf", "--tokens", "1B"}, "--price-per-hour"},
      {{"estimate", "Llama-3.2-1B", "--price-per-hour", "-1", "--tokens", "1B"}, "--price-per-hour"},
      {{"recommend", "Llama-3.2-1B", "--price-per-hour", "nan", "--tokens", "1B"}, "--price-per-hour"},
      {{"recommend", "Llama-3.2-1B", "--headroom", "nan"}, "--headroom"},
      {{"report", "Llama-3.2-1B", "--headroom", "nan", "-o", "-"}, "--headroom"},
      {{"recommend", "Llama-3.2-1B", "--tokens", "1B", "--budget-usd", "nan"}, "--budget-usd"},
      {{"recommend", "Llama-3.2-1B", "--tokens", "1B", "--budget-usd", "-1"}, "--budget-usd"},
      {{"recommend", "Llama-3.2-1B", "--tokens", "1B", "--deadline", "1e308w"}, "--deadline"},
      {{"recommend", "Llama-3.2-1B", "--global-batch-tokens", i64max}, "--global-batch-tokens"},
      {{"sagemaker", "Llama-3.2-1B", "--runtime-margin", "nan"}, "--runtime-margin"},
      {{"sagemaker", "Llama-3.2-1B", "--runtime-margin", "inf"}, "--runtime-margin"},
      {{"sagemaker", "Llama-3.2-1B", "--runtime-margin", "1e308"}, "--runtime-margin"},
      {{"sagemaker", "Llama-3.2-1B", "--max-runtime", "1e300"}, "--max-runtime"},
      {{"sagemaker", "Llama-3.2-1B", "--train-tokens", i64max}, "--train-tokens"},
      {{"recommend", "Llama-3.2-1B", "--emit", "sagemaker", "--runtime-margin", "nan"}, "--runtime-margin"},
  };
  for (const auto& c : cases) {
    std::string cmd;
    for (const auto& a : c.args) cmd += a + " ";
    INFO(cmd);
    check_usage_error(run_cli(c.args), c.flag);
  }
}

TEST_CASE("hardening: parse_bf16_blocks rejects NaN and counts above the most blocks a model may have", "[hardening]") {
  CHECK_THROWS_AS(parse_bf16_blocks("nan"), invalid_request);
  CHECK_THROWS_AS(parse_bf16_blocks("-nan"), invalid_request);
  CHECK_THROWS_WITH(parse_bf16_blocks("last:9223372036854775807"), Catch::Contains("between 0 and 100000"));
  CHECK(parse_bf16_blocks("first:2,last:100000").last == 100000);
  CHECK(parse_bf16_blocks("0.15").fraction == Approx(0.15));
}

TEST_CASE("hardening: empty or zero values are errors, not silent defaults", "[hardening]") {
  check_usage_error(run_cli({"estimate", "Llama-3.2-1B", "--gpus", "0"}), "--gpus");
  check_usage_error(run_cli({"estimate", "Llama-3.2-1B", "--instance", ""}), "--instance: must not be empty");
  check_usage_error(run_cli({"recommend", "Llama-3.2-1B", "--instance", ""}), "--instance");
  check_usage_error(run_cli({"sagemaker", "Llama-3.2-1B", "--job-name", ""}), "--job-name: must not be empty");
  check_usage_error(run_cli({"sagemaker", "Llama-3.2-1B", "--volume-gb", "0"}), "--volume-gb");
  check_usage_error(run_cli({"sagemaker", "Llama-3.2-1B", "--max-steps", "0"}), "--max-steps");
  check_usage_error(run_cli({"--configs", "", "hardware"}), "--configs: must not be empty");
  check_usage_error(run_cli({"--hardware", "", "hardware"}), "--hardware: must not be empty");
}

TEST_CASE("hardening: SageMaker tags under aws: are refused, invalid UTF-8 blames the flag that carries it", "[hardening]") {
  check_usage_error(run_cli({"sagemaker", "Llama-3.2-1B", "--tag", "aws:team=ml"}), "reserved by AWS");
  check_usage_error(run_cli({"sagemaker", "Llama-3.2-1B", "--tag", "AWS:x=y"}), "reserved by AWS");
  const auto r = run_cli({"sagemaker", "Llama-3.2-1B", "--output-s3", "s3://bucket/\xff\xfe"});
  check_usage_error(r, "--output-s3");
  CHECK_THAT(r.err, !Catch::Contains("--checkpoint-s3"));
  check_usage_error(run_cli({"sagemaker", "Llama-3.2-1B", "--job-name=\xc3"}), "--job-name");
  CHECK(run_cli({"sagemaker", "Llama-3.2-1B", "--tag", "team=ml"}).code == 0);
}

TEST_CASE("hardening: recommend --instance repeated 3,000 times searches each instance type once", "[hardening]") {
  std::vector<std::string> args{"recommend", "Llama-3.2-1B", "--format", "json", "--seq", "2048"};
  for (int i = 0; i < 3000; ++i) {
    args.emplace_back("--instance");
    args.emplace_back(i % 2 ? "ml.p5.48xlarge" : "p5.48xlarge");  // an alias of the same instance type
  }
  const auto t0 = std::chrono::steady_clock::now();
  const auto r = run_cli(args);
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  CHECK(r.code == 0);
  CHECK(s < 30);
  const auto j = nlohmann::json::parse(r.out);
  CHECK(j["hardware"]["instance"] == "ml.p5.48xlarge");
}

// ---- 3. write errors fail the command

TEST_CASE("hardening: output that cannot be written fails the command (exit 2)", "[hardening]") {
  SECTION("standard output on a full device") {
    full_device_buf buf;
    std::ostream out(&buf);
    std::ostringstream err;
    CHECK(cli::run({"hardware"}, out, err) == 2);
    CHECK_THAT(err.str(), Catch::Contains("cannot write the output"));
    CHECK(lines(err.str()) == 1);
  }
  if (!fs::exists("/dev/full")) return;
  SECTION("check -o /dev/full") {
    const std::string plan = std::string(BWPLAN_SOURCE_DIR) + "/configs/examples/llama-3.1-8b-p6-b200.json";
    check_usage_error(run_cli({"check", plan, "-o", "/dev/full"}), "--output: cannot write /dev/full");
  }
  SECTION("recommend --emit plan -o /dev/full") {
    check_usage_error(run_cli({"recommend", "Llama-3.2-1B", "--gpu", "h100", "--emit", "plan", "-o", "/dev/full"}),
                      "--output: cannot write /dev/full");
  }
  SECTION("report -o /dev/full") {
    check_usage_error(run_cli({"report", "Llama-3.2-1B", "--gpu", "h100", "-o", "/dev/full"}), "cannot write /dev/full");
  }
}

// ---- 4. commands, help and completion

TEST_CASE("hardening: bwplan alone prints the help and exits 0", "[hardening]") {
  const auto r = run_cli({});
  CHECK(r.code == 0);
  CHECK_THAT(r.out, Catch::Contains("Usage: bwplan") && Catch::Contains("estimate") && Catch::Contains("completion"));
  CHECK(r.err.empty());
  const auto v = run_cli({"-v"});  // options but no command: a usage error that lists the commands
  check_usage_error(v, "a command is required");
  CHECK_THAT(v.err, Catch::Contains("estimate, recommend"));
}

TEST_CASE("hardening: unknown commands and options get a suggestion", "[hardening]") {
  check_usage_error(run_cli({"estimat", "Llama-3.1-8B"}), "unknown command 'estimat' (did you mean 'estimate'?)");
  check_usage_error(run_cli({"recomend"}), "did you mean 'recommend'?");
  check_usage_error(run_cli({"estimate", "Llama-3.1-8B", "--gpuu", "h100"}), "unknown option '--gpuu' (did you mean '--gpu'?)");
  check_usage_error(run_cli({"recommend", "Llama-3.1-8B", "--instnce=ml.p5.48xlarge"}), "(did you mean '--instance'?)");
  check_usage_error(run_cli({"sagemaker", "Llama-3.1-8B", "--role-ar", "x"}), "(did you mean '--role-arn'?)");
  check_usage_error(run_cli({"estimate", "Llama-3.1-8B", "Llama-3.1-70B"}), "unexpected argument 'Llama-3.1-70B'");
}

TEST_CASE("hardening: bwplan completion prints bash, zsh and fish scripts from the registered commands", "[hardening]") {
  const auto bash = run_cli({"completion", "bash"});
  REQUIRE(bash.code == 0);
  CHECK_THAT(bash.out, Catch::Contains("complete -o filenames -F _bwplan bwplan"));
  for (const char* s : {"estimate|recommend|hardware|validate|calibrate|sagemaker|report|sweep|check|completion", "--bf16-layers",
                        "--emit", "--role-arn", "values='fp32 bf16'", "llama-3.1-8b"})
    CHECK_THAT(bash.out, Catch::Contains(s));
  const auto zsh = run_cli({"completion", "zsh"});
  REQUIRE(zsh.code == 0);
  CHECK_THAT(zsh.out, Catch::StartsWith("#compdef bwplan") && Catch::Contains("compdef _bwplan bwplan"));
  const auto fish = run_cli({"completion", "fish"});
  REQUIRE(fish.code == 0);
  CHECK_THAT(fish.out, Catch::Contains("complete -c bwplan -n __fish_use_subcommand -a estimate") &&
                           Catch::Contains("-l master -x -a 'fp32 bf16'"));
  check_usage_error(run_cli({"completion", "powershell"}), "SHELL");
}

TEST_CASE("hardening: help shows the values users type, not CLI11's enum mapping", "[hardening]") {
  for (const char* cmd : {"estimate", "sagemaker", "report", "sweep"}) {
    const auto r = run_cli({cmd, "--help"});
    INFO(cmd);
    REQUIRE(r.code == 0);
    CHECK_THAT(r.out, !Catch::Contains("->") && !Catch::Contains("ENUM"));
    CHECK_THAT(r.out, Catch::Contains("--master fp32 | bf16") && Catch::Contains("--sharding none | full | hybrid | grad-op"));
  }
  // the values still parse, case-insensitively, and a wrong one lists them
  CHECK(run_cli({"estimate", "Llama-3.2-1B", "--gpu", "h100", "--master", "BF16", "--sharding", "None"}).code == 0);
  check_usage_error(run_cli({"estimate", "Llama-3.2-1B", "--master", "fp16"}), "--master: expected fp32 | bf16, got 'fp16'");
}

// ---- 5. models by Hugging Face id, presets

TEST_CASE("hardening: a Hugging Face id is read from the local hub cache", "[hardening]") {
  const auto cache = temp_path("hf-cache");
  fs::remove_all(cache);
  const auto repo = io::hf_model_folder(cache, "TestOrg/Tiny-Llama-2B");
  fs::create_directories(repo / "refs");
  fs::create_directories(repo / "snapshots" / "0123abcd");
  fs::create_directories(repo / "snapshots" / "ffff0000");  // an older snapshot without a config
  std::ofstream(repo / "refs" / "main") << "0123abcd";
  std::ofstream(repo / "snapshots" / "0123abcd" / "config.json") << llama_like;
  SECTION("HF_HUB_CACHE") {
    scoped_env env("HF_HUB_CACHE", cache.string());
    const auto r = run_cli({"estimate", "TestOrg/Tiny-Llama-2B", "--gpu", "h100", "--format", "json"});
    INFO(r.err);
    REQUIRE(r.code == 0);
    const auto j = nlohmann::json::parse(r.out);
    CHECK(j["model"]["name"] == "Tiny-Llama-2B");
    CHECK(j["model"]["family"] == "llama");
  }
  SECTION("HF_HOME/hub") {
    const auto home = temp_path("hf-home");
    fs::remove_all(home);
    fs::create_directories(home);
    fs::create_directory_symlink(cache, home / "hub");
    scoped_env unset_cache("HF_HUB_CACHE", "");
    scoped_env env("HF_HOME", home.string());
    CHECK(io::hf_hub_cache_dir() == home / "hub");
    CHECK(run_cli({"estimate", "TestOrg/Tiny-Llama-2B", "--gpu", "h100"}).code == 0);
  }
  SECTION("not cached: where it looked and how to download it") {
    scoped_env env("HF_HUB_CACHE", cache.string());
    const auto r = run_cli({"estimate", "Qwen/Qwen2.5-0.5B"});
    check_usage_error(r, "huggingface-cli download Qwen/Qwen2.5-0.5B config.json");
    CHECK_THAT(r.err, Catch::Contains((cache / "models--Qwen--Qwen2.5-0.5B").string()));
  }
  SECTION("a refs/main that is not a commit hash is not followed") {
    std::ofstream(repo / "refs" / "main") << "../../../etc";
    scoped_env env("HF_HUB_CACHE", cache.string());
    // the only snapshot with a config.json is still found
    CHECK(io::find_hf_config(cache, "TestOrg/Tiny-Llama-2B") == repo / "snapshots" / "0123abcd" / "config.json");
  }
  CHECK_FALSE(io::is_hf_model_id("../etc/passwd"));
  CHECK_FALSE(io::is_hf_model_id("a/b/c"));
  CHECK_FALSE(io::is_hf_model_id("./my-model"));
  CHECK_FALSE(io::is_hf_model_id("org/model.json"));
  CHECK(io::is_hf_model_id("Qwen/Qwen2.5-0.5B"));
}

TEST_CASE("hardening: presets for the MoE and other shared configs, by the names users type", "[hardening]") {
  struct row {
    const char* arg;
    std::int64_t total;
  };
  for (const row& r : {row{"Mixtral-8x7B", 46'702'792'704}, row{"mistralai/Mixtral-8x7B-v0.1", 46'702'792'704},
                       row{"Qwen3-30B-A3B", 30'532'122'624}, row{"DeepSeek-V3", 671'026'419'200},
                       row{"deepseek-ai/DeepSeek-V3-Base", 671'026'419'200}}) {
    INFO(r.arg);
    const auto res = run_cli({"estimate", r.arg, "--instance", "ml.p6-b200.48xlarge", "--format", "json"});
    REQUIRE(res.code == 0);
    CHECK(nlohmann::json::parse(res.out)["params"]["total"] == r.total);
  }
  for (const char* name : {"gpt2", "gpt2-xl", "falcon-7b", "Phi-3-mini-128k-instruct", "gemma-2-9b-it", "Mixtral-8x22B-v0.1"}) {
    INFO(name);
    CHECK(run_cli({"estimate", name, "--gpu", "b200", "--seq", "1024"}).code == 0);
  }
  // a name more than one preset extends is not guessed
  check_usage_error(run_cli({"estimate", "Mistral-7B"}), "several presets match: mistral-7b-instruct-v0.3, mistral-7b-v0.1");
}

TEST_CASE("hardening: every shared config is a bundled preset (byte for byte)", "[hardening]") {
  if (!test::have_shared()) return;
  for (const auto& dir : {test::shared_dir() / "models", test::shared_dir() / "models" / "more"})
    for (const auto& e : fs::directory_iterator(dir)) {
      if (e.path().extension() != ".json") continue;
      std::string stem = e.path().stem().string();
      for (auto& c : stem) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
      const auto preset = fs::path(BWPLAN_SOURCE_DIR) / "configs" / "models" / (stem + ".json");
      INFO(e.path().string());
      REQUIRE(fs::exists(preset));
      CHECK(io::read_text_file(preset) == io::read_text_file(e.path()));
    }
}

// ctest runs each test case by name (catch_discover_tests), and CMake splits a name at ';' (its list separator): a
// test case whose name holds one becomes ctest entries that match no test case, so Catch runs nothing and passes.
// Four test cases were silently never run that way (all passed when run by their real names).
TEST_CASE("test cases: no name holds a semicolon, which would keep ctest from running it", "[hardening]") {
  const auto& all = Catch::getRegistryHub().getTestCaseRegistry().getAllTests();
  REQUIRE(all.size() > 200);
  for (const auto& tc : all) {
    INFO(tc.name);
    CHECK(tc.name.find(';') == std::string::npos);
  }
}

// ---- found by a CLI fuzz of 33,000 requests (2026-12-06); each failed on the code before its fix

TEST_CASE("bug: check --format json or sarif on a plan file that is not UTF-8 reports it, not an internal JSON error", "[hardening][check]") {
  // nlohmann's parse error quotes the bytes last read, the ill-formed one included; dumping that message into the
  // JSON report threw type_error 316 ("internal: ... invalid UTF-8 byte")
  const std::string f = write_temp("latin1-plan.json", "{\"model\":\"gpt2\",\"gpu\":\"h100\",\"seq_len\":1024,\"name\":\"caf\xe9\"}");
  for (const char* format : {"json", "sarif", "text"}) {
    INFO(format);
    const auto r = run_cli({"check", "--format", format, f});
    check_usage_error(r, f);
    CHECK_THAT(r.err, Catch::Contains("malformed JSON"));
    CHECK_THAT(r.err, Catch::Contains("\\xE9"));  // the byte, escaped
    if (std::string(format) != "text") CHECK_NOTHROW(nlohmann::json::parse(r.out));  // a valid report
  }
  CHECK(io::detail::printable_utf8("caf\xc3\xa9 \xe9\x01") == "caf\xc3\xa9 \\xE9\\x01");  // well-formed UTF-8 kept
  CHECK(io::detail::printable_utf8("\xed\xa0\x80") == "\\xED\\xA0\\x80");                 // a surrogate is not UTF-8
}

TEST_CASE("bug: check in the text format also names unusable input on stderr, in one line", "[hardening][check]") {
  const std::string f = write_temp("truncated-plan.json", "{");
  const auto r = run_cli({"check", f});
  check_usage_error(r, f);
  CHECK_THAT(r.out, Catch::Contains("unusable input"));
}

TEST_CASE("bug: recommend --nodes auto --price-per-hour 0 prints no NaN in its scaling note", "[hardening][recommend]") {
  const auto r = run_cli({"recommend", "Llama-3.2-1B", "--nodes", "auto", "--max-nodes", "2", "--price-per-hour", "0", "--format", "json"});
  INFO(r.err);
  REQUIRE(r.code == 0);
  CHECK_THAT(r.out, !Catch::Contains("nan"));
  const auto j = nlohmann::json::parse(r.out);
  REQUIRE(j.contains("notes"));
  bool said = false;
  for (const auto& n : j["notes"]) said = said || n.get<std::string>().find("a second node buys") != std::string::npos;
  CHECK(said);
}

TEST_CASE("bug: a plan file's broken rule names the file and its member, not a flag", "[hardening][plan]") {
  // lora_alpha with finetune full blamed --lora-rank; pp 3 of 8 GPUs blamed --gpus; an unknown instance named no file
  const std::string base = (fs::path(BWPLAN_SOURCE_DIR) / "configs/examples/llama-3.1-8b-p6-b200.json").string();
  auto doc = nlohmann::json::parse(std::ifstream(base));
  auto with = [&](const char* name, const std::function<void(nlohmann::json&)>& f) {
    auto d = doc;
    f(d);
    return write_temp(name, d.dump(2));
  };
  const std::string alpha = with("plan-alpha.json", [](nlohmann::json& d) { d["lora_alpha"] = 7; });
  auto r = run_cli({"estimate", "--plan", alpha});
  check_usage_error(r, alpha + ": /lora_alpha: LoRA settings need finetune lora or qlora");
  CHECK_THAT(r.err, !Catch::Contains("--lora"));
  const std::string pp = with("plan-pp3.json", [](nlohmann::json& d) { d["pp"] = 3; });
  r = run_cli({"estimate", "--plan", pp});
  check_usage_error(r, pp + ": /gpus:");
  const std::string inst = with("plan-instance.json", [](nlohmann::json& d) { d["instance"] = "gpt2"; });
  r = run_cli({"estimate", "--plan", inst});
  check_usage_error(r, inst + ": /instance: unknown instance 'gpt2'");
  // a flag given on the command line is still named as the flag
  r = run_cli({"estimate", "--plan", base, "--pp", "3"});
  check_usage_error(r, "--pp: tp x cp x pp = 3 does not divide the world size 8");
}

TEST_CASE("bug: --hardware refuses a file that is not a hardware catalog instead of merging nothing", "[hardening][catalog]") {
  const std::string model = (fs::path(BWPLAN_SOURCE_DIR) / "configs/models/gpt2.json").string();
  check_usage_error(run_cli({"--hardware", model, "hardware"}), model + ": /");
  const std::string typo = write_temp("catalog-typo.json", R"({"gpu": [{"id": "zz"}]})");
  check_usage_error(run_cli({"--hardware", typo, "hardware"}), typo + ": /gpu: unknown member");
  const std::string empty = write_temp("catalog-empty.json", "{}");
  check_usage_error(run_cli({"--hardware", empty, "hardware"}), "not a hardware catalog");
}

TEST_CASE("bug: sweep checks every point before estimating any", "[hardening][sweep]") {
  // mbs=1..100000 computed 65,536 points (about two minutes) before refusing mbs=65537
  const auto t0 = std::chrono::steady_clock::now();
  const auto r = run_cli({"sweep", "Llama-3.2-1B", "--instance", "ml.p5.48xlarge", "--vary", "mbs=1..100000", "--format", "json"});
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  check_usage_error(r, "mbs=65537");
  CHECK(s < 30);  // generous for a loaded CI host; the check itself takes about a second
}

TEST_CASE("bug: a model with thousands of blocks keeps the cheap bound instead of a replay that grows with their square", "[hardening][allocator]") {
  auto j = nlohmann::json::parse(llama_like);
  j["num_hidden_layers"] = 10000;  // took over 20 s in the replay
  const std::string f = write_temp("llama-10k-blocks.json", j.dump());
  const auto t0 = std::chrono::steady_clock::now();
  const auto r = run_cli({"estimate", f, "--gpu", "h200", "--format", "json"});
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  INFO(r.err);
  REQUIRE(r.code == 0);
  const auto e = nlohmann::json::parse(r.out);
  CHECK(e["memory"]["not_replayed_because"] == "more than 1,024 decoder blocks");
  CHECK(s < 10);
  j["num_hidden_layers"] = 1024;  // at the limit: replayed
  const std::string g = write_temp("llama-1024-blocks.json", j.dump());
  const auto e2 = nlohmann::json::parse(run_cli({"estimate", g, "--gpu", "h200", "--mbs", "1", "--seq", "512", "--format", "json"}).out);
  CHECK_FALSE(e2["memory"].contains("not_replayed_because"));
}

TEST_CASE("bug: a hardware catalog's rates must be at least 1e-06 of their unit (a subnormal one gave NaN tokens/s)", "[hardening][catalog]") {
  // found by a CLI fuzz: dense_tflop_per_s bf16 5e-324 passed "positive" and estimate printed "-nan tokens/s"
  auto cat = nlohmann::json::parse(std::ifstream(fs::path(BWPLAN_SOURCE_DIR) / "configs/hardware/catalog.json"));
  nlohmann::json g;
  for (const auto& x : cat["gpus"])
    if (x["id"] == "h100") g = x;
  REQUIRE(!g.is_null());
  g["id"] = "tiny";
  g["dense_tflop_per_s"]["bf16"] = 5e-324;
  const std::string f = write_temp("catalog-subnormal.json", nlohmann::json{{"gpus", {g}}}.dump());
  check_usage_error(run_cli({"--hardware", f, "estimate", "Llama-3.2-1B", "--gpu", "tiny"}), "/gpus/0/dense_tflop_per_s/bf16: must be at least 1e-06");
}

TEST_CASE("bug: --power-limit, --shard-group and --lora-rank say what is wrong with a value, in bwplan's words", "[hardening][cli]") {
  // CLI11's own messages were "Value x not in range 50.000000 to 5000.000000" for a word and "Could not convert:
  // --shard-group = 99999999999" for an overflow (found by a CLI fuzz)
  check_usage_error(run_cli({"--power-limit", "x", "estimate", "Llama-3.2-1B"}), "--power-limit: expected a number, got 'x'");
  check_usage_error(run_cli({"estimate", "Llama-3.2-1B", "--shard-group", "99999999999"}),
                    "--shard-group: out of range: must be between 1 and 1048576, got 99999999999");
  check_usage_error(run_cli({"estimate", "Llama-3.2-1B", "--finetune", "lora", "--lora-rank", "99999999999"}),
                    "--lora-rank: out of range: must be between 1 and 65536");
  check_usage_error(run_cli({"recommend", "Llama-3.2-1B", "--finetune", "lora", "--lora-rank", "0"}),
                    "--lora-rank: out of range: must be between 1 and 65536, got 0");
}

TEST_CASE("bug: check reads a plan without seq_len at 4096 tokens, as estimate does", "[hardening][check]") {
  // check took training_config's 2,048 while estimate, the schema, sagemaker and sweep take 4,096: a plan that estimate
  // --check called "DOES NOT FIT" (mbs 7 x 4096, 210.83 GiB) passed check ("mbs 7 x 2048 ... 34.7% free", exit 0).
  const auto f = write_temp("noseq.json", R"({"model": "Llama-3.1-8B", "instance": "ml.p6-b200.48xlarge", "micro_batch_size": 7})");
  const auto c = run_cli({"check", f, "--format", "json"});
  const auto e = run_cli({"estimate", "--plan", f, "--check"});
  CHECK(e.code == 1);
  CHECK(c.code == 1);
  CHECK_THAT(c.out, Catch::Contains("4096"));
  // gpt2: the default is capped at the model's 1,024 positions in check as in estimate
  const auto g = write_temp("gpt2.json", R"({"model": "gpt2", "gpu": "h100"})");
  const auto gc = run_cli({"check", g});
  CHECK(gc.code == 0);
  CHECK_THAT(gc.out, Catch::Contains("x 1024"));
}

TEST_CASE("bug: BWP001's fix names the plan key the file takes (optimizer, not optim)", "[hardening][check]") {
  const auto r = run_cli({"check", std::string(BWPLAN_SOURCE_DIR) + "/configs/examples/llama-3.1-70b-one-h100.json"});
  CHECK_THAT(r.out, Catch::Contains("\"optimizer\": \"adamw-8bit\"") && !Catch::Contains("\"optim\":"));
  // and the file with that key is read
  const auto f = write_temp("o8.json", R"({"model": "Llama-3.1-8B", "gpu": "h100", "master_weights": "bf16", "optimizer": "adamw-8bit"})");
  CHECK(run_cli({"check", f}).code == 0);
}

TEST_CASE("bug: report's top plans keep the plan's fine-tuning, optimizer and other settings", "[hardening][report]") {
  // the search of report's top plans copied only seq, master weights and the AdamW implementation: --finetune lora
  // --optimizer sgd listed full AdamW fine-tunes
  const auto out = temp_path("lora.html").string();
  const auto r = run_cli({"report", "Llama-3.2-1B", "--gpu", "h100", "--finetune", "lora", "--optimizer", "sgd", "-o", out});
  REQUIRE(r.code == 0);
  std::ifstream in(out);
  const std::string html((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const auto top = html.find("Top plans");
  REQUIRE(top != std::string::npos);
  const auto end = html.find("</table>", top);
  REQUIRE(end != std::string::npos);
  const std::string table = html.substr(top, end - top);  // the top plans' table only (the inputs below name the plan's settings)
  CHECK_THAT(table, Catch::Contains("<td>lora r16") && Catch::Contains("<td>sgd</td>"));
}

TEST_CASE("bug: recommend --format markdown compares instances in a Markdown table", "[hardening][recommend]") {
  const std::vector<std::string> a{"recommend", "Llama-3.2-1B", "--instance", "ml.p5en.48xlarge,ml.p5.48xlarge"};
  auto md = a;
  md.insert(md.end(), {"--format", "markdown"});
  const auto t = run_cli(a), m = run_cli(md);
  REQUIRE(t.code == 0);
  REQUIRE(m.code == 0);
  CHECK(t.out != m.out);
  CHECK_THAT(m.out, Catch::Contains("| instance | nodes | GPUs |") && Catch::Contains("| `ml.p5en.48xlarge` |") &&
                        Catch::Contains("**pick**"));
}

TEST_CASE("bug: estimate's markdown has the training time and cost of --tokens, and a price without tokens is refused", "[hardening][cli]") {
  const std::vector<std::string> a{"estimate", "Llama-3.1-8B", "--instance", "ml.p5en.48xlarge", "--tokens", "10B"};
  auto md = a;
  md.insert(md.end(), {"--format", "markdown"});
  const auto t = run_cli(a), m = run_cli(md);
  REQUIRE(m.code == 0);
  const auto line = t.out.substr(t.out.find("training   ") + 11, t.out.find('\n', t.out.find("training   ")) - t.out.find("training   ") - 11);
  CHECK_THAT(m.out, Catch::Contains("**Training:** " + line));
  const auto p = run_cli({"estimate", "Llama-3.1-8B", "--gpu", "h100", "--price-per-hour", "5"});
  CHECK(p.code == 2);
  CHECK(lines(p.err) == 1);
  CHECK_THAT(p.err, Catch::Contains("--price-per-hour") && Catch::Contains("--tokens"));
}

TEST_CASE("bug: flags without effect are refused: --bf16-layers in bf16, a negative --keep-alive", "[hardening][cli]") {
  const auto b = run_cli({"estimate", "Llama-3.1-8B", "--gpu", "h100", "--bf16-layers", "last:2"});
  CHECK(b.code == 2);
  CHECK_THAT(b.err, Catch::Contains("--bf16-layers") && Catch::Contains("precision bf16"));
  CHECK(run_cli({"estimate", "Llama-3.1-8B", "--gpu", "h100", "--bf16-layers", "none"}).code == 0);
  CHECK(run_cli({"estimate", "Llama-3.1-8B", "--gpu", "h100", "--precision", "fp8", "--bf16-layers", "last:2"}).code == 0);
  const auto k = run_cli({"sagemaker", "Llama-3.1-8B", "--instance", "ml.p5en.48xlarge", "--keep-alive", "-1"});
  CHECK(k.code == 2);
  CHECK_THAT(k.err, Catch::Contains("--keep-alive"));
  CHECK(run_cli({"sagemaker", "Llama-3.1-8B", "--instance", "ml.p5en.48xlarge", "--max-pending", "-5"}).code == 2);
}

TEST_CASE("bug: validate's JSON carries the estimates of the runs that died", "[hardening][validate]") {
  if (!test::have_shared()) return;
  const auto r = run_cli({"validate", (test::shared_dir() / "groundtruth" / "h200-calibration.jsonl").string(), "--format", "json"});
  REQUIRE(r.code == 0);
  int oom = 0;
  const auto j = nlohmann::json::parse(r.out);  // a named object: the rows of a temporary would dangle
  for (const auto& row : j["rows"]) {
    if (row["measured_ok"].get<bool>()) continue;
    ++oom;
    CHECK(row["peak_allocated_bytes"]["estimated"].get<double>() > 0);
    if (!row["fits"].get<bool>())  // called out of memory: the estimate is past the GPU's capacity
      CHECK(row["device_peak_bytes"]["estimated"].get<double>() > row["device_peak_bytes"]["capacity"].get<double>());
  }
  CHECK(oom > 0);
}

TEST_CASE("bug: sweep says that varying grad-accum overrides the plan's global batch", "[hardening][sweep]") {
  const auto r = run_cli({"sweep", "--plan", std::string(BWPLAN_SOURCE_DIR) + "/configs/examples/llama-3.1-8b-p6-b200.json", "--vary", "mbs=1,2", "--vary", "grad-accum=1,2"});
  REQUIRE(r.code == 0);
  CHECK_THAT(r.err, Catch::Contains("overrides the plan's global_batch_size"));
  const auto keep = run_cli({"sweep", "--plan", std::string(BWPLAN_SOURCE_DIR) + "/configs/examples/llama-3.1-8b-p6-b200.json", "--vary", "mbs=1,2"});
  CHECK_THAT(keep.err, !Catch::Contains("overrides"));
}

TEST_CASE("bug: sagemaker --plan job.json names the job's settings the new request does not keep", "[hardening][sagemaker]") {
  // max_steps 50, learning_rate, the bucket and the role were replaced by the defaults without a word
  const auto req = run_cli({"sagemaker", "Llama-3.1-8B", "--instance", "ml.p5en.48xlarge", "--mbs", "2", "--max-steps", "50",
                            "--hyperparameter", "learning_rate=0.001", "--output-s3", "s3://my-bucket/x/", "--role-arn",
                            "arn:aws:iam::123456789012:role/R"});
  REQUIRE(req.code == 0);
  const auto f = write_temp("job.json", req.out);
  const auto again = run_cli({"sagemaker", "--plan", f});
  REQUIRE(again.code == 0);
  CHECK_THAT(again.err, Catch::Contains("--plan read the plan of a SageMaker job") && Catch::Contains("HyperParameters.max_steps") &&
                            Catch::Contains("HyperParameters.learning_rate") && Catch::Contains("RoleArn") &&
                            Catch::Contains("OutputDataConfig.S3OutputPath"));
  // given back as flags, nothing differs but the name
  const auto same = run_cli({"sagemaker", "--plan", f, "--max-steps", "50", "--hyperparameter", "learning_rate=0.001", "--output-s3",
                             "s3://my-bucket/x/", "--role-arn", "arn:aws:iam::123456789012:role/R"});
  REQUIRE(same.code == 0);
  INFO(same.err);
  CHECK_THAT(same.err, !Catch::Contains("HyperParameters.max_steps") && !Catch::Contains("RoleArn ("));
  // a job made earlier has another name, and so its checkpoint prefix, sagemaker_job_name and submit directory: made from
  // the name, not settings the new request drops (a review: every --plan job.json warned of those three members)
  std::string earlier = req.out;
  const std::string name = nlohmann::json::parse(req.out)["TrainingJobName"].get<std::string>();
  for (auto at = earlier.find(name); at != std::string::npos; at = earlier.find(name, at + 1)) earlier.replace(at, name.size(), "an-earlier-job-1");
  REQUIRE(nlohmann::json::parse(earlier)["TrainingJobName"] == "an-earlier-job-1");
  const auto renamed = run_cli({"sagemaker", "--plan", write_temp("earlier-job.json", earlier), "--max-steps", "50", "--hyperparameter",
                                "learning_rate=0.001", "--output-s3", "s3://my-bucket/x/", "--role-arn", "arn:aws:iam::123456789012:role/R"});
  REQUIRE(renamed.code == 0);
  INFO(renamed.err);
  CHECK_THAT(renamed.err, !Catch::Contains("--plan read the plan of a SageMaker job"));
  // the checkpoint prefix is the new job's own: said once, with the flag that resumes from the job's checkpoints
  const std::string old_ckpt = nlohmann::json::parse(earlier)["CheckpointConfig"]["S3Uri"].get<std::string>();
  CHECK_THAT(renamed.err, Catch::Contains("so it does not resume from the job's checkpoints (give --checkpoint-s3 " + old_ckpt + " to resume)"));
  const auto resumed = run_cli({"sagemaker", "--plan", write_temp("earlier-job.json", earlier), "--max-steps", "50", "--hyperparameter",
                                "learning_rate=0.001", "--output-s3", "s3://my-bucket/x/", "--role-arn", "arn:aws:iam::123456789012:role/R",
                                "--checkpoint-s3", old_ckpt});
  REQUIRE(resumed.code == 0);
  CHECK_THAT(resumed.err, !Catch::Contains("--plan read the plan") && !Catch::Contains("does not resume"));
  // a short name is replaced only where it stands as a path segment or the whole value: a job named "x" under
  // s3://my-bucket/x/ on ml.p5.48xlarge made InstanceType and S3OutputPath "differ" from themselves (a review)
  const auto x = run_cli({"sagemaker", "Llama-3.2-1B", "--instance", "ml.p5.48xlarge", "--job-name", "x", "--output-s3", "s3://my-bucket/x/",
                          "--role-arn", "arn:aws:iam::123456789012:role/R"});
  REQUIRE(x.code == 0);
  const auto again_x = run_cli({"sagemaker", "--plan", write_temp("x-job.json", x.out), "--output-s3", "s3://my-bucket/x/", "--role-arn",
                                "arn:aws:iam::123456789012:role/R"});
  REQUIRE(again_x.code == 0);
  INFO(again_x.err);
  CHECK_THAT(again_x.err, !Catch::Contains("--plan read the plan of a SageMaker job"));
}

TEST_CASE("bug: a value shown in the --plan job.json warning is cut on a UTF-8 character boundary", "[hardening][sagemaker]") {
  // the cut counted bytes: a Euro sign was split and the warning held invalid UTF-8 (a review)
  std::string long_value;
  for (int i = 0; i < 20; ++i) long_value += "\xe2\x82\xac";  // U+20AC, three bytes
  const auto req = run_cli({"sagemaker", "Llama-3.2-1B", "--instance", "ml.p5.48xlarge", "--env", "NOTE=" + long_value + "\xc3\xa9"});
  REQUIRE(req.code == 0);
  const auto again = run_cli({"sagemaker", "--plan", write_temp("utf8-job.json", req.out), "--env", "NOTE=" + long_value + "\xc3\xa8"});
  REQUIRE(again.code == 0);
  INFO(again.err);
  REQUIRE_THAT(again.err, Catch::Contains("Environment.NOTE ("));
  // every byte sequence of the warning is whole UTF-8
  const std::string& e = again.err;
  for (std::size_t i = 0; i < e.size();) {
    const auto c = static_cast<unsigned char>(e[i]);
    const std::size_t n = c < 0x80 ? 1 : (c >> 5) == 0x6 ? 2 : (c >> 4) == 0xE ? 3 : (c >> 3) == 0x1E ? 4 : 0;
    REQUIRE(n > 0);
    REQUIRE(i + n <= e.size());
    for (std::size_t k = 1; k < n; ++k) REQUIRE((static_cast<unsigned char>(e[i + k]) & 0xC0) == 0x80);
    i += n;
  }
}

TEST_CASE("bug: recommend --top with the comparison of instances or node counts is refused, not ignored", "[hardening][recommend]") {
  // with --tokens (or several instances, --nodes auto) recommend shows one plan per instance and node count: --top 3 did nothing
  const auto r = run_cli({"recommend", "Llama-3.2-1B", "--instance", "ml.p5en.48xlarge", "--tokens", "1B", "--top", "3"});
  CHECK(r.code == 2);
  CHECK(lines(r.err) == 1);
  CHECK_THAT(r.err, Catch::Contains("--top: the comparison"));
  CHECK(run_cli({"recommend", "Llama-3.2-1B", "--instance", "ml.p5en.48xlarge", "--tokens", "1B"}).code == 0);
  CHECK(run_cli({"recommend", "Llama-3.2-1B", "--instance", "ml.p5en.48xlarge", "--top", "3"}).code == 0);
}

TEST_CASE("bug: the node comparison says fewer nodes were not evaluated instead of 'needs at least N nodes'", "[hardening][recommend]") {
  // recommend Qwen3-0.6B --nodes 4 --tokens 1B said "one node is not enough; the model needs at least 4 nodes" of a model
  // that fits on one GPU: only 4 nodes were evaluated
  const auto r = run_cli({"recommend", "Qwen3-0.6B", "--instance", "ml.p5.48xlarge", "--nodes", "4", "--tokens", "1B"});
  REQUIRE(r.code == 0);
  CHECK_THAT(r.out, !Catch::Contains("needs at least") && Catch::Contains("fewer nodes were not evaluated"));
  const auto a = run_cli({"recommend", "Llama-3.1-70B", "--instance", "ml.p5.48xlarge", "--nodes", "auto", "--max-nodes", "4"});
  REQUIRE(a.code == 0);
  CHECK_THAT(a.out, Catch::Contains("one node is not enough; the fewest nodes evaluated that fit: "));  // 1 node evaluated
}

TEST_CASE("bug: recommend's node note says which counts it evaluated, not that the model needs the first that fits", "[hardening][recommend]") {
  // "the model needs at least 8 nodes" of Llama-3.1-405B on p6-b200 while 5 nodes fit: --nodes auto tries 1, 2, 4, 8 (a review)
  const auto r = run_cli({"recommend", "Llama-3.1-405B", "--instance", "ml.p6-b200.48xlarge", "--nodes", "auto", "--max-nodes", "8"});
  REQUIRE(r.code == 0);
  CHECK_THAT(r.out, !Catch::Contains("needs at least") &&
                        Catch::Contains("the fewest nodes evaluated that fit: 8 (64 GPUs); 4 node(s) did not, counts in between were not evaluated"));
  const auto five = run_cli({"recommend", "Llama-3.1-405B", "--instance", "ml.p6-b200.48xlarge", "--nodes", "5", "--top", "1"});
  CHECK(five.code == 0);  // a count in between fits
}

TEST_CASE("bug: recommend's saver names the offload the request asked for, and the hint quotes the plan's global batch", "[hardening][recommend]") {
  // "the cheapest memory saver that fits: QLoRA (NF4 base): ..., CPU offload optimizer" named QLoRA only, and compared it
  // with a full AdamW fine-tune without the offload asked; "with 4194304 tokens per step" of a plan running 4259840 (a review)
  const auto s = run_cli({"recommend", "Llama-3.1-405B", "--instance", "ml.p5.48xlarge", "--offload", "optimizer"});
  CHECK(s.code == 1);
  CHECK_THAT(s.out + s.err, Catch::Contains("the cheapest memory saver that fits: QLoRA (NF4 base), with the CPU offload asked (optimizer): "));
  const auto h = run_cli({"recommend", "Llama-3.1-405B", "--instance", "ml.p6-b200.48xlarge", "--nodes", "5", "--format", "json"});
  REQUIRE(h.code == 0);
  const auto j = nlohmann::json::parse(h.out);
  const auto runs = j["plans"][0]["config"]["global_batch_tokens"].get<std::int64_t>();
  REQUIRE(runs != 4194304);  // the accumulation rounds the global batch asked
  REQUIRE(j.contains("global_batch_hint"));
  CHECK_THAT(j["global_batch_hint"]["summary"].get<std::string>(), Catch::Contains("with " + std::to_string(runs) + " tokens per step"));
}

TEST_CASE("bug: recommend --format markdown carries the lines the table output prints under the table", "[hardening][recommend]") {
  // Markdown had "Why #1" and "Launch" only: no precision, communication, pipeline or global-batch line, and the memory
  // saver after the version footer as plain text (a review of the explanation lines)
  const auto t = run_cli({"recommend", "Llama-3.1-405B", "--instance", "ml.p6-b200.48xlarge", "--nodes", "5"});
  const auto md = run_cli({"recommend", "Llama-3.1-405B", "--instance", "ml.p6-b200.48xlarge", "--nodes", "5", "--format", "markdown"});
  REQUIRE(t.code == 0);
  REQUIRE(md.code == 0);
  for (const auto& [text_label, md_label] : {std::pair{"global batch: ", "**Global batch:** "}, {"precision: ", "**Precision:** "},
                                              {"communication: ", "**Communication:** "}}) {
    INFO(text_label);
    const auto at = t.out.find(std::string("\n") + text_label);
    REQUIRE(at != std::string::npos);
    const std::string line = t.out.substr(at + 1 + std::strlen(text_label), t.out.find('\n', at + 1) - at - 1 - std::strlen(text_label));
    CHECK_THAT(md.out, Catch::Contains(md_label + line));
  }
  CHECK(md.out.find("**Precision:**") < md.out.rfind("<sub>"));
  const auto none = run_cli({"recommend", "Llama-3.1-70B", "--instance", "ml.p5.48xlarge", "--format", "markdown"});
  CHECK(none.code == 1);
  const auto saver = none.out.find("**No full fine-tune fits;** the cheapest memory saver that fits: ");
  REQUIRE(saver != std::string::npos);
  CHECK(saver < none.out.rfind("<sub>"));
}

TEST_CASE("bug: recommend --seq auto's precision line names the sequence of a format's plan at another length", "[hardening][recommend]") {
  // "-1% tokens/s vs bf16" compared plan #1 (mxfp8, 2048) with bf16's best plan at 1024 without saying so (a review)
  const auto j = run_cli({"recommend", "Qwen3-0.6B", "--instance", "ml.p6-b200.48xlarge", "--seq", "auto", "--format", "json"});
  REQUIRE(j.code == 0);
  const auto d = nlohmann::json::parse(j.out);
  const std::string line = d["precision_explanation"].get<std::string>();
  const auto seq1 = d["plans"][0]["config"]["seq_len"].get<std::int64_t>();
  INFO(line);
  const auto at = line.find("vs bf16 at sequence ");
  REQUIRE(at != std::string::npos);  // this search's bf16 plan runs another length than plan #1
  CHECK(std::stoll(line.substr(at + std::strlen("vs bf16 at sequence "))) != seq1);
}

TEST_CASE("bug: recommend's why and precision lines name what was compared", "[hardening][recommend]") {
  // "the runner-up differs by same knobs" of a runner-up with another optimizer; "low-precision GEMMs do not pay for
  // their casts" when --precision bf16 searched nothing else (mxfp8 is 29 % faster there); "nvfp4 needs --numerics
  // aggressive" to a LoRA search, which runs bf16 only (a review of the explanation lines)
  const auto r = run_cli({"recommend", "Llama-3.1-8B", "--instance", "ml.p5.48xlarge", "--optimizer", "auto", "--format", "json", "--top", "2"});
  REQUIRE(r.code == 0);
  const auto j = nlohmann::json::parse(r.out);
  REQUIRE(j["plans"].size() >= 2);
  const auto& a = j["plans"][0]["config"];
  const auto& b = j["plans"][1]["config"];
  const std::string why = j["explanation"].get<std::string>();
  INFO(why);
  CHECK_THAT(why, !Catch::Contains("same knobs"));
  if (a["optimizer"] != b["optimizer"])
    CHECK_THAT(why, Catch::Contains("optim " + a["optimizer"].get<std::string>() + " vs " + b["optimizer"].get<std::string>()));
  const auto only = run_cli({"recommend", "Llama-3.1-8B", "--instance", "ml.p6-b200.48xlarge", "--precision", "bf16"});
  REQUIRE(only.code == 0);
  CHECK_THAT(only.out, Catch::Contains("; the only format searched") && !Catch::Contains("do not pay for their casts"));
  const auto lora = run_cli({"recommend", "Llama-3.1-8B", "--instance", "ml.p6-b200.48xlarge", "--finetune", "lora"});
  REQUIRE(lora.code == 0);
  CHECK_THAT(lora.out, !Catch::Contains("nvfp4 needs --numerics aggressive"));
  const auto compute = run_cli({"recommend", "Llama-3.1-8B", "--instance", "ml.p6-b200.48xlarge"});
  CHECK_THAT(compute.out, Catch::Contains("of a bf16 step's compute"));
}

TEST_CASE("bug: a pipeline plan's exposed P2P time never exceeds its P2P total", "[hardening][pipeline]") {
  // "communication 0.005 s, exposed 0.009 s": the total counted the rank's own sends, the exposed time the chain of
  // warm-up and cool-down sends of the other stages too
  for (const std::vector<std::string>& extra : {std::vector<std::string>{"--pp", "8", "--stack", "torchtitan", "--ac", "full", "--grad-accum", "8"},
                                               std::vector<std::string>{"--pp", "4", "--tp", "2", "--stack", "megatron", "--sharding", "optimizer",
                                                                        "--ac", "full", "--grad-accum", "1"},
                                               std::vector<std::string>{"--pp", "4", "--pp-schedule", "interleaved", "--vpp", "2", "--ac", "full",
                                                                        "--grad-accum", "8", "--sharding", "optimizer"}}) {
    std::vector<std::string> a{"Llama-3.1-70B", "--instance", "ml.p5.48xlarge"};
    a.insert(a.end(), extra.begin(), extra.end());
    const auto j = test::estimate_json(a);
    const auto& t = j["throughput"];
    INFO(t.dump());
    CHECK(t["exposed_by_parallelism_s"]["pipeline_parallel"].get<double>() <= t["communication_by_parallelism_s"]["pipeline_parallel"].get<double>() + 1e-12);
    CHECK(t["exposed_communication_s"].get<double>() <= t["communication_s"].get<double>() + 1e-12);
  }
}

TEST_CASE("bug: --bf16-layers that leave no block in the low-precision format are refused, not clamped", "[hardening][precision]") {
  const auto r = run_cli({"estimate", "Llama-3.1-8B", "--gpu", "h100", "--precision", "fp8", "--bf16-layers", "last:100"});
  CHECK(r.code == 2);
  CHECK(lines(r.err) == 1);
  CHECK_THAT(r.err, Catch::Contains("--bf16-layers") && Catch::Contains("32"));
  CHECK(run_cli({"estimate", "Llama-3.1-8B", "--gpu", "h100", "--precision", "fp8", "--bf16-layers", "first:16,last:16"}).code == 2);
  CHECK(run_cli({"estimate", "Llama-3.1-8B", "--gpu", "h100", "--precision", "fp8", "--bf16-layers", "first:1,last:2"}).code == 0);
}

TEST_CASE("bug: the Megatron stack defaults to its own data parallelism, and a bare GPU's JSON counts GPU-hours", "[hardening][cli]") {
  // --stack megatron without --sharding took the default 'full' (FSDP2), which the stack refuses: exit 2 for a plain command
  const auto m = run_cli({"estimate", "Llama-3.1-70B", "--instance", "ml.p5.48xlarge", "--pp", "4", "--tp", "2", "--stack", "megatron",
                          "--format", "json"});
  INFO(m.err);
  REQUIRE(m.code == 0);
  CHECK(nlohmann::json::parse(m.out)["config"]["sharding"] == "none");
  // a bare --gpu: the JSON's hours are GPU-hours (it said instance_hours)
  const auto g = test::estimate_json({"Llama-3.1-8B", "--gpu", "h100", "--gpus", "8", "--tokens", "1B"});
  CHECK(g["training"].contains("gpu_hours"));
  CHECK_FALSE(g["training"].contains("instance_hours"));
  const auto i = test::estimate_json({"Llama-3.1-8B", "--instance", "ml.p5.48xlarge", "--tokens", "1B"});
  CHECK(i["training"].contains("instance_hours"));
}

// ---- a helper's bad-input sweep (2026-12-07): each case exited 0 with a wrong, clamped or overflowed result

namespace {
std::string slurp(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}
}  // namespace

TEST_CASE("bug: a global batch past the plan limits is refused, not overflowed into a negative token count", "[hardening][cli]") {
  // 1,048,576 GPUs x mbs 65,536 x accum 1,048,576 x 128 tokens: "global batch 72057594037927936 sequences
  // (-9223372036854775808 tokens)", exit 0 (every flag within its own range)
  check_usage_error(run_cli({"estimate", "Llama-3.2-1B", "--gpu", "h100", "--gpus", "1048576", "--mbs", "65536", "--seq", "128",
                             "--grad-accum", "1048576"}),
                    "global batch");
  const std::string plan = temp_path("huge_batch.json").string();
  std::ofstream(plan) << R"({"model": "Llama-3.2-1B", "gpu": "h100", "gpus": 1048576, "micro_batch_size": 65536, "seq_len": 128,
    "grad_accum": 1048576})";
  const auto c = run_cli({"check", plan, "--format", "json"});
  CHECK(c.code == 1);  // a rule the plan breaks: a check finding (BWP010), as for every rule
  CHECK_THAT(c.out, Catch::Contains("the global batch of 65536 x 1048576 x 1048576"));
  CHECK_THAT(c.out + c.err, !Catch::Contains("-9223372036854775808") && !Catch::Contains("\"global_batch_tokens\": -"));
  fs::remove(plan);
}

TEST_CASE("bug: recommend never proposes an accumulation its own plan reader refuses", "[hardening][planner]") {
  // --global-batch-tokens 1T on one H100: grad_accum 61,035,157 emitted, and `check` of the emitted file exit 2.
  // Now only micro-batches of 233 or more could reach 1T within 1,048,576 micro-batches, and none fits
  const auto r = run_cli({"recommend", "Llama-3.2-1B", "--gpu", "h100", "--global-batch-tokens", "1T", "--emit", "plan"});
  CHECK(r.code == 1);
  CHECK_THAT(r.out, !Catch::Contains("\"grad_accum\""));
  CHECK_THAT(r.err, Catch::Contains("more needed over 1048576 micro-batches per step"));  // (it said only "try more nodes")
  // past what the largest micro-batch searched reaches at all: the flag is named (exit 2)
  check_usage_error(run_cli({"recommend", "Llama-3.2-1B", "--gpu", "h100", "--global-batch-tokens", "2T"}), "--global-batch-tokens 2T");
  const auto ok = run_cli({"recommend", "Llama-3.2-1B", "--instance", "ml.p5.48xlarge", "--global-batch-tokens", "16B", "--emit", "plan"});
  INFO(ok.err);
  REQUIRE(ok.code == 0);
  CHECK(nlohmann::json::parse(ok.out)["grad_accum"].get<std::int64_t>() <= 1'048'576);
  // check's "best plan found" hint stays within the ranges too (it suggested grad_accum 134217728)
  const std::string plan = temp_path("big_accum.json").string();
  std::ofstream(plan) << R"({"model": "Llama-3.1-8B", "gpu": "h100", "gpus": 8, "micro_batch_size": 64, "seq_len": 4096,
    "grad_accum": 1048576})";
  const auto c = run_cli({"check", plan});
  CHECK_THAT(c.out, !Catch::Contains("grad_accum 134217728"));
  fs::remove(plan);
}

TEST_CASE("bug: -o over an input file is refused by check, estimate --emit plan and recommend --emit plan", "[hardening][cli]") {
  const fs::path plan = temp_path("self_plan.json"), model = temp_path("self_model.json");
  std::ofstream(plan) << R"({"model": "Llama-3.2-1B", "gpu": "h100", "gpus": 1})";
  std::ofstream(model) << llama_like;
  check_usage_error(run_cli({"check", plan.string(), "-o", plan.string()}), "is the input");
  CHECK(slurp(plan).find("Llama-3.2-1B") != std::string::npos);  // the plan is still there
  check_usage_error(run_cli({"estimate", model.string(), "--gpu", "h100", "--emit", "plan", "-o", model.string()}), "is the input");
  check_usage_error(run_cli({"recommend", model.string(), "--gpu", "h100", "--emit", "plan", "-o", model.string()}), "is the input");
  CHECK(slurp(model).find("\"model_type\"") != std::string::npos);
  fs::remove(plan);
  fs::remove(model);
}

TEST_CASE("bug: estimate --check exits 1 on a plan that does not fit with --emit plan too", "[hardening][cli]") {
  const auto r = run_cli({"estimate", "Llama-3.1-70B", "--gpu", "h100", "--check", "--emit", "plan"});
  CHECK(r.code == 1);
  CHECK_THAT(r.out, Catch::Contains("\"model\""));  // the plan is still written
}

TEST_CASE("bug: an emitted plan names its model config relative to the plan file", "[hardening][plan]") {
  // `estimate m/l1b.json --emit plan -o p/x.json` wrote "model": "m/l1b.json" (relative to the working directory),
  // which `check p/x.json` looks up beside the plan
  const fs::path dir = temp_path("relmodel");
  fs::remove_all(dir);
  fs::create_directories(dir / "m");
  fs::create_directories(dir / "p");
  std::ofstream(dir / "m" / "l1b.json") << llama_like;
  const fs::path cwd = fs::current_path();
  fs::current_path(dir);
  const auto r = run_cli({"estimate", "m/l1b.json", "--gpu", "h100", "--emit", "plan", "-o", "p/x.json"});
  fs::current_path(cwd);
  INFO(r.err);
  REQUIRE(r.code == 0);
  CHECK(nlohmann::json::parse(slurp(dir / "p" / "x.json"))["model"] == "../m/l1b.json");
  CHECK(run_cli({"check", (dir / "p" / "x.json").string()}).code == 0);  // from any working directory
  // a directory holding config.json, too (a review: it stayed relative to the working directory)
  fs::create_directories(dir / "mdl");
  std::ofstream(dir / "mdl" / "config.json") << llama_like;
  fs::current_path(dir);
  const auto d = run_cli({"estimate", "mdl", "--gpu", "h100", "--emit", "plan", "-o", "p/y.json"});
  // and -o over the model config a --plan file names (a review: it became a plan)
  const auto over = run_cli({"estimate", "--plan", "p/x.json", "--emit", "plan", "-o", "m/l1b.json"});
  // "-" is stdout (it wrote a file named "-")
  const auto dash = run_cli({"estimate", "m/l1b.json", "--gpu", "h100", "--emit", "plan", "-o", "-"});
  fs::current_path(cwd);
  REQUIRE(d.code == 0);
  CHECK(nlohmann::json::parse(slurp(dir / "p" / "y.json"))["model"] == "../mdl");
  CHECK(run_cli({"check", (dir / "p" / "y.json").string()}).code == 0);
  check_usage_error(over, "is the input");
  CHECK(slurp(dir / "m" / "l1b.json").find("\"model_type\"") != std::string::npos);
  CHECK(dash.code == 0);
  CHECK_THAT(dash.out, Catch::Contains("\"model\""));
  CHECK_FALSE(fs::exists(dir / "-"));
  fs::remove_all(dir);
}

TEST_CASE("bug: --power-limit above the GPU's rated power is refused, not clamped", "[hardening][hardware]") {
  check_usage_error(run_cli({"--power-limit", "5000", "estimate", "Llama-3.1-8B", "--gpu", "h100"}), "rated board power");
  CHECK(run_cli({"--power-limit", "350", "estimate", "Llama-3.1-8B", "--gpu", "h100"}).code == 0);
  CHECK(run_cli({"--power-limit", "700", "estimate", "Llama-3.1-8B", "--gpu", "h100"}).code == 0);
}

TEST_CASE("bug: an empty value is an error for every option, not its default", "[hardening][cli]") {
  check_usage_error(run_cli({"recommend", "Llama-3.2-1B", "--gpu", "h100", "--precisions", ""}), "--precisions");
  check_usage_error(run_cli({"estimate", "Llama-3.2-1B", "--gpu", "h100", "--tokens", ""}), "--tokens");
  check_usage_error(run_cli({"estimate", "Llama-3.2-1B", "--gpu", "h100", "--emit", "plan", "-o", ""}), "-o");
  check_usage_error(run_cli({"sagemaker", "Llama-3.2-1B", "--instance", "ml.p5.48xlarge", "--region", ""}), "--region");
  check_usage_error(run_cli({"sagemaker", "Llama-3.2-1B", "--instance", "ml.p5.48xlarge", "--entry-point", ""}), "--entry-point");
}

TEST_CASE("bug: measurement records that no run can produce are refused, not clamped", "[hardening][calibration]") {
  const std::string src = std::string(BWPLAN_SOURCE_DIR) + "/tests/data/probe-records.jsonl";
  const std::string text = slurp(src);
  auto lines_of = [](const std::string& t) {
    std::vector<std::string> out;
    std::size_t a = 0;
    while (a < t.size()) {
      const std::size_t b = t.find('\n', a);
      out.push_back(t.substr(a, b == std::string::npos ? std::string::npos : b - a));
      if (b == std::string::npos) break;
      a = b + 1;
    }
    return out;
  };
  const std::vector<std::string> ls = lines_of(text);
  REQUIRE(ls.size() > 2);
  auto with = [&](const std::function<void(nlohmann::json&)>& edit) {
    nlohmann::json row = nlohmann::json::parse(ls[1]);
    edit(row);
    const fs::path f = temp_path("records.jsonl");
    std::ofstream(f) << ls[0] << "\n" << row.dump() << "\n";
    auto r = run_cli({"validate", f.string()});
    fs::remove(f);
    return r;
  };
  check_usage_error(with([](nlohmann::json& r) { r["grad_accum"] = 0; }), "/grad_accum");
  check_usage_error(with([](nlohmann::json& r) { r["grad_accum"] = 2.5; }), "/grad_accum");
  check_usage_error(with([](nlohmann::json& r) { r["gpu"] = 5; }), "/gpu");
  check_usage_error(with([](nlohmann::json& r) { r["plan"] = nlohmann::json::array(); }), "/plan");
  check_usage_error(with([](nlohmann::json& r) { r["peak_reserved"] = 1e15; r["peak_allocated"] = 1e15; }), "/peak_reserved");
  check_usage_error(with([](nlohmann::json& r) { r["peak_reserved"] = 1000; r["peak_allocated"] = 2000; }), "/peak_reserved");
  check_usage_error(with([](nlohmann::json& r) { r["tokens_per_s"] = r["tokens_per_s"].get<double>() * 20; }), "/tokens_per_s");
  // calibrate reads them as validate does
  {
    nlohmann::json row = nlohmann::json::parse(ls[1]);
    row["tokens_per_s"] = row["tokens_per_s"].get<double>() * 20;
    const fs::path f = temp_path("records-cal.jsonl");
    std::ofstream(f) << ls[0] << "\n" << row.dump() << "\n";
    check_usage_error(run_cli({"calibrate", f.string(), "-o", temp_path("cal-out.json").string()}), "/tokens_per_s");
    fs::remove(f);
  }
  // a ground-truth row's own device (it was ignored: evaluated on the env line's GPU)
  const std::string models = (fs::path(BWPLAN_SOURCE_DIR) / "configs" / "models").string();
  const fs::path gt = temp_path("gt-gpu.jsonl");
  std::ofstream(gt) << R"({"model": "llama-3.2-1b", "recipe": "amp", "mbs": 1, "seq": 2048, "ac": "none", "gpu": "bogus-gpu", "ok": true, )"
                    << R"("tokens_per_s": 35000, "peak_allocated": 24000000000, "peak_reserved": 25000000000})" << "\n";
  check_usage_error(run_cli({"validate", gt.string(), "--models", models}), "/gpu: no GPU of the catalog matches 'bogus-gpu'");
  fs::remove(gt);
}

TEST_CASE("bug: a model config's mlp_only_layers and text_config, and a catalog's aliases and version, are checked", "[hardening][model]") {
  // a review: [-1, 1000] was ignored, a string text_config read as a missing hidden_size, an alias to a missing GPU
  // loaded (failing later without the file's name), {"h100": "b200"} made --gpu h100 a B200, schema_version 2 passed
  const fs::path moe = temp_path("qwen3moe.json");
  std::ofstream(moe) << R"({"model_type": "qwen3_moe", "hidden_size": 2048, "num_hidden_layers": 4, "num_attention_heads": 32,
    "num_key_value_heads": 4, "head_dim": 128, "intermediate_size": 6144, "moe_intermediate_size": 768, "num_experts": 8,
    "num_experts_per_tok": 2, "vocab_size": 151936, "mlp_only_layers": [-1, 1000]})";
  check_usage_error(run_cli({"estimate", moe.string(), "--gpu", "h100"}), "/mlp_only_layers/0: layer -1 is not one of the model's 4");
  const fs::path gemma = temp_path("gemma3.json");
  std::ofstream(gemma) << R"({"model_type": "gemma3", "text_config": "x"})";
  check_usage_error(run_cli({"estimate", gemma.string(), "--gpu", "h100"}), "/text_config: expected an object");
  const fs::path hw = temp_path("aliases.json");
  std::ofstream(hw) << R"({"aliases": {"x1": "nonexistent"}})";
  check_usage_error(run_cli({"--hardware", hw.string(), "estimate", "Llama-3.2-1B", "--gpu", "h100"}), "/aliases/x1");
  std::ofstream(hw) << R"({"aliases": {"h100": "b200"}})";
  check_usage_error(run_cli({"--hardware", hw.string(), "estimate", "Llama-3.2-1B", "--gpu", "h100"}), "is a GPU's own id");
  // a GPU whose id is an alias: the alias kept winning (a review: --gpu h100-sxm stayed the bundled h100)
  std::ofstream(hw) << R"({"gpus": [{"id": "h100-sxm", "architecture": "hopper", "hbm_total_mib": 81559, "hbm_bandwidth_tb_per_s": 3.35,
    "interconnect": "nvlink", "nvlink_gb_per_s_per_direction": 450, "power_limit_w": 700, "dense_tflop_per_s": {"bf16": 989}}]})";
  check_usage_error(run_cli({"--hardware", hw.string(), "estimate", "Llama-3.2-1B", "--gpu", "h100-sxm"}), "is an alias of h100");
  // a default power limit above the rated power (it was reported as a --power-limit nobody gave)
  std::ofstream(hw) << R"({"gpus": [{"id": "my-h100", "architecture": "hopper", "hbm_total_mib": 81559, "hbm_bandwidth_tb_per_s": 3.35,
    "interconnect": "nvlink", "nvlink_gb_per_s_per_direction": 450, "power_limit_w": 800, "rated_power_w": 700,
    "dense_tflop_per_s": {"bf16": 989}}]})";
  check_usage_error(run_cli({"--hardware", hw.string(), "estimate", "Llama-3.2-1B", "--gpu", "my-h100"}), "/gpus/0/power_limit_w");
  std::ofstream(hw) << R"({"schema_version": 2, "aliases": {"my-b200": "b200"}})";
  check_usage_error(run_cli({"--hardware", hw.string(), "estimate", "Llama-3.2-1B", "--gpu", "my-b200"}), "/schema_version");
  std::ofstream(hw) << R"({"schema_version": 1, "aliases": {"my-b200": "b200"}})";
  CHECK(run_cli({"--hardware", hw.string(), "estimate", "Llama-3.2-1B", "--gpu", "my-b200"}).code == 0);
  for (const auto& f : {moe, gemma, hw}) fs::remove(f);
}

TEST_CASE("bug: a calibration profile entry for a GPU the catalog lacks is said, not applied silently", "[hardening][calibration]") {
  const std::string runs = std::string(BWPLAN_SOURCE_DIR) + "/tests/data/probe-records.jsonl";
  const fs::path prof = temp_path("profile.json");
  const auto made = run_cli({"calibrate", runs, "-o", prof.string()});
  INFO(made.err);
  REQUIRE(made.code == 0);
  auto j = nlohmann::json::parse(slurp(prof));
  REQUIRE(!j["entries"].empty());
  j["entries"][0]["gpu"] = "abc";
  std::ofstream(prof) << j.dump(2);
  const auto r = run_cli({"--calibration", prof.string(), "estimate", "Llama-3.2-1B", "--gpu", "h200"});
  CHECK(r.code == 0);
  CHECK_THAT(r.err, Catch::Contains("/entries/0/gpu: 'abc' is no GPU of the catalog"));
  fs::remove(prof);
}

TEST_CASE("bug: Megatron's sequence parallel needs a sequence length divisible by tp", "[hardening][stacks]") {
  // a review: --seq 4095 at tp 2 passed; Megatron's _split_along_first_dim asserts the split is even
  const auto r = run_cli({"estimate", "Llama-3.1-8B", "--gpu", "h100", "--gpus", "8", "--stack", "megatron", "--tp", "2", "--seq", "4095"});
  CHECK(r.code == 2);
  CHECK_THAT(r.err, Catch::Contains("not a multiple of tp = 2"));
  CHECK(run_cli({"estimate", "Llama-3.1-8B", "--gpu", "h100", "--gpus", "8", "--stack", "megatron", "--tp", "2", "--seq", "4096"}).code == 0);
  // with cp 2 each tp group splits seq / cp: 4100 / 2 = 2050 over tp 4 is not even
  const auto cp = run_cli({"estimate", "Llama-3.1-8B", "--gpu", "h100", "--gpus", "8", "--stack", "megatron", "--tp", "4", "--cp", "2",
                           "--seq", "4100", "--sharding", "optimizer"});
  CHECK(cp.code == 2);
  CHECK_THAT(cp.err, Catch::Contains("cp x tp = 8"));
}

TEST_CASE("bug: recommend refuses SageMaker job settings without an --emit that writes a job", "[hardening][cli]") {
  // a review: --role-arn without --emit was accepted and changed nothing
  check_usage_error(run_cli({"recommend", "Llama-3.2-1B", "--gpu", "h100", "--role-arn", "x"}), "--role-arn");
  check_usage_error(run_cli({"recommend", "Llama-3.2-1B", "--gpu", "h100", "--emit", "plan", "--role-arn", "x"}), "not --emit plan");
}

// A helper's audit of bad and contradictory input (2026-12-07): each of these was accepted with a value silently
// changed or dropped.
TEST_CASE("bug: contradictory or repeated input is refused, not silently resolved", "[hardening][cli][bugs]") {
  const std::vector<std::string> creds{"--role-arn", "arn:aws:iam::111122223333:role/SageMakerTrainingExecutionRole", "--output-s3",
                                       "s3://amzn-s3-demo-bucket/bwplan/"};
  auto with = [](std::vector<std::string> a, const std::vector<std::string>& b) {
    a.insert(a.end(), b.begin(), b.end());
    return a;
  };
  SECTION("a key given twice in one JSON object (nlohmann kept the last value)") {
    std::string cfg = llama_like;
    cfg.insert(cfg.find("\"num_hidden_layers\""), "\"hidden_size\": 4096, ");
    check_usage_error(run_cli({"estimate", write_temp("dup.json", cfg), "--gpu", "h200"}), "/hidden_size: duplicate key 'hidden_size'");
    const auto plan = write_temp("dup-plan.json", R"({"model": "Llama-3.2-1B", "gpu": "h200", "micro_batch_size": 1,
  "micro_batch_size": 64})");
    const auto c = run_cli({"check", plan});
    CHECK(c.code == 2);
    CHECK_THAT(c.out + c.err, Catch::Contains("duplicate key 'micro_batch_size'"));
    // the same key in two objects is fine
    const auto ok = write_temp("nodup.json", R"({"model": "Llama-3.2-1B", "gpu": "h200", "check": {"disable": []}, "micro_batch_size": 1})");
    CHECK(run_cli({"check", ok}).code == 0);
  }
  SECTION("--gpus that leave instances empty contradict --nodes; a bare GPU's --nodes counts GPUs") {
    check_usage_error(run_cli({"estimate", "Llama-3.1-8B", "--instance", "ml.p5.48xlarge", "--gpus", "4", "--nodes", "4"}),
                      "4 GPUs leave 3 of the 4 x ml.p5.48xlarge without a GPU: give gpus above 24 or fewer nodes");
    const auto part = run_cli({"estimate", "Llama-3.1-8B", "--instance", "ml.p5.48xlarge", "--gpus", "28", "--nodes", "4", "--format", "json"});
    REQUIRE(part.code == 0);  // a part of the last instance is still a layout
    CHECK(nlohmann::json::parse(part.out)["config"]["world_size"] == 28);
    check_usage_error(run_cli({"estimate", "Llama-3.1-8B", "--gpu", "h200", "--gpus", "4", "--nodes", "8"}),
                      "--nodes: with a bare GPU nodes count GPUs: 8 contradicts gpus 4; give one of them, or an instance");
    const auto bare = run_cli({"check", write_temp("bare-nodes.json", R"({"model": "Llama-3.1-8B", "gpu": "h100", "nodes": 2, "gpus": 8})")});
    CHECK(bare.code == 2);  // check read the same plan as 8 GPUs (an audit of this fix)
    CHECK_THAT(bare.out + bare.err, Catch::Contains("/nodes: with a bare GPU nodes count GPUs: 2 contradicts gpus 8"));
    CHECK(run_cli({"estimate", "Llama-3.1-8B", "--gpu", "h200", "--gpus", "8", "--nodes", "8"}).code == 0);
    const auto plan = write_temp("empty-nodes.json", R"({"model": "Llama-3.1-8B", "instance": "ml.p5.48xlarge", "gpus": 4, "nodes": 4})");
    const auto c = run_cli({"check", plan});
    CHECK(c.code == 2);
    CHECK_THAT(c.out + c.err, Catch::Contains("without a GPU"));
  }
  SECTION("SageMaker tags and environment variables given twice, bwplan's own tags, a long base job name") {
    const std::vector<std::string> base{"sagemaker", "Llama-3.2-1B", "--instance", "ml.p5.48xlarge"};
    check_usage_error(run_cli(with(with(base, creds), {"--tag", "a=b", "--tag", "a=c"})), "--tag a: given twice; tag keys must be unique");
    check_usage_error(run_cli(with(with(base, creds), {"--tag", "bwplan:version=x"})), "--tag bwplan:version: set by bwplan");
    check_usage_error(run_cli(with(with(base, creds), {"--env", "A=1", "--env", "A=2"})), "--env A: given twice");
    const auto r = run_cli(with(with(base, creds), {"--base-job-name", std::string(70, 'a')}));
    INFO(r.err);
    REQUIRE(r.code == 0);
    CHECK_THAT(r.err, Catch::Contains("--base-job-name: 70 characters; the job name keeps the first 39 before its timestamp"));
    CHECK(nlohmann::json::parse(r.out)["TrainingJobName"].get<std::string>().rfind(std::string(39, 'a') + "-", 0) == 0);
  }
  SECTION("a ground-truth row's grad_accum is read and checked") {
    const fs::path dir = temp_path("gt");
    fs::create_directories(dir / "models");
    fs::copy_file(fs::path(BWPLAN_SOURCE_DIR) / "configs" / "models" / "llama-3.2-1b.json", dir / "models" / "Llama-3.2-1B.json",
                  fs::copy_options::overwrite_existing);
    auto row = [&](const std::string& ga) {
      std::ofstream(dir / "runs.jsonl") << R"({"model":"Llama-3.2-1B","recipe":"amp","mbs":1,"seq":2048,"ac":"none",)" << ga
                                        << R"("ok":true,"tokens_per_s":35812.6,"peak_allocated":24251771392,"peak_reserved":25188892672})"
                                        << "\n";
      return run_cli({"validate", (dir / "runs.jsonl").string(), "--format", "json"});
    };
    check_usage_error(row(R"("grad_accum":0,)"), "/grad_accum: expected an integer between 1 and 1048576, got 0");
    const auto one = row(""), four = row(R"("grad_accum":4,)");
    REQUIRE(one.code == 0);
    REQUIRE(four.code == 0);
    const double t1 = nlohmann::json::parse(one.out)["rows"][0]["tokens_per_s"]["estimated"];
    const double t4 = nlohmann::json::parse(four.out)["rows"][0]["tokens_per_s"]["estimated"];
    CHECK(t4 > t1);  // the optimizer step amortized over 4 micro-batches: the row's grad_accum is estimated
  }
  SECTION("calibrate says when a constant is fitted to a bound of its range") {
    std::ifstream in(fs::path(BWPLAN_SOURCE_DIR) / "tests" / "data" / "probe-records.jsonl");
    std::ofstream out(temp_path("slow.jsonl"));
    for (std::string line; std::getline(in, line);) {
      if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
      auto j = nlohmann::json::parse(line);
      if (j.contains("tokens_per_s") && j["tokens_per_s"].is_number()) j["tokens_per_s"] = j["tokens_per_s"].get<double>() / 100;
      out << j.dump() << "\n";
    }
    out.close();
    const auto r = run_cli({"calibrate", temp_path("slow.jsonl").string(), "-o", temp_path("slow.prof.json").string()});
    INFO(r.out << r.err);
    CHECK(r.code == 0);
    CHECK_THAT(r.err, Catch::Contains("fitted to its lower bound"));
    CHECK_THAT(r.out, Catch::Contains("at its lower bound"));
  }
  SECTION("a job emitted under --power-limit, --attention-kernel or --calibration says it does not record them; a plan file only --calibration") {
    const auto e = run_cli({"--power-limit", "500", "--attention-kernel", "fa2", "estimate", "Llama-3.1-8B", "--instance", "ml.p5.48xlarge",
                            "--emit", "plan"});
    REQUIRE(e.code == 0);
    CHECK_THAT(e.err, !Catch::Contains("does not record"));  // (recorded: power_limit_w, attention_kernel)
    const auto c = run_cli({"--calibration", "none.json", "estimate", "Llama-3.1-8B", "--instance", "ml.p5.48xlarge", "--emit", "plan"});
    CHECK_THAT(c.err, Catch::Contains("the plan file does not record --calibration none.json:"));
    const auto s = run_cli(with({"--power-limit", "500", "sagemaker", "Llama-3.2-1B", "--instance", "ml.p5.48xlarge"}, creds));
    REQUIRE(s.code == 0);
    CHECK_THAT(s.err, Catch::Contains("the SageMaker job does not record --power-limit 500"));
    const auto quiet = run_cli({"estimate", "Llama-3.1-8B", "--instance", "ml.p5.48xlarge", "--emit", "plan"});
    CHECK_THAT(quiet.err, !Catch::Contains("does not record"));
  }
}

// The plan loop dropped two global options (an audit): a plan emitted under --power-limit 500 read back at the catalog's
// 700 W, 28 % faster, and --attention-kernel fa2 as the fused kernel; a warning said so, the plan did not keep them.
TEST_CASE("bug: a plan file keeps --power-limit and --attention-kernel, and estimate --plan and check use them", "[hardening][plan][bugs]") {
  auto tokens = [](const test::cli_result& r) {
    INFO(r.out << r.err);
    REQUIRE(r.code == 0);
    return nlohmann::json::parse(r.out)["throughput"]["tokens_per_s"].get<double>();
  };
  const std::vector<std::string> base{"estimate", "Llama-3.1-8B", "--gpu", "h100", "--gpus", "8", "--mbs", "2", "--seq", "8192", "--ac", "full"};
  auto args = [&](std::vector<std::string> pre, std::vector<std::string> post) {
    pre.insert(pre.end(), base.begin(), base.end());
    pre.insert(pre.end(), post.begin(), post.end());
    return pre;
  };
  const double capped = tokens(run_cli(args({"--power-limit", "500", "--attention-kernel", "fa2"}, {"--format", "json"})));
  const double plain = tokens(run_cli(args({}, {"--format", "json"})));
  CHECK(capped < 0.9 * plain);  // 500 of 700 W and FlashAttention-2: a different estimate
  const std::string file = temp_path("capped.plan.json").string();
  const auto emitted = run_cli(args({"--power-limit", "500", "--attention-kernel", "fa2"}, {"--emit", "plan", "-o", file}));
  REQUIRE(emitted.code == 0);
  const auto j = io::read_json_file(file);
  CHECK(j["power_limit_w"] == 500);
  CHECK(j["attention_kernel"] == "fa2");
  // read back without the flags: the plan's own limit and kernel (it was the catalog's 700 W and fused kernel)
  CHECK(tokens(run_cli({"estimate", "--plan", file, "--format", "json"})) == Approx(capped).epsilon(1e-9));
  // a flag given as well wins over the file, as every flag does
  CHECK(tokens(run_cli({"--power-limit", "700", "--attention-kernel", "fused", "estimate", "--plan", file, "--format", "json"})) ==
        Approx(plain).epsilon(1e-9));
  // check holds the plan to the same estimate
  const auto chk = run_cli({"check", file, "--format", "json"});
  INFO(chk.out << chk.err);
  REQUIRE(chk.code == 0);
  CHECK(nlohmann::json::parse(chk.out)["plans"][0]["estimate"]["throughput"]["tokens_per_s"].get<double>() == Approx(capped).epsilon(1e-9));
  CHECK_THAT(run_cli({"check", file}).out, Catch::Contains("on h100 (at 500 W of its rated 700 W, FlashAttention-2), mbs 2"));
  // a SageMaker job cannot carry them (the instance runs at its own limit): it says so, its plan.json leaves them out
  const fs::path src = temp_path("capped-src");
  fs::remove_all(src);
  const auto job = run_cli({"sagemaker", "--plan", file, "--instance", "ml.p5.48xlarge", "--role-arn",
                            "arn:aws:iam::111122223333:role/SageMakerTrainingExecutionRole", "--output-s3", "s3://amzn-s3-demo-bucket/bwplan/",
                            "--source-dir", src.string()});
  INFO(job.err);
  REQUIRE(job.code == 0);
  CHECK_THAT(job.err, Catch::Contains("the SageMaker job does not record the plan's power_limit_w 500, the plan's attention_kernel fa2"));
  const auto sent = io::read_json_file(src / "plan.json");
  CHECK(!sent.contains("power_limit_w"));
  CHECK(!sent.contains("attention_kernel"));
  CHECK(job.out.find("power_limit") == std::string::npos);
  // a limit above the GPU's rating names the file and the member, as the flag's does
  auto bad = j;
  bad["power_limit_w"] = 900;
  const std::string bad_file = temp_path("over.plan.json").string();
  std::ofstream(bad_file) << bad.dump(2);
  const auto over = run_cli({"estimate", "--plan", bad_file});
  CHECK(over.code == 2);
  CHECK_THAT(over.err, Catch::Contains(bad_file) && Catch::Contains("/power_limit_w") && Catch::Contains("above h100's rated board power, 700 W"));
  const auto over_check = run_cli({"check", bad_file});
  CHECK(over_check.code == 2);
  CHECK_THAT(over_check.out + over_check.err, Catch::Contains("/power_limit_w") && Catch::Contains("above h100's rated board power"));
  bad["power_limit_w"] = 500;
  bad["attention_kernel"] = "fa3";
  std::ofstream(bad_file) << bad.dump(2);
  CHECK_THAT(run_cli({"estimate", "--plan", bad_file}).err, Catch::Contains("/attention_kernel") && Catch::Contains("unknown value 'fa3'"));
}

// estimate --plan (and report, sweep, sagemaker --plan) took a plan whose check.disable names no rule, which check
// refuses (an audit): the same file was fine for one command and unusable for the next.
TEST_CASE("bug: every command that reads a plan file refuses an unknown rule ID in check.disable, as check does", "[hardening][plan][bugs]") {
  const std::string file = temp_path("badrule.plan.json").string();
  std::ofstream(file) << R"({"model": "Llama-3.2-1B", "gpu": "h100", "gpus": 1, "check": {"disable": ["BWP004", "BWP07"]}})";
  for (const std::vector<std::string>& args : {std::vector<std::string>{"estimate", "--plan", file}, {"check", file}, {"sweep", "--plan", file, "--vary", "mbs=1,2"}}) {
    const auto r = run_cli(args);
    INFO(args[0] << ": " << r.out << r.err);
    CHECK(r.code == 2);
    CHECK_THAT(r.out + r.err, Catch::Contains("/check/disable/1: unknown rule ID 'BWP07' (did you mean 'BWP007'?)"));
  }
}

// The same audit: a value changed on the way (sweep named the capped value, "got 4097"; --ac-every overrode --ac
// every-K; "s3://" blamed --checkpoint-s3, which was not given).
TEST_CASE("bug: the message names the value and the flag the user gave", "[hardening][cli][bugs]") {
  check_usage_error(run_cli({"sweep", "Llama-3.2-1B", "--instance", "ml.p5.48xlarge", "--vary", "nodes=99999999"}),
                    "--vary nodes=99999999: nodes must be at most 4096, got 99999999");
  check_usage_error(run_cli({"sweep", "Llama-3.2-1B", "--gpu", "h100", "--vary", "lora-rank=99999999"}),
                    "lora-rank must be at most 65536, got 99999999");
  check_usage_error(run_cli({"estimate", "Llama-3.1-8B", "--gpu", "h100", "--ac", "every-2", "--ac-every", "4"}),
                    "--ac-every 4: contradicts --ac every-2");
  check_usage_error(run_cli({"estimate", "Llama-3.1-8B", "--gpu", "h100", "--ac", "every-1", "--ac-every", "4"}),
                    "--ac-every 4: contradicts --ac every-1");
  check_usage_error(run_cli({"sweep", "Llama-3.2-1B", "--instance", "ml.p5.48xlarge", "--vary", "nodes=1..99999999:x2"}),
                    "nodes must be at most 4096, got 8192 (of 1..99999999:x2)");
  CHECK(run_cli({"estimate", "Llama-3.1-8B", "--gpu", "h100", "--ac", "every-2", "--ac-every", "2"}).code == 0);
  check_usage_error(run_cli({"sagemaker", "Llama-3.2-1B", "--instance", "ml.p5.48xlarge", "--role-arn",
                             "arn:aws:iam::111122223333:role/SageMakerTrainingExecutionRole", "--output-s3", "s3://"}),
                    "--output-s3 s3://: no bucket");
}

// validate's Markdown header said "Every row is one training configuration measured on one NVIDIA H200" of a file of
// trainer records (16-GPU runs), and for a file of records only it described "other rows" that did not exist (a review).
TEST_CASE("bug: validate's header describes the rows the file has", "[hardening][validate][bugs]") {
  const std::string recs = (fs::path(BWPLAN_SOURCE_DIR) / "tests" / "data" / "probe-records.jsonl").string();
  const auto r = run_cli({"validate", recs, "--format", "markdown"});
  REQUIRE(r.code == 0);
  CHECK_THAT(r.out, Catch::Contains("Every row is one of the reference trainer's records (measurements.jsonl)"));
  CHECK_THAT(r.out, !Catch::Contains("other rows") && !Catch::Contains("measured on one NVIDIA H200 SXM"));
}

// The table printed "tensor … s (exposed), … expert … s (exposed)" without a figure: under --tp-comm-overlap and
// --moe-a2a-overlap it read as all of it exposed (DeepSeek-V3 on 1,024 H100s: expert 25.1 s, of which 7.6 exposed).
TEST_CASE("bug: the table gives the exposed tensor- and expert-parallel time, as the JSON does", "[hardening][output][bugs]") {
  const std::vector<std::string> args{"estimate", "Qwen3-30B-A3B", "--instance", "ml.p5.48xlarge", "--nodes", "2", "--ep", "8", "--tp", "2",
                                      "--grad-accum", "4", "--moe-a2a-overlap", "--tp-comm-overlap", "--stack", "megatron",
                                      "--sharding", "optimizer"};
  const auto table = run_cli(args);
  std::vector<std::string> json_args = args;
  json_args.insert(json_args.end(), {"--format", "json"});
  const auto js = run_cli(json_args);
  INFO(table.out << table.err << js.err);
  REQUIRE(table.code == 0);
  REQUIRE(js.code == 0);
  const auto ex = nlohmann::json::parse(js.out)["throughput"]["exposed_by_parallelism_s"];
  const double expert = ex["expert_parallel"].get<double>(), tensor = ex["tensor_parallel"].get<double>();
  const auto comm = nlohmann::json::parse(js.out)["throughput"]["communication_by_parallelism_s"];
  REQUIRE(expert < 0.9 * comm["expert_parallel"].get<double>());  // overlapped: a part of it exposed
  CHECK_THAT(table.out, Catch::Contains(fmt::format("expert {:.3f} s (exposed {:.3f})", comm["expert_parallel"].get<double>(), expert)));
  CHECK_THAT(table.out, Catch::Contains(fmt::format("tensor {:.3f} s (exposed {:.3f})", comm["tensor_parallel"].get<double>(), tensor)));
  CHECK_THAT(table.out, !Catch::Contains("s (exposed),"));
  // what the model leaves out for Megatron MoE (docs/scaling.md section 7): said in the table and the JSON, not for dense models
  CHECK_THAT(table.out, Catch::Contains("not modelled: the host time of Megatron-Core's dropless MoE dispatch"));
  CHECK_THAT(nlohmann::json::parse(js.out)["throughput"]["not_modelled"].get<std::string>(), Catch::Contains("0.37-0.39"));
  const auto dense = run_cli({"estimate", "Llama-3.1-8B", "--gpu", "h100", "--gpus", "8", "--stack", "megatron", "--sharding", "optimizer"});
  CHECK_THAT(dense.out, !Catch::Contains("not modelled"));
  const auto rec = run_cli({"recommend", "Qwen3-30B-A3B", "--instance", "ml.p5.48xlarge", "--stack", "megatron", "--top", "2"});
  INFO(rec.err);
  CHECK_THAT(rec.out, Catch::Contains("not modelled: the host time of Megatron-Core's dropless MoE dispatch"));
  // recommend's Markdown said nothing of it (a closing note's loose end)
  const auto rec_md = run_cli({"recommend", "Qwen3-30B-A3B", "--instance", "ml.p5.48xlarge", "--stack", "megatron", "--top", "2",
                               "--format", "markdown"});
  INFO(rec_md.err);
  REQUIRE(rec_md.code == 0);
  CHECK_THAT(rec_md.out, Catch::Contains("Not modelled: the host time of Megatron") && Catch::Contains("0.37-0.39"));
  const auto dense_md = run_cli({"recommend", "Llama-3.1-8B", "--instance", "ml.p5.48xlarge", "--stack", "megatron", "--top", "2",
                                 "--format", "markdown"});
  CHECK_THAT(dense_md.out, !Catch::Contains("Not modelled"));
  // nor did its comparison of instances (a review): the note is one of the comparison's notes, in every format
  for (const char* format : {"table", "markdown", "json"}) {
    const auto cmp = run_cli({"recommend", "Qwen3-30B-A3B", "--instance", "ml.p5.48xlarge,ml.p6-b200.48xlarge", "--stack", "megatron",
                              "--format", format});
    INFO(format << cmp.err);
    REQUIRE(cmp.code == 0);
    CHECK_THAT(cmp.out, Catch::Contains("not modelled: the host time of Megatron-Core's dropless MoE dispatch"));
  }
  const auto cmp_dense = run_cli({"recommend", "Llama-3.1-8B", "--instance", "ml.p5.48xlarge,ml.p6-b200.48xlarge", "--stack", "megatron"});
  CHECK_THAT(cmp_dense.out, !Catch::Contains("not modelled"));
}

// A review of the plan's power limit and attention kernel (the test case above): sweep --vary instance fetched the GPU
// again and dropped them (74,883 tokens/s at 700 W for a 500 W plan); --gpu b200 over an h100 plan ran the B200 at the
// h100's 500 W; a limit on a GPU with no board power did nothing; no output said what limit was estimated; the probe
// file of a job and a measured run's plan carried or took them silently.
TEST_CASE("bug: a plan's power limit reaches every point, follows its GPU and shows", "[hardening][plan][bugs]") {
  const std::string file = temp_path("p5-500.plan.json").string();
  REQUIRE(run_cli({"--power-limit", "500", "--attention-kernel", "fa2", "estimate", "Llama-3.1-8B", "--instance", "ml.p5.48xlarge",
                   "--emit", "plan", "-o", file}).code == 0);
  auto tokens_at = [](const test::cli_result& r, std::size_t i) {
    INFO(r.out << r.err);
    REQUIRE(r.code == 0);
    return nlohmann::json::parse(r.out)["points"][i]["tokens_per_s"].get<double>();
  };
  const double plain = tokens_at(run_cli({"sweep", "--plan", file, "--vary", "mbs=1,2", "--format", "json"}), 0);
  CHECK(tokens_at(run_cli({"sweep", "--plan", file, "--vary", "instance=ml.p5.48xlarge", "--vary", "mbs=1,2", "--format", "json"}), 0) ==
        Approx(plain).epsilon(1e-12));
  // another GPU than the plan's: its limit was the h100 hosts', dropped with a warning; the same GPU keeps it
  const auto b200 = run_cli({"estimate", "--plan", file, "--gpu", "b200", "--gpus", "8", "--format", "json"});
  const auto b200_plain = run_cli({"--attention-kernel", "fa2", "estimate", "Llama-3.1-8B", "--gpu", "b200", "--gpus", "8", "--format", "json"});
  INFO(b200.err);
  REQUIRE(b200.code == 0);
  CHECK_THAT(b200.err, Catch::Contains("power_limit_w 500 is the plan's limit for h100; b200 runs at the catalog's limit"));
  CHECK(nlohmann::json::parse(b200.out)["hardware"]["power_limit_w"] == 1000);
  CHECK(nlohmann::json::parse(b200.out)["throughput"]["tokens_per_s"] == nlohmann::json::parse(b200_plain.out)["throughput"]["tokens_per_s"]);
  const auto same = run_cli({"estimate", "--plan", file, "--gpu", "h100", "--gpus", "8", "--format", "json"});
  CHECK_THAT(same.err, !Catch::Contains("is the plan's limit"));
  CHECK(nlohmann::json::parse(same.out)["hardware"]["power_limit_w"] == 500);
  CHECK(nlohmann::json::parse(same.out)["hardware"]["attention_kernel"] == "fa2");
  // the text says what was estimated
  CHECK_THAT(run_cli({"estimate", "--plan", file}).out, Catch::Contains("x ml.p5.48xlarge); at 500 W of its rated 700 W, FlashAttention-2"));
  // a GPU with no board power: a limit cannot act on it (compute_clock_fraction 1), refused for the flag and the file
  auto cat = io::read_json_file(fs::path(BWPLAN_SOURCE_DIR) / "configs" / "hardware" / "catalog.json");
  nlohmann::json g;
  for (const auto& x : cat["gpus"])
    if (x["id"] == "h100") g = x;
  g["id"] = "h100-nopower";
  g.erase("power_limit_w");
  g["sources"].erase("power_limit_w");
  const std::string hw = temp_path("nopower.json").string();
  std::ofstream(hw) << nlohmann::json{{"gpus", {g}}}.dump();
  const auto flag = run_cli({"--hardware", hw, "--power-limit", "300", "estimate", "Llama-3.2-1B", "--gpu", "h100-nopower"});
  CHECK(flag.code == 2);
  CHECK_THAT(flag.err, Catch::Contains("--power-limit 300: h100-nopower has no board power in the catalog"));
  const std::string np = temp_path("nopower.plan.json").string();
  std::ofstream(np) << R"({"model": "Llama-3.2-1B", "gpu": "h100-nopower", "gpus": 1, "power_limit_w": 300})";
  const auto from_file = run_cli({"--hardware", hw, "estimate", "--plan", np});
  CHECK(from_file.code == 2);
  CHECK_THAT(from_file.err, Catch::Contains(np + ": /power_limit_w: 300 W: h100-nopower has no board power in the catalog"));
  // a probe job's plans leave them out as its plan.json does
  const fs::path src = temp_path("p5-500-probe");
  fs::remove_all(src);
  const auto probe = run_cli({"sagemaker", "--plan", file, "--probe", "--source-dir", src.string(), "--role-arn",
                              "arn:aws:iam::111122223333:role/SageMakerTrainingExecutionRole", "--output-s3", "s3://amzn-s3-demo-bucket/bwplan/"});
  INFO(probe.err);
  REQUIRE(probe.code == 0);
  const std::string probe_text = io::read_text_file(src / "probe.json");
  CHECK(probe_text.find("power_limit_w") == std::string::npos);
  CHECK(probe_text.find("attention_kernel") == std::string::npos);
  // a measured run's plan with them: refused, not read and ignored
  std::ifstream in(fs::path(BWPLAN_SOURCE_DIR) / "tests" / "data" / "probe-records.jsonl");
  std::string line;
  nlohmann::json rec;
  while (std::getline(in, line) && !(rec = nlohmann::json::parse(line)).contains("plan")) {
  }  // (the first line is the env record)
  REQUIRE(rec.contains("plan"));
  rec["plan"]["power_limit_w"] = 300;
  const std::string recs = temp_path("capped-records.jsonl").string();
  std::ofstream(recs) << rec.dump() << "\n";
  const auto v = run_cli({"validate", recs});
  CHECK(v.code == 2);
  CHECK_THAT(v.err, Catch::Contains("/plan/power_limit_w: not read from a measured run"));
}
