// bwplan: GPU memory and throughput planning for LLM training
// SPDX-License-Identifier: Apache-2.0
#pragma once

// The only header of the library that includes nlohmann_json.

#include <bwplan/error.hpp>
#include <bwplan/hardware.hpp>
#include <bwplan/io/file.hpp>
#include <bwplan/io/locate.hpp>
#include <bwplan/model.hpp>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <initializer_list>
#include <optional>
#include <sstream>
#include <string>
#include <unordered_set>
#include <vector>

namespace bwplan::io {

/// Families whose config.json this release reads.
inline const std::vector<std::string>& supported_families() {
  static const std::vector<std::string> f{"llama",     "mistral",    "qwen2",       "qwen3",      "gemma",
                                          "gemma2",    "gemma3",     "gemma3_text", "phi3",       "mixtral",
                                          "qwen2_moe", "qwen3_moe",  "deepseek_v2", "deepseek_v3", "gpt2",
                                          "falcon",    "RefinedWebModel", "RefinedWeb", "starcoder2"};
  return f;
}

/// Deepest nesting of arrays and objects a JSON document may have. Real configs, catalogs and plans nest
/// fewer than 10 levels; the limit keeps recursive code (copies, dumps, the locator) far from the stack's end.
inline constexpr std::size_t max_json_depth = 256;

namespace detail {

/// Throws config_error when `text` nests arrays and objects deeper than `max_depth` (strings and comments
/// skipped, as the parser does). Runs before the parser, so a hostile document never becomes a deep tree.
inline void check_json_depth(std::string_view text, const std::string& file, std::size_t max_depth = max_json_depth) {
  std::size_t depth = 0;
  for (std::size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (c == '"') {
      for (++i; i < text.size() && text[i] != '"'; ++i)
        if (text[i] == '\\') ++i;
    } else if (c == '/' && i + 1 < text.size() && text[i + 1] == '/') {
      while (i < text.size() && text[i] != '\n') ++i;
    } else if (c == '/' && i + 1 < text.size() && text[i + 1] == '*') {
      const std::size_t end = text.find("*/", i + 2);
      i = end == std::string_view::npos ? text.size() : end + 1;
    } else if (c == '[' || c == '{') {
      if (++depth > max_depth) {
        const text_location l = location_of(text, i);
        throw config_error(file, "", "nested deeper than " + std::to_string(max_depth) + " levels (the limit on JSON input)",
                           l.line, l.column, l.byte);
      }
    } else if ((c == ']' || c == '}') && depth > 0) {
      --depth;
    }
  }
}

/// `s` with every byte that is not part of a well-formed UTF-8 sequence (and every other control character than
/// tab) written as `\xHH`: nlohmann's parse errors quote the bytes last read, which may be the ill-formed byte
/// itself, and an error message must stay printable and storable in a JSON report (nlohmann's dump throws
/// type_error 316 on invalid UTF-8).
[[nodiscard]] inline std::string printable_utf8(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  auto hex = [&](unsigned char c) {
    static constexpr char digits[] = "0123456789ABCDEF";
    out += "\\x";
    out += digits[c >> 4];
    out += digits[c & 15];
  };
  for (std::size_t i = 0; i < s.size();) {
    const auto c = static_cast<unsigned char>(s[i]);
    std::size_t n = 0;  // continuation bytes of a well-formed sequence starting here (RFC 3629)
    if (c < 0x80) {
      if (c < 0x20 && c != '\t') { hex(c); ++i; continue; }
      out += static_cast<char>(c);
      ++i;
      continue;
    }
    unsigned lo = 0x80, hi = 0xBF;
    if (c >= 0xC2 && c <= 0xDF) n = 1;
    else if (c >= 0xE0 && c <= 0xEF) { n = 2; if (c == 0xE0) lo = 0xA0; if (c == 0xED) hi = 0x9F; }
    else if (c >= 0xF0 && c <= 0xF4) { n = 3; if (c == 0xF0) lo = 0x90; if (c == 0xF4) hi = 0x8F; }
    bool ok = n > 0;
    for (std::size_t k = 1; ok && k <= n; ++k) {
      if (i + k >= s.size()) { ok = false; break; }
      const auto d = static_cast<unsigned char>(s[i + k]);
      if (k == 1 ? (d < lo || d > hi) : (d < 0x80 || d > 0xBF)) ok = false;
    }
    if (!ok) { hex(c); ++i; continue; }
    out.append(s.substr(i, n + 1));
    i += n + 1;
  }
  return out;
}

}  // namespace detail

/// Parses `text` as JSON (comments allowed). Throws config_error naming `file` and the byte offset; also for
/// a NUL byte (the parser would stop there and ignore the rest) and for nesting deeper than max_json_depth.
///
/// A key given twice in one object is an error too (nlohmann keeps the last value, so `"hidden_size": 4096,
/// "hidden_size": 8192` was read as 8192 without a word: an audit); the error names the key's JSON pointer.
[[nodiscard]] inline nlohmann::json parse_json(const std::string& text, const std::string& file) {
  detail::reject_nul(text, file);
  detail::check_json_depth(text, file);
  // the open containers, to name a repeated key's pointer: an array's element index, an object's last key and keys
  struct frame {
    bool array = false;
    std::int64_t index = -1;
    std::string key;
    std::unordered_set<std::string> keys;
  };
  std::vector<frame> open;
  std::string duplicate, duplicate_key;  // pointer and key of the first repeated key
  using ev = nlohmann::json::parse_event_t;
  const nlohmann::json::parser_callback_t on_event = [&](int, ev e, nlohmann::json& parsed) {
    switch (e) {
      case ev::object_start:
      case ev::array_start:
        if (!open.empty() && open.back().array) ++open.back().index;
        open.push_back(frame{e == ev::array_start, -1, {}, {}});
        break;
      case ev::object_end:
      case ev::array_end:
        if (!open.empty()) open.pop_back();
        break;
      case ev::key:
        if (!open.empty() && parsed.is_string()) {
          frame& f = open.back();
          f.key = parsed.get<std::string>();
          if (!f.keys.insert(f.key).second && duplicate.empty()) {
            duplicate_key = f.key;
            for (const frame& g : open) duplicate += "/" + (g.array ? std::to_string(g.index) : pointer_escape(g.key));
          }
        }
        break;
      case ev::value:
        if (!open.empty() && open.back().array) ++open.back().index;
        break;
    }
    return true;
  };
  try {
    nlohmann::json j = nlohmann::json::parse(text, on_event, true, /*ignore_comments=*/true);
    if (!duplicate.empty()) {
      const std::string what = "duplicate key '" + detail::printable_utf8(duplicate_key) + "' in one object (give it once)";
      // the repeat: the quoted key after the first occurrence (locate finds the first); the first when not found
      std::optional<text_location> at = locate(text, duplicate);
      const std::string quoted = "\"" + duplicate_key + "\"";
      if (at)
        if (auto again = text.find(quoted, at->byte + 1); again != std::string::npos) at = location_of(text, again);
      if (at) throw config_error(file, duplicate, what, at->line, at->column, at->byte);
      throw config_error(file, duplicate, what);
    }
    return j;
  } catch (const nlohmann::json::parse_error& e) {
    std::string what = e.what();
    // "[json.exception.parse_error.101] parse error at line 1, column 5: syntax error ..." → keep the useful part
    if (auto p = what.find("] "); p != std::string::npos) what = what.substr(p + 2);
    what = detail::printable_utf8(what);  // it quotes the bytes last read, which may not be UTF-8
    // nlohmann counts the bytes read, the offending one included: the 0-based offset is one less.
    const std::size_t off = e.byte > 0 ? e.byte - 1 : 0;
    const text_location l = location_of(text, off);
    throw config_error(file, "", "malformed JSON (byte " + std::to_string(e.byte) + "): " + what, l.line, l.column, l.byte);
  } catch (const nlohmann::json::out_of_range& e) {
    // 406 "number overflow parsing '1e999'": nlohmann gives no offset; the first such literal is the culprit.
    std::string what = e.what();
    if (auto p = what.find("] "); p != std::string::npos) what = what.substr(p + 2);
    std::size_t off = 0;
    if (auto q1 = what.find('\''), q2 = what.rfind('\''); q1 != std::string::npos && q2 > q1 + 1)
      if (auto at = text.find(what.substr(q1 + 1, q2 - q1 - 1)); at != std::string::npos) off = at;
    const text_location l = location_of(text, off);
    throw config_error(file, "", "malformed JSON: " + detail::printable_utf8(what), l.line, l.column, l.byte);
  }
}

/// Reads and parses the JSON file at `path`. Throws config_error when it cannot be read or parsed.
[[nodiscard]] inline nlohmann::json read_json_file(const std::filesystem::path& path) {
  return parse_json(read_text_file(path), path.string());
}

/// `e` with the line, column and byte offset of its JSON pointer in `text` added, when the member is in the
/// text (a missing field is not; neither is an error already located).
[[nodiscard]] inline config_error with_location(const config_error& e, std::string_view text) {
  if (e.line() > 0 || e.pointer().empty()) return e;
  if (auto l = locate(text, e.pointer())) return config_error(e.file(), e.pointer(), e.reason(), l->line, l->column, l->byte);
  return e;
}

namespace detail {

inline std::int64_t get_int(const nlohmann::json& j, const std::string& file, const std::string& key,
                            std::optional<std::int64_t> fallback, std::int64_t min_value = 1,
                            std::int64_t max_value = 9'000'000'000'000'000) {
  const std::string ptr = "/" + key;
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) {
    if (fallback) return *fallback;
    throw config_error(file, ptr, "missing required field");
  }
  if (!it->is_number()) throw config_error(file, ptr, std::string("expected an integer, got ") + it->type_name());
  const double v = it->get<double>();
  if (!std::isfinite(v) || v != std::floor(v)) throw config_error(file, ptr, "expected an integer, got " + it->dump());
  if (v < static_cast<double>(min_value))
    throw config_error(file, ptr, "must be >= " + std::to_string(min_value) + ", got " + it->dump());
  if (v > static_cast<double>(max_value))
    throw config_error(file, ptr, "must be <= " + std::to_string(max_value) + ", got " + it->dump());
  return static_cast<std::int64_t>(v);
}

inline bool get_bool(const nlohmann::json& j, const std::string& file, const std::string& key, bool fallback) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return fallback;
  if (!it->is_boolean()) throw config_error(file, "/" + key, std::string("expected true or false, got ") + it->type_name());
  return it->get<bool>();
}

