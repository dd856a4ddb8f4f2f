// Helpers shared by the test files.
#pragma once

#include "cli.hpp"

#include <bwplan/model.hpp>

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include <cstdlib>
#include <filesystem>
#include <sstream>
#include <string>
#include <vector>

namespace bwplan::test {

/// ../shared next to the project (BWPLAN_SHARED_DIR overrides).
inline std::filesystem::path shared_dir() {
  if (const char* e = std::getenv("BWPLAN_SHARED_DIR"); e && *e) return e;
  return BWPLAN_SHARED_DIR;
}

/// Whether ../shared (the published configs, ground truth and service model the project shares) is there.
/// When it is not, the running test is skipped with the reason: it WARNs what it needs and the caller
/// returns (`if (!test::have_shared()) return;`), instead of failing with "cannot open file".
inline bool have_shared() {
  const auto d = shared_dir();
  if (std::filesystem::is_directory(d / "models")) return true;
  WARN("skipped: this test reads " << d.string() << " (the project's shared data: ../shared next to the source tree, or "
       "BWPLAN_SHARED_DIR), which is absent");
  return false;
}

struct cli_result {
  int code;
  std::string out;
  std::string err;
};

/// Runs the CLI in-process.
inline cli_result run_cli(const std::vector<std::string>& args) {
  std::ostringstream out, err;
  const int code = cli::run(args, out, err);
  return {code, out.str(), err.str()};
}

/// Llama-3.2-1B built by hand (the hand-derived terms in tests/terms_test.cpp use its shapes): h 2048, L 16, a 32,
/// g 8, d 64, F 8192, V 128256, tied embeddings.
inline model_spec llama_1b() {
  model_spec m;
  m.name = "llama-1b";
  m.family = "llama";
  m.hidden = 2048;
  m.layers = 16;
  m.heads = 32;
  m.kv_heads = 8;
  m.head_dim = 64;
  m.intermediate = 8192;
  m.vocab = 128256;
  m.max_context = 131072;
  m.tied_embeddings = true;
  return m;
}

/// Llama-3.1-8B built by hand: h 4096, L 32, a 32, g 8, d 128, F 14336, V 128256, untied. Per block: q 4096² =
/// 16,777,216; k, v 4096·1024 = 4,194,304 each; o 16,777,216; MLP 3·4096·14336 = 176,160,768; two norms 8,192:
/// 218,112,000. P = 32 · 218,112,000 + 2 · 128256·4096 + 4096 = 8,030,261,248.
inline model_spec llama_8b() {
  model_spec m;
  m.name = "llama-8b";
  m.family = "llama";
  m.hidden = 4096;
  m.layers = 32;
  m.heads = 32;
  m.kv_heads = 8;
  m.head_dim = 128;
  m.intermediate = 14336;
  m.vocab = 128256;
  m.max_context = 131072;
  return m;
}

/// An FSDP full-shard configuration of `world` GPUs, `per_node` to a node, micro-batch `mbs` × `seq` tokens, with
/// full activation checkpointing unless `full_ac` is false (the other settings at their defaults).
inline training_config fsdp_config(int mbs, int seq, int world, int per_node, bool full_ac = true) {
  training_config c;
  c.micro_batch = mbs;
  c.seq_len = seq;
  c.world_size = world;
  c.gpus_per_node = per_node;
  c.shard = sharding::full;
  if (full_ac) c.ac = checkpointing::full();
  return c;
}

/// `bwplan estimate ARGS… --format json` (a leading `--hardware FILE` goes before the subcommand), parsed; the test
/// fails (with the CLI's stderr) unless it exits 0.
inline nlohmann::json estimate_json(std::vector<std::string> args) {
  // a global option (--hardware FILE) goes before the subcommand
  auto at = args.begin();
  if (args.size() >= 2 && args.front() == "--hardware") at += 2;
  args.insert(at, "estimate");
  args.insert(args.end(), {"--format", "json"});
  const auto r = run_cli(args);
  INFO(r.err);
  REQUIRE(r.code == 0);
  return nlohmann::json::parse(r.out);
}

}  // namespace bwplan::test
