// Parameter counts of the published configs in ../shared/models against their official figures.
#include "test_util.hpp"

#include <bwplan/io/json.hpp>

#include <catch2/catch.hpp>

using namespace bwplan;

namespace {
model_spec shared_model(const std::string& name) {
  auto p = test::shared_dir() / "models" / (name + ".json");
  if (!std::filesystem::exists(p)) p = test::shared_dir() / "models" / "more" / (name + ".json");
  return io::load_model(p);
}
}  // namespace

TEST_CASE("model: exact parameter counts of the README's exact figures", "[model]") {
  if (!test::have_shared()) return;
  CHECK(count_parameters(shared_model("Llama-3.2-1B")).total() == 1'235'814'400);
  CHECK(count_parameters(shared_model("Llama-3.2-1B")).non_embedding() + 128256LL * 2048 == 1'235'814'400);
  CHECK(count_parameters(shared_model("Llama-3.2-3B")).total() == 3'212'749'824);
  CHECK(count_parameters(shared_model("Llama-3.1-8B")).total() == 8'030'261'248);
  CHECK(count_parameters(shared_model("Llama-3.1-8B")).non_embedding() == 6'979'588'096);
  CHECK(count_parameters(shared_model("Mistral-7B-v0.1")).total() == 7'241'732'096);
}

TEST_CASE("model: dense models within 0.5% of the official totals", "[model]") {
  if (!test::have_shared()) return;
  struct row { const char* name; double official; };
  const row rows[] = {
      {"Llama-3.1-70B", 70.6e9}, {"Llama-3.1-405B", 405.9e9}, {"Qwen2.5-7B", 7.61e9},   {"Qwen2.5-72B", 72.7e9},
      {"Qwen3-0.6B", 0.6e9},     {"Qwen3-8B", 8.2e9},         {"Qwen3-32B", 32.8e9},    {"gemma-2b-it", 2.51e9},
      {"TinyLlama-1.1B-Chat-v1.0", 1.10e9}, {"SmolLM2-1.7B-Instruct", 1.71e9}, {"Qwen2.5-14B", 14.7e9},
      {"Qwen2.5-32B", 32.8e9} /* Hub safetensors count; the card's 32.5B disagrees with its own config */, {"Mistral-7B-Instruct-v0.3", 7.25e9}, {"Phi-3-mini-128k-instruct", 3.82e9},
      {"Llama-3.2-3B-Instruct", 3.21e9}};
  for (const auto& r : rows) {
    const double n = static_cast<double>(count_parameters(shared_model(r.name)).total());
    INFO(r.name << ": counted " << n << ", official " << r.official);
    // official figures are rounded to their last digit: allow half a unit of it on top of 0.5 %
    CHECK(std::abs(n / r.official - 1) <= 0.005 + 0.0051 * (r.official < 1e9 ? 1 : 0));
  }
}

TEST_CASE("model: qwen2 has Q/K/V biases, qwen3 Q/K norms and head_dim, gemma ties by default", "[model]") {
  if (!test::have_shared()) return;
  const auto q2 = shared_model("Qwen2.5-7B");
  CHECK(q2.qkv_bias);
  CHECK_FALSE(q2.tied_embeddings);
  const auto q3 = shared_model("Qwen3-0.6B");
  CHECK(q3.qk_norm);
  CHECK(q3.head_dim == 128);
  CHECK(q3.q_dim() == 2048);  // ≠ hidden 1024
  CHECK(q3.tied_embeddings);
  const auto g = shared_model("gemma-2b-it");
  CHECK(g.tied_embeddings);
  CHECK(g.kv_heads == 1);
  CHECK(g.head_dim == 256);
}

// ---- issue 7: MoE, MLA, GPT-2, Falcon and Gemma 2 families

TEST_CASE("model: MoE counts match the README's counted totals and activated counts exactly", "[model]") {
  if (!test::have_shared()) return;
  // Mixtral: per block attention 2·h·(a·d) + 2·h·(g·d), 8 experts × 3·h·F, router h·8, two RMSNorms
  const auto mx = count_parameters(shared_model("Mixtral-8x7B-v0.1"));
  CHECK(mx.total() == 46'702'792'704);
  CHECK(mx.active() == 12'879'925'248);  // top-2 of 8 experts
  // Qwen3-30B-A3B: 128 experts of width 768, top-8, Q/K norms, no shared expert
  for (const char* name : {"Qwen3-30B-A3B", "Qwen3-30B-A3B-Instruct-2507"}) {
    INFO(name);
    const auto q = count_parameters(shared_model(name));
    CHECK(q.total() == 30'532'122'624);
    CHECK(q.active() == 3'353'032'704);
  }
  // DeepSeek-V3: MLA, 3 dense blocks, 58 MoE blocks of 256 routed + 1 shared expert, router with the
  // e_score_correction_bias; the MTP module is counted apart (params.mtp), not in the total
  for (const char* name : {"DeepSeek-V3-Base", "DeepSeek-R1"}) {
    INFO(name);
    const auto m = shared_model(name);
    CHECK(m.is_mla());
    CHECK(m.moe_layers == 58);
    CHECK(m.mtp_layers == 1);
    const auto d = count_parameters(m);
    CHECK(d.total() == 671'026'419'200);
    CHECK(std::abs(static_cast<double>(d.active()) / 37.55e9 - 1) <= 0.005);  // README: ≈37.55B counted
    // checkpoint with MTP (and its repeated embedding and head): 685B
    const double ckpt = static_cast<double>(d.total() + d.mtp + d.embedding + d.lm_head);
    CHECK(std::abs(ckpt / 685e9 - 1) <= 0.005);
  }
}

TEST_CASE("model: GPT-2, Falcon, Gemma 2 and Mixtral-8x22B within 0.5% of the official figures", "[model]") {
  if (!test::have_shared()) return;
  struct row { const char* name; double official; double unit; };  // unit: last digit of the official figure
  const row rows[] = {{"gpt2", 124e6, 1e6},        {"gpt2-large", 774e6, 1e6},  {"gpt2-xl", 1558e6, 1e6},
                      {"falcon-7b", 6.92e9, 0.01e9}, {"falcon-7b-instruct", 6.92e9, 0.01e9},
                      {"gemma-2-9b-it", 9.24e9, 0.01e9}, {"Mixtral-8x22B-v0.1", 141e9, 1e9}};
  // gpt2-xl: the card's "1.5B" is OpenAI's 1558M model (release directory "1558M"), truncated
  for (const auto& r : rows) {
    const double n = static_cast<double>(count_parameters(shared_model(r.name)).total());
    INFO(r.name << ": counted " << n << ", official " << r.official);
    CHECK(std::abs(n / r.official - 1) <= 0.005 + 0.5 * r.unit / r.official);
  }
  CHECK(count_parameters(shared_model("gpt2-xl")).total() == 1'557'611'200);  // 48·(12h² + 13h) + (V + 1024)·h + 2h, h = 1600
  // Mixtral-8x22B: 39B active (card), top-2 of 8
  const double a = static_cast<double>(count_parameters(shared_model("Mixtral-8x22B-v0.1")).active());
  CHECK(std::abs(a / 39e9 - 1) <= 0.005 + 0.5e9 / 39e9);
}

TEST_CASE("model: GPT-2 and Falcon exact layer structure", "[model]") {
  if (!test::have_shared()) return;
  // GPT-2 small: 12·(12h² + 13h) + V·h + n_positions·h + 2h, tied head (Conv1D weights have the same numel)
  const auto g = shared_model("gpt2");
  CHECK(g.layer_norm);
  CHECK(g.tied_embeddings);
  CHECK(g.intermediate == 4 * 768);
  const std::int64_t h = 768;
  CHECK(count_parameters(g).total() == 12 * (12 * h * h + 13 * h) + 50257 * h + 1024 * h + 2 * h);
  CHECK(count_parameters(g).total() == 124'439'808);
  // Falcon-7B (old RW keys): multi-query (1 KV head of 64), parallel attention with one LayerNorm, no biases
  const auto f = shared_model("falcon-7b");
  CHECK(f.kv_heads == 1);
  CHECK(f.heads == 71);
  CHECK(f.norms_per_block == 1);
  CHECK(count_parameters(f).total() == 6'921'720'704);
  CHECK(count_parameters(shared_model("falcon-7b-instruct")).total() == 6'921'720'704);
  // Gemma 2: four norms per block, head_dim 256, tied
  const auto g2 = shared_model("gemma-2-9b-it");
  CHECK(g2.norms_per_block == 4);
  CHECK(g2.tied_embeddings);
  CHECK(g2.head_dim == 256);
  CHECK(count_parameters(g2).total() == 9'241'705'984);
}

TEST_CASE("model: every published config is read and dense counts have active == total", "[model]") {
  if (!test::have_shared()) return;
  namespace fs = std::filesystem;
  int n = 0;
  for (const auto& dir : {test::shared_dir() / "models", test::shared_dir() / "models" / "more"})
    for (const auto& e : fs::directory_iterator(dir)) {
      if (e.path().extension() != ".json") continue;
      INFO(e.path().string());
      const auto m = io::load_model(e.path());
      const auto c = count_parameters(m);
      CHECK(c.total() > 0);
      if (!m.is_moe()) CHECK(c.active() == c.total());
      else CHECK(c.active() < c.total());
      ++n;
    }
  CHECK(n == 31);
}

TEST_CASE("model: new falcon keys and qwen2_moe shared experts", "[model]") {
  // falcon-40b style: new_decoder_architecture, num_kv_heads, two LayerNorms per block
  const auto f = io::model_from_json(nlohmann::json::parse(R"({"model_type": "falcon", "hidden_size": 8192,
      "num_hidden_layers": 60, "num_attention_heads": 128, "num_kv_heads": 8, "new_decoder_architecture": true,
      "parallel_attn": true, "bias": false, "vocab_size": 65024})"), "falcon-40b.json");
  CHECK(f.kv_heads == 8);
  CHECK(f.norms_per_block == 2);
  const std::int64_t h = 8192, d = 64;
  const std::int64_t block = h * (h + 2 * 8 * d) + h * h + 2 * h * 4 * h + 2 * 2 * h;
  CHECK(count_parameters(f).total() == 60 * block + 65024 * h + 2 * h);  // ≈ 41.8B (falcon-40b card: 40B)
  // Qwen1.5-MoE-A2.7B: 60 experts of 1408, top-4, shared expert 5632 with a sigmoid gate, Q/K/V biases
  const auto q = io::model_from_json(nlohmann::json::parse(R"({"model_type": "qwen2_moe", "hidden_size": 2048,
      "num_hidden_layers": 24, "num_attention_heads": 16, "num_key_value_heads": 16, "intermediate_size": 5632,
      "moe_intermediate_size": 1408, "shared_expert_intermediate_size": 5632, "num_experts": 60,
      "num_experts_per_tok": 4, "decoder_sparse_step": 1, "mlp_only_layers": [], "vocab_size": 151936,
      "tie_word_embeddings": false})"), "qwen1.5-moe.json");
  const auto c = count_parameters(q);
  // card: 14.3B total, 2.7B activated
  CHECK(std::abs(static_cast<double>(c.total()) / 14.3e9 - 1) <= 0.005 + 0.05e9 / 14.3e9);
  CHECK(std::abs(static_cast<double>(c.active()) / 2.7e9 - 1) <= 0.005 + 0.05e9 / 2.7e9);
}

TEST_CASE("model: starcoder2 configs and the dropout keys of gpt2, falcon and starcoder2", "[model]") {
  // Megatron-LM's 7B functional-test shape as a starcoder2 config (tests/data/megatron-gpt3-7b.json)
  const auto m = io::load_model(std::filesystem::path(BWPLAN_SOURCE_DIR) / "tests" / "data" / "megatron-gpt3-7b.json");
  CHECK(m.kv_heads == 8);
  CHECK(m.layer_norm);
  CHECK_FALSE(m.gated_mlp);
  CHECK(m.qkv_bias);
  CHECK(m.o_bias);
  CHECK(m.mlp_bias);
  CHECK_FALSE(m.tied_embeddings);
  CHECK(m.residual_dropouts == 2);
  CHECK(m.embedding_dropout);
  // per block: q, o 4096² + 4096 each; k, v 4096·1024 + 1024 each; c_fc 4096·16384 + 16384; c_proj 16384·4096 + 4096;
  // two LayerNorms 4·4096
  const std::int64_t h = 4096, kv = 1024, f = 16384, V = 131584;
  const std::int64_t block = 2 * (h * h + h) + 2 * (h * kv + kv) + (h * f + f) + (f * h + h) + 4 * h;
  CHECK(count_parameters(m).total() == 32 * block + 2 * V * h + 2 * h);
  auto read = [](const char* text) { return io::model_from_json(nlohmann::json::parse(text), "config.json"); };
  // gpt2: resid_pdrop and embd_pdrop default to 0.1 (GPT2Config)
  const auto g = read(R"({"model_type": "gpt2", "n_embd": 768, "n_layer": 12, "n_head": 12})");
  CHECK(g.residual_dropouts == 2);
  CHECK(g.embedding_dropout);
  const auto g0 = read(R"({"model_type": "gpt2", "n_embd": 768, "n_layer": 12, "n_head": 12, "resid_pdrop": 0.0, "embd_pdrop": 0})");
  CHECK(g0.residual_dropouts == 0);
  CHECK_FALSE(g0.embedding_dropout);
  // falcon: one dropout_add with parallel attention (hidden_dropout), two in sequential blocks
  const auto fp = read(R"({"model_type": "falcon", "hidden_size": 512, "num_hidden_layers": 2, "num_attention_heads": 8,
      "vocab_size": 1000, "hidden_dropout": 0.1, "attention_dropout": 0.1})");
  CHECK(fp.residual_dropouts == 1);
  const auto fs = read(R"({"model_type": "falcon", "hidden_size": 512, "num_hidden_layers": 2, "num_attention_heads": 8,
      "vocab_size": 1000, "parallel_attn": false, "hidden_dropout": 0.1, "attention_dropout": 0.1})");
  CHECK(fs.residual_dropouts == 2);
  // Llama-layout families have no residual dropout (attention_dropout acts on the probabilities inside SDPA)
  const auto l = read(R"({"model_type": "llama", "hidden_size": 512, "num_hidden_layers": 2, "num_attention_heads": 8,
      "intermediate_size": 1024, "vocab_size": 1000, "attention_dropout": 0.1})");
  CHECK(l.residual_dropouts == 0);
  // starcoder2 without tie_word_embeddings: PretrainedConfig's default, tied; GQA 2 and biases by default
  const auto s2 = read(R"({"model_type": "starcoder2", "hidden_size": 512, "num_hidden_layers": 2, "num_attention_heads": 8,
      "intermediate_size": 1024, "vocab_size": 1000})");
  CHECK(s2.tied_embeddings);
  CHECK(s2.kv_heads == 2);
  CHECK(s2.mlp_bias);
  CHECK(s2.residual_dropouts == 0);
  // a probability out of range is refused, naming the field
  CHECK_THROWS_WITH(read(R"({"model_type": "starcoder2", "hidden_size": 512, "num_hidden_layers": 2, "num_attention_heads": 8,
      "intermediate_size": 1024, "vocab_size": 1000, "residual_dropout": 1.5})"),
                    Catch::Contains("/residual_dropout") && Catch::Contains("[0, 1)"));
}