inline double get_number(const nlohmann::json& j, const std::string& file, const std::string& ptr, const std::string& key,
                         bool required = true, double fallback = 0) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) {
    if (!required) return fallback;
    throw config_error(file, ptr + "/" + key, "missing required field");
  }
  if (!it->is_number()) throw config_error(file, ptr + "/" + key, std::string("expected a number, got ") + it->type_name());
  const double v = it->get<double>();
  if (!std::isfinite(v) || v < 0) throw config_error(file, ptr + "/" + key, "must be a non-negative number, got " + it->dump());
  return v;
}

/// A dropout probability `key` of `j` in [0, 1), `fallback` when absent or null. Throws config_error naming the
/// field otherwise.
inline double get_probability(const nlohmann::json& j, const std::string& file, const std::string& key, double fallback) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return fallback;
  if (!it->is_number()) throw config_error(file, "/" + key, std::string("expected a probability, got ") + it->type_name());
  const double v = it->get<double>();
  if (!std::isfinite(v) || v < 0 || v >= 1) throw config_error(file, "/" + key, "must be a probability in [0, 1), got " + it->dump());
  return v;
}

inline std::string get_string(const nlohmann::json& j, const std::string& file, const std::string& ptr, const std::string& key,
                              bool required = true) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) {
    if (!required) return {};
    throw config_error(file, ptr + "/" + key, "missing required field");
  }
  if (!it->is_string()) throw config_error(file, ptr + "/" + key, std::string("expected a string, got ") + it->type_name());
  return it->get<std::string>();
}


/// The first of `keys` present and not null, or nullptr.
inline const char* first_key(const nlohmann::json& j, std::initializer_list<const char*> keys) {
  for (const char* k : keys)
    if (auto it = j.find(k); it != j.end() && !it->is_null()) return k;
  return nullptr;
}

/// Reads the family-specific keys of `j` into `m` (m.family is set and supported).
inline void read_family(model_spec& m, const nlohmann::json& j, const std::string& file) {
  const std::string& f = m.family;
  const bool gpt2 = f == "gpt2";
  const bool falcon = f == "falcon" || f == "RefinedWebModel" || f == "RefinedWeb";
  const bool deepseek = f == "deepseek_v2" || f == "deepseek_v3";
  const bool gemma = f == "gemma" || f == "gemma2" || f == "gemma3" || f == "gemma3_text";
  const bool starcoder2 = f == "starcoder2";
  auto key = [&](std::initializer_list<const char*> keys) {
    const char* k = first_key(j, keys);
    return std::string(k ? k : *keys.begin());
  };
  // Upper bounds far above any published model keep the integer arithmetic of count_parameters exact.
  m.hidden = get_int(j, file, gpt2 ? key({"n_embd", "hidden_size"}) : "hidden_size", std::nullopt, 1, 1 << 20);
  m.layers = get_int(j, file, key({"num_hidden_layers", "n_layer"}), std::nullopt, 1, max_model_layers);
  m.heads = get_int(j, file, key({"num_attention_heads", "n_head"}), std::nullopt, 1, 1 << 16);
  if (falcon) {
    const bool new_arch = get_bool(j, file, "new_decoder_architecture", false);
    const bool mq = get_bool(j, file, "multi_query", !new_arch && f != "falcon");  // RW configs: multi-query by default
    if (new_arch) m.kv_heads = get_int(j, file, key({"num_kv_heads", "n_head_kv"}), m.heads, 1, 1 << 16);
    else m.kv_heads = mq ? 1 : m.heads;
    const bool parallel = get_bool(j, file, "parallel_attn", true);
    m.norms_per_block = new_arch ? static_cast<int>(get_int(j, file, "num_ln_in_parallel_attn", 2, 1, 2)) : (parallel ? 1 : 2);
    const bool bias = get_bool(j, file, "bias", false);
    m.qkv_bias = m.o_bias = m.mlp_bias = bias;
    m.layer_norm = true;
    m.gated_mlp = false;
    m.alibi = get_bool(j, file, "alibi", false);  // (falcon-rw: no rotary tables)
    // FalconDecoderLayer: dropout_add(attention_output, residual, attention_dropout) before the MLP's norm
    // (sequential blocks), then dropout_add(mlp_output [+ attention_output], residual, hidden_dropout)
    const bool hidden = get_probability(j, file, "hidden_dropout", 0.0) > 0;
    const bool attention = get_probability(j, file, "attention_dropout", 0.0) > 0;
    m.residual_dropouts = (hidden ? 1 : 0) + (!new_arch && !parallel && attention ? 1 : 0);
  } else if (gpt2) {
    m.kv_heads = m.heads;
    m.layer_norm = true;
    m.gated_mlp = false;
    m.qkv_bias = m.o_bias = m.mlp_bias = true;
    // GPT2Attention.resid_dropout and GPT2MLP.dropout (resid_pdrop), GPT2Model.drop (embd_pdrop); defaults 0.1
    m.residual_dropouts = get_probability(j, file, "resid_pdrop", 0.1) > 0 ? 2 : 0;
    m.embedding_dropout = get_probability(j, file, "embd_pdrop", 0.1) > 0;
  } else if (starcoder2) {
    // Starcoder2: LayerNorm (weight + bias) ×2, GQA, GELU MLP c_fc/c_proj, biases on every linear (use_bias), RoPE;
    // dropout on the attention and MLP outputs (residual_dropout) and on the embeddings (embedding_dropout)
    m.kv_heads = get_int(j, file, "num_key_value_heads", 2, 1, 1 << 16);
    m.layer_norm = true;
    m.gated_mlp = false;
    m.qkv_bias = m.o_bias = m.mlp_bias = get_bool(j, file, "use_bias", true);
    m.residual_dropouts = get_probability(j, file, "residual_dropout", 0.0) > 0 ? 2 : 0;
    m.embedding_dropout = get_probability(j, file, "embedding_dropout", 0.0) > 0;
  } else {
    m.kv_heads = get_int(j, file, "num_key_value_heads", m.heads, 1, 1 << 16);
  }
  if (gpt2) {
    m.intermediate = get_int(j, file, "n_inner", 4 * m.hidden, 1, 1 << 22);
    m.positions = get_int(j, file, "n_positions", 1024, 1, 1 << 22);
    m.max_context = m.positions;
  } else if (falcon) {
    m.intermediate = get_int(j, file, "ffn_hidden_size", 4 * m.hidden, 1, 1 << 22);
    m.max_context = get_int(j, file, "max_position_embeddings", 2048, 1, std::int64_t{1} << 40);
  } else {
    m.intermediate = get_int(j, file, "intermediate_size", std::nullopt, 1, 1 << 22);
    m.max_context = get_int(j, file, "max_position_embeddings", 4096, 1, std::int64_t{1} << 40);
  }
  m.vocab = get_int(j, file, "vocab_size", gpt2 ? std::optional<std::int64_t>(50257) : std::nullopt, 1, 1 << 28);
  if (deepseek && j.contains("kv_lora_rank") && !j.at("kv_lora_rank").is_null()) {
    m.kv_lora_rank = get_int(j, file, "kv_lora_rank", std::nullopt, 1, 1 << 20);
    m.q_lora_rank = get_int(j, file, "q_lora_rank", 0, 0, 1 << 20);
    m.qk_rope_dim = get_int(j, file, "qk_rope_head_dim", 64, 1, 1 << 16);
    m.head_dim = get_int(j, file, "qk_nope_head_dim", 128, 1, 1 << 16) + m.qk_rope_dim;
    m.v_head_dim = get_int(j, file, "v_head_dim", 128, 1, 1 << 16);
    m.kv_heads = m.heads;  // decompressed per-head K and V
  } else if (!gpt2 && !falcon && j.contains("head_dim") && !j.at("head_dim").is_null()) {
    m.head_dim = get_int(j, file, "head_dim", std::nullopt, 1, 1 << 16);
  } else {
    const std::string hk = gpt2 ? "/n_head" : (falcon ? "/" + key({"num_attention_heads", "n_head"}) : "/num_attention_heads");
    if (m.hidden % m.heads != 0)
      throw config_error(file, hk,
                         hk.substr(1) + "=" + std::to_string(m.heads) + " does not divide hidden_size=" +
                             std::to_string(m.hidden) + " (and no head_dim is given)");
    m.head_dim = m.hidden / m.heads;
  }
  if (m.heads % m.kv_heads != 0)
    throw config_error(file, falcon ? "/num_kv_heads" : "/num_key_value_heads",
                       "num_key_value_heads=" + std::to_string(m.kv_heads) + " does not divide num_attention_heads=" +
                           std::to_string(m.heads));
  // Starcoder2Config leaves tie_word_embeddings to PretrainedConfig, whose default is true
  m.tied_embeddings = gpt2 || get_bool(j, file, "tie_word_embeddings", gemma || falcon || starcoder2);
  if (!gpt2 && !falcon && !starcoder2)
    m.qkv_bias = f == "qwen2" || f == "qwen2_moe" ? true : get_bool(j, file, "attention_bias", false);
  if (deepseek) m.qkv_bias = false;  // MLA: attention_bias applies to no counted projection in V3 (False in every config)
  m.qk_norm = f == "qwen3" || f == "qwen3_moe" || f == "gemma3" || f == "gemma3_text";
  if (f == "gemma2" || f == "gemma3" || f == "gemma3_text") m.norms_per_block = 4;
  if (!gpt2 && !falcon && !starcoder2) m.gated_mlp = true;

  // ---- MoE
  const char* ekey = f == "mixtral" ? "num_local_experts" : deepseek ? "n_routed_experts" : (f == "qwen2_moe" || f == "qwen3_moe") ? "num_experts" : nullptr;
  if (ekey) {
    m.experts = get_int(j, file, ekey, std::nullopt, 1, 1 << 16);
    m.top_k = get_int(j, file, "num_experts_per_tok", std::nullopt, 1, 1 << 16);
    if (m.top_k > m.experts)
      throw config_error(file, "/num_experts_per_tok", "num_experts_per_tok=" + std::to_string(m.top_k) +
                                                          " exceeds the " + std::to_string(m.experts) + " experts (" +
                                                          ekey + ")");
    m.moe_intermediate = f == "mixtral" ? m.intermediate : get_int(j, file, "moe_intermediate_size", std::nullopt, 1, 1 << 22);
    if (deepseek) {
      m.shared_intermediate = get_int(j, file, "n_shared_experts", 0, 0, 1 << 10) * m.moe_intermediate;
      const std::int64_t first_dense = get_int(j, file, "first_k_dense_replace", 0, 0, m.layers);
      const std::int64_t freq = get_int(j, file, "moe_layer_freq", 1, 1, m.layers);
      for (std::int64_t i = first_dense; i < m.layers; ++i)
        if (i % freq == 0) ++m.moe_layers;
      // V3's noaux_tc routing keeps a learned per-expert score-correction bias (an nn.Parameter)
      const auto tm = j.find("topk_method");
      m.router_bias = f == "deepseek_v3" || (tm != j.end() && tm->is_string() && tm->get<std::string>() == "noaux_tc");
      m.mtp_layers = get_int(j, file, "num_nextn_predict_layers", 0, 0, 1 << 10);
    } else if (f == "mixtral") {
      m.moe_layers = m.layers;
    } else {
      if (f == "qwen2_moe") {
        m.shared_intermediate = get_int(j, file, "shared_expert_intermediate_size", 0, 0, 1 << 22);
        m.shared_expert_gate = m.shared_intermediate > 0;
      }
      const std::int64_t step = get_int(j, file, "decoder_sparse_step", 1, 1, m.layers);
      std::vector<std::int64_t> dense;
      if (auto it = j.find("mlp_only_layers"); it != j.end() && !it->is_null()) {
        if (!it->is_array()) throw config_error(file, "/mlp_only_layers", std::string("expected an array, got ") + it->type_name());
        for (std::size_t i = 0; i < it->size(); ++i) {
          const auto& x = (*it)[i];
          if (!x.is_number_integer()) throw config_error(file, "/mlp_only_layers/" + std::to_string(i), "expected an integer");
          // a layer the model does not have was ignored (a review: [-1, 1000] read as no dense layer)
          if (x.get<std::int64_t>() < 0 || x.get<std::int64_t>() >= m.layers)
            throw config_error(file, "/mlp_only_layers/" + std::to_string(i),
                               "layer " + std::to_string(x.get<std::int64_t>()) + " is not one of the model's " + std::to_string(m.layers) +
                                   " (0 to " + std::to_string(m.layers - 1) + ")");
          dense.push_back(x.get<std::int64_t>());
        }
      }
      for (std::int64_t i = 0; i < m.layers; ++i)
        if (std::find(dense.begin(), dense.end(), i) == dense.end() && (i + 1) % step == 0) ++m.moe_layers;
    }
  }
}

}  // namespace detail

/// Builds a model_spec from a parsed Hugging Face `config.json` (`file` names it in errors).
///
/// Reads `model_type`, `hidden_size`, `num_hidden_layers`, `num_attention_heads`, `num_key_value_heads`
/// (default: heads), `head_dim` (default: hidden / heads, which must then divide), `intermediate_size`,
/// `vocab_size`, `max_position_embeddings`, `tie_word_embeddings` (family default: true for gemma, false
/// otherwise, as in the transformers config classes), `attention_bias` (qwen2 always has Q/K/V bias).
/// Throws config_error for a non-object, an unsupported `model_type`, a missing or non-integer field,
/// a value below 1, or head counts that do not divide.
[[nodiscard]] inline model_spec model_from_json(const nlohmann::json& j, const std::string& file, std::string name = {}) {
  if (!j.is_object()) throw config_error(file, "", std::string("expected a JSON object, got ") + j.type_name());
  auto family_of = [&](const nlohmann::json& obj, const std::string& ptr, const char* fallback) {
    auto mt = obj.find("model_type");
    if (mt == obj.end() || (fallback && mt->is_null())) {
      if (fallback) return std::string(fallback);
      throw config_error(file, ptr + "/model_type", "missing required field");
    }
    if (!mt->is_string()) throw config_error(file, ptr + "/model_type", std::string("expected a string, got ") + mt->type_name());
    std::string f = mt->get<std::string>();
    const auto& fams = supported_families();
    if (std::find(fams.begin(), fams.end(), f) == fams.end()) {
      std::string list;
      for (const auto& x : fams) list += (list.empty() ? "" : ", ") + x;
      throw config_error(file, ptr + "/model_type", "unsupported model_type '" + f + "' (supported: " + list + ")");
    }
    return f;
  };
  model_spec m;
  m.family = family_of(j, "", nullptr);
  m.name = name.empty() ? std::filesystem::path(file).stem().string() : std::move(name);
  const nlohmann::json* keys = &j;  // the object holding the language model's keys (never a copy)
  std::string prefix;                // its JSON pointer, for messages
  if (m.family == "gemma3") {
    if (auto tc = j.find("text_config"); tc != j.end() && !tc->is_object() && !tc->is_null())  // (it read as a missing hidden_size)
      throw config_error(file, "/text_config", std::string("expected an object (the language model's keys), got ") + tc->type_name());
    if (auto tc = j.find("text_config"); tc != j.end() && tc->is_object()) {
      // multimodal Gemma 3: the language model's keys are under text_config (model_type gemma3_text). It is
      // read once, in place; a text_config inside it is refused rather than followed level by level.
      prefix = "/text_config";
      const std::string inner = family_of(*tc, prefix, "gemma3_text");
      if (inner == "gemma3")
        throw config_error(file, prefix + "/model_type", "a text_config must describe the language model (gemma3_text), not another multimodal gemma3");
      if (tc->contains("text_config"))
        throw config_error(file, prefix + "/text_config", "a text_config inside text_config is not read (Gemma 3 nests one level)");
      keys = &*tc;
      m.family = inner;
    }
  }
  try {
    detail::read_family(m, *keys, file);
  } catch (const config_error& e) {
    if (prefix.empty()) throw;
    throw config_error(e.file(), prefix + e.pointer(), e.reason());
  }
  if (!prefix.empty()) m.family = "gemma3";
  {  // the parameter count in floating point first: the int64 count below must not overflow
    const double h = static_cast<double>(m.hidden), q = static_cast<double>(m.heads) * static_cast<double>(m.head_dim);
    const double kv = static_cast<double>(m.kv_heads) * static_cast<double>(m.head_dim);
    const double mlp = 3 * h * static_cast<double>(m.intermediate) +
                       3 * h * static_cast<double>(m.moe_intermediate) * static_cast<double>(m.experts + 1) +
                       3 * h * static_cast<double>(m.shared_intermediate);
    const double block = 2 * h * q + 2 * h * kv + mlp + q + 2 * kv + 4 * h +
                         (h + q) * static_cast<double>(m.q_lora_rank + m.kv_lora_rank + m.qk_rope_dim);
    const double total = static_cast<double>(m.layers + m.mtp_layers) * block +
                         2 * static_cast<double>(m.vocab + m.positions) * h;
    if (!(total <= 1e15))
      throw config_error(file, prefix, "implausible model: about " + std::to_string(total) + " parameters (more than 10^15)");
  }
  return m;
}

/// Loads a model from a `config.json` path. Throws config_error (see model_from_json), located at the
/// line and byte of the offending member.
[[nodiscard]] inline model_spec load_model(const std::filesystem::path& path, std::string name = {}) {
  const std::string text = read_text_file(path);
  const nlohmann::json j = parse_json(text, path.string());
  try {
    return model_from_json(j, path.string(), std::move(name));
  } catch (const config_error& e) {
    throw with_location(e, text);
  }
}

namespace detail {

/// `key` escaped for use in a JSON pointer (RFC 6901: "~" → "~0", "/" → "~1").
inline std::string pointer_token(const std::string& key) {
  std::string out;
  for (char c : key) {
    if (c == '~') out += "~0";
    else if (c == '/') out += "~1";
    else out += c;
  }
  return out;
}

/// A number of `j[key]` that must be > 0 and <= `max_value` (the limit named `limit` in the message).
inline double get_positive(const nlohmann::json& j, const std::string& file, const std::string& ptr, const std::string& key,
                           double max_value, const std::string& limit, bool required = true, double fallback = 0) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) {
    if (!required) return fallback;
    throw config_error(file, ptr + "/" + pointer_token(key), "missing required field");
  }
  const std::string where = ptr + "/" + pointer_token(key);
  if (!it->is_number()) throw config_error(file, where, std::string("expected a number, got ") + it->type_name());
  const double v = it->get<double>();
  if (!std::isfinite(v)) throw config_error(file, where, "must be a finite number");
  if (v <= 0) throw config_error(file, where, "must be a positive number, got " + it->dump());
  // a rate, size or price of the catalog: at least 1e-6 of its unit (a subnormal 5e-324 TFLOP/s divided into the
  // FLOPs gave inf and then NaN tokens/s)
  if (v < 1e-6) throw config_error(file, where, "must be at least 1e-06, got " + it->dump());
  if (v > max_value) throw config_error(file, where, "must be <= " + limit + ", got " + it->dump());
  return v;
}

/// A string of `j[key]` that must not be empty or blank.
inline std::string get_id(const nlohmann::json& j, const std::string& file, const std::string& ptr, const std::string& key) {
  std::string v = get_string(j, file, ptr, key);
  if (v.find_first_not_of(" \t\r\n") == std::string::npos) throw config_error(file, ptr + "/" + key, "must not be empty");
  return v;
}

/// An integer of `j[key]` in [lo, hi] (a JSON number with no fraction).
inline int get_small_int(const nlohmann::json& j, const std::string& file, const std::string& ptr, const std::string& key,
                         int lo, int hi, std::optional<int> fallback = std::nullopt) {
  auto it = j.find(key);
  const std::string where = ptr + "/" + key;
  if (it == j.end() || it->is_null()) {
    if (fallback) return *fallback;
    throw config_error(file, where, "missing required field");
  }
  if (!it->is_number()) throw config_error(file, where, std::string("expected an integer, got ") + it->type_name());
  const double v = it->get<double>();
  if (!std::isfinite(v) || v != std::floor(v) || v < lo || v > hi)
    throw config_error(file, where, "must be an integer from " + std::to_string(lo) + " to " + std::to_string(hi) + ", got " + it->dump());
  return static_cast<int>(v);
}

/// Architectures the planner models (precision support, FP8 transposes, NVLS).
inline const std::vector<std::string>& known_architectures() {
  static const std::vector<std::string> a{"ampere", "ada", "hopper", "blackwell"};
  return a;
}

}  // namespace detail

/// Upper bounds above which a catalog value is rejected as absurd (a typo or a unit mix-up).
struct catalog_limits {
  static constexpr double memory_gib = 1e6;             ///< GPU or host memory, GiB
  static constexpr double hbm_tb_per_s = 1e3;           ///< device-memory bandwidth, TB/s
  static constexpr double link_gb_per_s = 1e5;          ///< NVLink or PCIe, GB/s per direction
  static constexpr double tflop_per_s = 1e6;            ///< dense TFLOP/s per format
  static constexpr double power_w = 1e5;                ///< board power limit, W
  static constexpr double efa_gbit_per_s = 1e6;         ///< EFA per instance, Gbit/s
  static constexpr double price_usd_per_hour = 1e5;     ///< USD per instance-hour
  static constexpr int gpus_per_node = 1024;            ///< GPUs in one instance
  static constexpr int nvlink_domain_gpus = 100000;     ///< GPUs in one NVLink domain
};

/// Adds the GPUs, aliases and instances of a catalog document to `cat` (replacing entries with the same
/// id), so a user file can extend or override the bundled one.
///
/// GPU fields: `id`, `architecture` (ampere | ada | hopper | blackwell), `hbm_total_mib`, `hbm_bandwidth_tb_per_s`,
/// `dense_tflop_per_s` (with `bf16`) are required; `interconnect` ("nvlink", the default, with
/// `nvlink_gb_per_s_per_direction`; or "pcie" with `pcie_gb_per_s_per_direction`), `driver_reserved_mib`
/// (default 0, below `hbm_total_mib`), `power_limit_w`, `rated_power_w` (the power the FLOP/s are rated at, default `power_limit_w`), `host_link_gb_per_s_per_direction` (the GPU's link to its host, for CPU offload), `attention_speedup` (default 1), `mamf_bf16_tflop_per_s` (measured maximum achievable bf16 matmul rate, TFLOP/s, from a tenth of the bf16 peak to the peak; gpu_spec::mamf_bf16), `attention_kernel` ("fused", the default, or "fa2") and `name` are optional. Instance fields: `id` (ml.*),
/// `gpu`, `gpus_per_node`, `efa_gbit_per_s`, `price_per_hour_usd` are required; `nvlink_domain_gpus` (default:
/// gpus_per_node for NVLink GPUs, 1 for PCIe GPUs), `host_memory_gib`, `price_note`, `price_kind`
/// (ec2-on-demand | ec2-capacity-block | other), `price_region`, `sagemaker_price_per_hour_usd` (with
/// `sagemaker_price_region`) and `sagemaker_price_note` are optional. Bandwidths, rates and memory must be
/// positive and below catalog_limits; ids must not be empty. Throws config_error with the JSON pointer of
/// the offending member.
inline void merge_catalog(hardware_catalog& cat, const nlohmann::json& j, const std::string& file) {
  using detail::get_id;
  using detail::get_number;
  using detail::get_positive;
  using detail::get_small_int;
  using detail::get_string;
  using detail::pointer_token;
  using L = catalog_limits;
  const std::string gib_limit = "1024000000 (10^6 GiB)";
  if (!j.is_object()) throw config_error(file, "", std::string("expected a JSON object, got ") + j.type_name());
  // a file that is not a catalog (a model's config.json, a typo such as "gpu") would merge as nothing: refuse it
  for (const auto& [key, value] : j.items())
    if (key != "gpus" && key != "instances" && key != "aliases" && key != "schema_version" && key != "conventions" &&
        key.rfind("$", 0) != 0 && key.rfind("_", 0) != 0)
      throw config_error(file, "/" + pointer_token(key),
                         "unknown member (a hardware catalog holds gpus, instances, aliases, schema_version and conventions)");
  if (!j.contains("gpus") && !j.contains("instances") && !j.contains("aliases"))
    throw config_error(file, "", "holds no gpus, instances or aliases: not a hardware catalog");
  if (auto v = j.find("schema_version"); v != j.end() && !(v->is_number_integer() && v->get<std::int64_t>() == 1))
    throw config_error(file, "/schema_version", "expected 1 (the catalog format this bwplan reads), got " + v->dump());
  if (auto g = j.find("gpus"); g != j.end()) {
    if (!g->is_array()) throw config_error(file, "/gpus", "expected an array");
    for (std::size_t i = 0; i < g->size(); ++i) {
      const auto& x = (*g)[i];
      const std::string ptr = "/gpus/" + std::to_string(i);
      if (!x.is_object()) throw config_error(file, ptr, "expected an object");
      gpu_spec s;
      s.id = get_id(x, file, ptr, "id");
      s.name = get_string(x, file, ptr, "name", false);
      s.architecture = get_id(x, file, ptr, "architecture");
      {
        const auto& known = detail::known_architectures();
        if (std::find(known.begin(), known.end(), s.architecture) == known.end())
          throw config_error(file, ptr + "/architecture",
                             "unknown architecture '" + s.architecture + "' (known: ampere, ada, hopper, blackwell)");
      }
      const double total_mib = get_positive(x, file, ptr, "hbm_total_mib", L::memory_gib * 1024, gib_limit);
      s.hbm_total = total_mib * mib;
      const double reserved_mib = get_number(x, file, ptr, "driver_reserved_mib", false, 0);
      if (reserved_mib >= total_mib)
        throw config_error(file, ptr + "/driver_reserved_mib",
                           "must be less than hbm_total_mib (" + x.at("hbm_total_mib").dump() + "), got " + x.at("driver_reserved_mib").dump());
      s.driver_reserved = reserved_mib * mib;
      s.hbm_bandwidth = get_positive(x, file, ptr, "hbm_bandwidth_tb_per_s", L::hbm_tb_per_s, "1000") * tb_per_s;
      s.interconnect = x.contains("interconnect") && !x.at("interconnect").is_null() ? get_string(x, file, ptr, "interconnect") : "nvlink";
      if (s.interconnect == "nvlink") {
        if (x.contains("pcie_gb_per_s_per_direction"))
          throw config_error(file, ptr + "/pcie_gb_per_s_per_direction",
                             "an NVLink GPU's peer bandwidth is nvlink_gb_per_s_per_direction (or set \"interconnect\": \"pcie\")");
        s.nvlink_per_direction = get_positive(x, file, ptr, "nvlink_gb_per_s_per_direction", L::link_gb_per_s, "100000") * gb_per_s;
      } else if (s.interconnect == "pcie") {
        if (x.contains("nvlink_gb_per_s_per_direction"))
          throw config_error(file, ptr + "/nvlink_gb_per_s_per_direction",
                             "a PCIe GPU has no NVLink: give pcie_gb_per_s_per_direction instead (or set \"interconnect\": \"nvlink\")");
        s.nvlink_per_direction = get_positive(x, file, ptr, "pcie_gb_per_s_per_direction", L::link_gb_per_s, "100000") * gb_per_s;
      } else {
        throw config_error(file, ptr + "/interconnect", "expected \"nvlink\" or \"pcie\", got " + x.at("interconnect").dump());
      }
      s.host_link_per_direction =
          get_positive(x, file, ptr, "host_link_gb_per_s_per_direction", L::link_gb_per_s, "100000", false, 0) * gb_per_s;
      s.power_limit_w = get_positive(x, file, ptr, "power_limit_w", L::power_w, "100000", false, 0);
      s.rated_power_w = get_positive(x, file, ptr, "rated_power_w", L::power_w, "100000", false, 0);
      // a default limit above the rated power would raise nothing (compute_clock_fraction caps at 1) and was later
      // reported as a --power-limit nobody gave (a review)
      if (s.rated_power_w > 0 && s.power_limit_w > s.rated_power_w)
        throw config_error(file, ptr + "/power_limit_w", "above rated_power_w (" + std::to_string(static_cast<long long>(s.rated_power_w)) +
                                                            " W), the power its FLOP/s are rated at");
      s.attention_speedup = get_positive(x, file, ptr, "attention_speedup", 10.0, "10", false, 1.0);
      if (auto ak = x.find("attention_kernel"); ak != x.end()) {
        const auto parsed = ak->is_string() ? parse_attention_kernel(ak->get<std::string>()) : std::nullopt;
        if (!parsed) throw config_error(file, ptr + "/attention_kernel", "expected \"fused\" or \"fa2\", got " + ak->dump());
        s.attention = *parsed;
      }
      auto d = x.find("dense_tflop_per_s");
      if (d == x.end() || !d->is_object()) throw config_error(file, ptr + "/dense_tflop_per_s", "expected an object of format: TFLOP/s");
      for (auto it = d->begin(); it != d->end(); ++it) {
        if (it.key().empty()) throw config_error(file, ptr + "/dense_tflop_per_s/", "format name must not be empty");
        s.dense_flops[it.key()] = get_positive(*d, file, ptr + "/dense_tflop_per_s", it.key(), L::tflop_per_s, "1000000") * tflop_per_s;
      }
      if (!s.peak("bf16")) throw config_error(file, ptr + "/dense_tflop_per_s/bf16", "missing required field");
      // a measured matmul rate above the datasheet's would make the GPU faster than its rating (gpu_spec::mamf_bf16)
      s.mamf_bf16 = get_positive(x, file, ptr, "mamf_bf16_tflop_per_s", L::tflop_per_s, "1000000", false, 0) * tflop_per_s;
      if (s.mamf_bf16.raw() > s.peak("bf16")->raw())
        throw config_error(file, ptr + "/mamf_bf16_tflop_per_s",
                           "above the bf16 dense peak (" + d->at("bf16").dump() + " TFLOP/s): a measured matmul rate cannot exceed the datasheet's");
      // a fraction (0.729) or PFLOP/s (1.822) for TFLOP/s ran the GPU at a thousandth of its rate (a review); measured
      // rates are 50-90 % of the peak, so below a tenth the unit is wrong
      if (s.mamf_bf16.raw() > 0 && s.mamf_bf16.raw() < 0.1 * (1 - 1e-9) * s.peak("bf16")->raw())  // (a tenth itself is kept)
        throw config_error(file, ptr + "/mamf_bf16_tflop_per_s",
                           "below a tenth of the bf16 dense peak (" + d->at("bf16").dump() +
                               " TFLOP/s): give the measured rate in TFLOP/s, not a fraction of the peak or PFLOP/s");
      {  // an alias of that name would keep resolving to its GPU (a review: --gpu h100-sxm stayed the bundled h100)
        std::string low = s.id;
        std::transform(low.begin(), low.end(), low.begin(), [](unsigned char ch) { return static_cast<char>(std::tolower(ch)); });
        if (auto a = cat.aliases().find(low); a != cat.aliases().end())
          throw config_error(file, ptr + "/id", "'" + s.id + "' is an alias of " + a->second + ": give the GPU another id");
      }
      cat.put(std::move(s));
    }
  }
  if (auto a = j.find("aliases"); a != j.end()) {
    if (!a->is_object()) throw config_error(file, "/aliases", "expected an object");
    for (auto it = a->begin(); it != a->end(); ++it) {
      const std::string ptr = "/aliases/" + pointer_token(it.key());
      if (it.key().find_first_not_of(" \t\r\n") == std::string::npos) throw config_error(file, ptr, "alias name must not be empty");
      if (!it->is_string()) throw config_error(file, ptr, "expected a string");
      if (it->get<std::string>().find_first_not_of(" \t\r\n") == std::string::npos) throw config_error(file, ptr, "must not be empty");
      // an alias names a GPU the catalog has, and no GPU's own id (a review: an alias to a missing GPU loaded and failed
      // later without the file's name; {"h100": "b200"} made --gpu h100 mean a B200, silently)
      try {
        (void)cat.gpu(it->get<std::string>());
      } catch (const invalid_request&) {
        throw config_error(file, ptr, "'" + it->get<std::string>() + "' is no GPU of the catalog (an alias names one)");
      }
      auto low = [](std::string t) {
        std::transform(t.begin(), t.end(), t.begin(), [](unsigned char ch) { return static_cast<char>(std::tolower(ch)); });
        return t;
      };
      for (const auto& g : cat.gpus())
        if (low(g.id) == low(it.key()))
          throw config_error(file, ptr, "'" + it.key() + "' is a GPU's own id: an alias of that name would hide it");
      cat.alias(it.key(), it->get<std::string>());
    }
  }
  if (auto in = j.find("instances"); in != j.end()) {
    if (!in->is_array()) throw config_error(file, "/instances", "expected an array");
    for (std::size_t i = 0; i < in->size(); ++i) {
      const auto& x = (*in)[i];
      const std::string ptr = "/instances/" + std::to_string(i);
      if (!x.is_object()) throw config_error(file, ptr, "expected an object");
      instance_spec s;
      s.id = get_id(x, file, ptr, "id");
      // any id: a user's own instance type need not be a SageMaker "ml." name (hardware_catalog::instance finds it)
      s.gpu = get_id(x, file, ptr, "gpu");
      const gpu_spec* gpu = nullptr;
      try {
        gpu = &cat.gpu(s.gpu);  // must name a known GPU
      } catch (const invalid_request& e) {
        throw config_error(file, ptr + "/gpu", e.what());
      }
      s.gpus_per_node = get_small_int(x, file, ptr, "gpus_per_node", 1, L::gpus_per_node);
      s.efa_per_node = get_positive(x, file, ptr, "efa_gbit_per_s", L::efa_gbit_per_s, "1000000") / 8.0 * gb_per_s;
      s.nvlink_domain_gpus = get_small_int(x, file, ptr, "nvlink_domain_gpus", 1, L::nvlink_domain_gpus,
                                           gpu->has_nvlink() ? s.gpus_per_node : 1);
      if (!gpu->has_nvlink() && s.nvlink_domain_gpus != 1)
        throw config_error(file, ptr + "/nvlink_domain_gpus",
                           "must be 1 for a PCIe GPU (" + gpu->id + " has no NVLink), got " + std::to_string(s.nvlink_domain_gpus));
      // a domain is whole instances (HGX: one; NVL72: 18 of 4 GPUs): one smaller than an instance, or one that splits
      // instances, was read as the instance's own NVLink without a word (an audit)
      if (gpu->has_nvlink() && s.nvlink_domain_gpus % s.gpus_per_node != 0)
        throw config_error(file, ptr + "/nvlink_domain_gpus",
                           "must be a multiple of gpus_per_node (" + std::to_string(s.gpus_per_node) + "): an NVLink domain holds whole "
                           "instances, got " + std::to_string(s.nvlink_domain_gpus));
      s.host_memory = get_positive(x, file, ptr, "host_memory_gib", L::memory_gib, "1000000", false, 0) * gib;
      s.price_per_hour_usd = get_number(x, file, ptr, "price_per_hour_usd");
      if (s.price_per_hour_usd > L::price_usd_per_hour)
        throw config_error(file, ptr + "/price_per_hour_usd", "must be <= 100000, got " + x.at("price_per_hour_usd").dump());
      s.price_note = get_string(x, file, ptr, "price_note", false);
      if (x.contains("price_kind") && !x.at("price_kind").is_null()) {
        const auto k = parse_price_kind(get_string(x, file, ptr, "price_kind"));
        if (!k)
          throw config_error(file, ptr + "/price_kind",
                             "expected \"ec2-on-demand\", \"ec2-capacity-block\" or \"other\", got " + x.at("price_kind").dump());
        s.ec2_price_kind = *k;
      }
      s.price_region = get_string(x, file, ptr, "price_region", false);
      if (x.contains("sagemaker_price_per_hour_usd") && !x.at("sagemaker_price_per_hour_usd").is_null()) {
        s.sagemaker_price_per_hour_usd =
            get_positive(x, file, ptr, "sagemaker_price_per_hour_usd", L::price_usd_per_hour, "100000");
        s.sagemaker_price_region = get_id(x, file, ptr, "sagemaker_price_region");
      }
      s.sagemaker_price_note = get_string(x, file, ptr, "sagemaker_price_note", false);
      cat.put(std::move(s));
    }
  }
}

/// Loads a catalog file into `cat`. Throws config_error.
inline void load_catalog(hardware_catalog& cat, const std::filesystem::path& path) {
  const std::string text = read_text_file(path);
  try {
    merge_catalog(cat, parse_json(text, path.string()), path.string());
  } catch (const config_error& e) {
    throw with_location(e, text);
  } catch (const invalid_request& e) {
    throw config_error(path.string(), "", e.what());
  }
}

}  // namespace bwplan::io
