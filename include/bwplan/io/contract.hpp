// bwplan: GPU memory and throughput planning for LLM training
// SPDX-License-Identifier: Apache-2.0
#pragma once

// The training contract (configs/training-contract.json, docs/training-contract.md): how every plan field
// reaches the reference trainer (apps/train) as a SageMaker hyperparameter, and what the trainer refuses.
// The C++ reader of the file, the one decoder of hyperparameter strings (the counterpart of
// apps/train/contract.py), the hyperparameters of a plan, and the trainer's refusals of a plan.

#include <bwplan/error.hpp>
#include <bwplan/hardware.hpp>
#include <bwplan/io/json.hpp>
#include <bwplan/io/locate.hpp>
#include <bwplan/plan.hpp>
#include <bwplan/precision.hpp>
#include <bwplan/training.hpp>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <optional>
#include <regex>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace bwplan::io {

/// A value of a field the reference trainer does not run: `value` (an enum member) or every integer from
/// `minimum` on, with the id of the refusal in `trainer_refusals` and why.
struct contract_unsupported {
  std::optional<std::string> value;
  std::optional<std::int64_t> minimum;
  std::string refusal;  ///< id in training_contract::refusals ("T-mxfp8-torch")
  std::string reason;
};

/// One entry of the contract's `fields`: a plan field (kind "plan") or a key of the contract itself (kind
/// "contract", e.g. max_steps).
struct contract_field {
  std::string key;                             ///< plan-file key (or contract key)
  std::string kind;                            ///< "plan" | "contract"
  std::optional<std::string> hyperparameter;   ///< name on the wire; nullopt: not a hyperparameter
  std::string source;                          ///< "hyperparameter" | "resource-config" | "planning-only"
  std::string type;                            ///< "int" | "float" | "bool" | "string" | "enum"
  std::string unit;                            ///< "" when none
  std::vector<std::string> values;             ///< enum members
  std::vector<std::string> value_patterns;     ///< enum: further members, anchored regular expressions
  std::vector<std::string> pattern_examples;   ///< one example per value pattern ("every-2")
  std::string pattern;                         ///< string: anchored regular expression ("" = any)
  std::optional<double> minimum, maximum, exclusive_minimum, exclusive_maximum;
  bool required = false;
  nlohmann::json default_value;                ///< null: none (or a default_rule)
  std::string default_rule;                    ///< the default in words, when it depends on other fields
  std::string description;
  std::string trainer;                         ///< "supported" | "not-sent" | "resource-config" | "partial"
  std::vector<contract_unsupported> unsupported;
};

/// One condition of a refusal's `when`: the value is one of `values`, or an integer ≥ `minimum`, or not one
/// of `not_values`.
struct contract_condition {
  std::vector<std::string> values;
  std::optional<std::int64_t> minimum;
  std::vector<std::string> not_values;
};

/// One entry of `trainer_refusals`: plans the reference trainer refuses at start.
struct trainer_refusal {
  std::string id;                                               ///< "T-pp"
  std::vector<std::string> fields;                              ///< plan keys involved, the first named in messages
  std::vector<std::pair<std::string, contract_condition>> when; ///< all must match; empty: only at run time
  std::string scope;                                            ///< "static" (from the plan alone) | "runtime"
  std::string reason;
};

/// The training contract as read from configs/training-contract.json.
struct training_contract {
  int version = 0;                       ///< contract_version; travels with the job as a hyperparameter
  std::string file;                      ///< where it was read from
  std::vector<contract_field> fields;    ///< in file order
  std::vector<trainer_refusal> refusals;
  std::vector<std::string> ignored_prefixes{"sagemaker_"};  ///< hyperparameter keys that are the SDK's own
  std::vector<std::string> null_values{"", "null", "None"}; ///< "not given": the default applies
  std::map<std::string, std::string> presets;              ///< bundled preset id (lower case) → Hugging Face id

  /// The field of plan or contract key `key`, or null.
  [[nodiscard]] const contract_field* field(std::string_view key) const {
    for (const auto& f : fields)
      if (f.key == key) return &f;
    return nullptr;
  }
  /// The field sent as hyperparameter `name`, or null.
  [[nodiscard]] const contract_field* by_hyperparameter(std::string_view name) const {
    for (const auto& f : fields)
      if (f.hyperparameter && *f.hyperparameter == name) return &f;
    return nullptr;
  }
  /// The refusal with id `id`, or null.
  [[nodiscard]] const trainer_refusal* refusal(std::string_view id) const {
    for (const auto& r : refusals)
      if (r.id == id) return &r;
    return nullptr;
  }
  /// The hyperparameter names, in contract order.
  [[nodiscard]] std::vector<std::string> hyperparameter_names() const {
    std::vector<std::string> out;
    for (const auto& f : fields)
      if (f.hyperparameter) out.push_back(*f.hyperparameter);
    return out;
  }
};

namespace detail {

inline std::string contract_string(const nlohmann::json& j, const char* key, const std::string& file, const std::string& ptr,
                                   bool required = true) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) {
    if (required) throw config_error(file, ptr + "/" + key, "missing required member");
    return {};
  }
  if (!it->is_string()) throw config_error(file, ptr + "/" + key, std::string("expected a string, got ") + it->type_name());
  return it->get<std::string>();
}

inline std::vector<std::string> contract_strings(const nlohmann::json& j, const std::string& file, const std::string& ptr) {
  if (!j.is_array()) throw config_error(file, ptr, std::string("expected an array of strings, got ") + j.type_name());
  std::vector<std::string> out;
  for (std::size_t i = 0; i < j.size(); ++i) {
    if (!j[i].is_string()) throw config_error(file, ptr + "/" + std::to_string(i), "expected a string");
    out.push_back(j[i].get<std::string>());
  }
  return out;
}

inline std::optional<std::int64_t> contract_int(const nlohmann::json& j, const std::string& file, const std::string& ptr) {
  if (!j.is_number_integer()) throw config_error(file, ptr, std::string("expected an integer, got ") + j.type_name());
  return j.get<std::int64_t>();
}

/// Checks that `pattern` compiles as an ECMAScript regular expression (the dialect std::regex and Python share
/// for the contract's patterns).
inline void contract_regex(const std::string& pattern, const std::string& file, const std::string& ptr) {
  try {
    std::regex re(pattern);
    (void)re;
  } catch (const std::regex_error& e) {
    throw config_error(file, ptr, "pattern '" + pattern + "' is not a valid regular expression: " + e.what());
  }
}

/// The number as the contract writes it: "1", "0.05", "4294967296".
inline std::string contract_number(double v) {
  if (v == std::floor(v) && std::abs(v) < 1e18) return std::to_string(static_cast<std::int64_t>(v));
  return bwplan::detail::shortest(v);
}

}  // namespace detail

/// Builds the contract from its parsed JSON (`file` names it in errors). Throws config_error with the JSON
/// pointer of a missing or malformed member, an unknown field type, a duplicate key or hyperparameter, a
/// pattern that does not compile, or a refusal condition of another shape.
[[nodiscard]] inline training_contract parse_contract(const nlohmann::json& j, const std::string& file) {
  using namespace detail;
  if (!j.is_object()) throw config_error(file, "", std::string("the training contract must be a JSON object, got ") + j.type_name());
  training_contract k;
  k.file = file;
  auto v = j.find("contract_version");
  if (v == j.end() || !v->is_number_integer() || v->get<std::int64_t>() < 1 || v->get<std::int64_t>() > 1000)
    throw config_error(file, "/contract_version", "expected an integer between 1 and 1000");
  k.version = static_cast<int>(v->get<std::int64_t>());
  if (auto e = j.find("hyperparameter_encoding"); e != j.end() && e->is_object()) {
    if (auto p = e->find("ignored_prefixes"); p != e->end())
      k.ignored_prefixes = contract_strings(*p, file, "/hyperparameter_encoding/ignored_prefixes");
    if (auto n = e->find("null_means_default"); n != e->end()) {
      k.null_values = contract_strings(*n, file, "/hyperparameter_encoding/null_means_default");
      k.null_values.emplace_back("None");  // Python's str(None), as apps/train/contract.py accepts it
    }
  }
  auto fs = j.find("fields");
  if (fs == j.end() || !fs->is_array()) throw config_error(file, "/fields", "expected an array of fields");
  for (std::size_t i = 0; i < fs->size(); ++i) {
    const std::string ptr = "/fields/" + std::to_string(i);
    const nlohmann::json& x = (*fs)[i];
    if (!x.is_object()) throw config_error(file, ptr, "expected an object");
    contract_field f;
    f.key = contract_string(x, "key", file, ptr);
    f.kind = contract_string(x, "kind", file, ptr);
    if (f.kind != "plan" && f.kind != "contract") throw config_error(file, ptr + "/kind", "expected plan or contract, got '" + f.kind + "'");
    if (auto h = x.find("hyperparameter"); h != x.end() && !h->is_null()) {
      if (!h->is_string() || h->get<std::string>().empty()) throw config_error(file, ptr + "/hyperparameter", "expected a name or null");
      f.hyperparameter = h->get<std::string>();
    }
    f.source = contract_string(x, "source", file, ptr);
    f.type = contract_string(x, "type", file, ptr);
    if (f.type != "int" && f.type != "float" && f.type != "bool" && f.type != "string" && f.type != "enum")
      throw config_error(file, ptr + "/type", "unknown type '" + f.type + "' (int, float, bool, string, enum)");
    f.unit = contract_string(x, "unit", file, ptr, false);
    if (auto vs = x.find("values"); vs != x.end()) f.values = contract_strings(*vs, file, ptr + "/values");
    if (auto ps = x.find("patterns"); ps != x.end()) {
      if (!ps->is_array()) throw config_error(file, ptr + "/patterns", "expected an array");
      for (std::size_t p = 0; p < ps->size(); ++p) {
        const std::string pp = ptr + "/patterns/" + std::to_string(p);
        f.value_patterns.push_back(contract_string((*ps)[p], "pattern", file, pp));
        contract_regex(f.value_patterns.back(), file, pp + "/pattern");
        f.pattern_examples.push_back(contract_string((*ps)[p], "example", file, pp, false));
      }
    }
    if (f.type == "enum" && f.values.empty() && f.value_patterns.empty()) throw config_error(file, ptr + "/values", "an enum needs values");
    f.pattern = contract_string(x, "pattern", file, ptr, false);
    if (!f.pattern.empty()) contract_regex(f.pattern, file, ptr + "/pattern");
    for (auto [name, slot] : {std::pair{"minimum", &f.minimum}, std::pair{"maximum", &f.maximum},
                              std::pair{"exclusive_minimum", &f.exclusive_minimum}, std::pair{"exclusive_maximum", &f.exclusive_maximum}})
      if (auto n = x.find(name); n != x.end()) {
        if (!n->is_number()) throw config_error(file, ptr + "/" + name, "expected a number");
        *slot = n->get<double>();
      }
    if (auto r = x.find("required"); r != x.end()) {
      if (!r->is_boolean()) throw config_error(file, ptr + "/required", "expected true or false");
      f.required = r->get<bool>();
    }
    if (auto d = x.find("default"); d != x.end()) f.default_value = *d;
    f.default_rule = contract_string(x, "default_rule", file, ptr, false);
    f.description = contract_string(x, "description", file, ptr, false);
    if (auto t = x.find("trainer"); t != x.end()) {
      if (t->is_string()) {
        f.trainer = t->get<std::string>();
      } else if (t->is_object()) {
        f.trainer = "partial";
        if (auto us = t->find("unsupported"); us != t->end()) {
          if (!us->is_array()) throw config_error(file, ptr + "/trainer/unsupported", "expected an array");
          for (std::size_t u = 0; u < us->size(); ++u) {
            const std::string up = ptr + "/trainer/unsupported/" + std::to_string(u);
            const nlohmann::json& e = (*us)[u];
            if (!e.is_object()) throw config_error(file, up, "expected an object");
            contract_unsupported cu;
            if (auto val = e.find("value"); val != e.end()) {
              if (!val->is_string()) throw config_error(file, up + "/value", "expected a string");
              cu.value = val->get<std::string>();
            }
            if (auto mn = e.find("minimum"); mn != e.end()) cu.minimum = contract_int(*mn, file, up + "/minimum");
            if (!cu.value && !cu.minimum) throw config_error(file, up, "needs a value or a minimum");
            cu.refusal = contract_string(e, "refusal", file, up);
            cu.reason = contract_string(e, "reason", file, up);
            f.unsupported.push_back(std::move(cu));
          }
        }
      } else {
        throw config_error(file, ptr + "/trainer", "expected a string or an object");
      }
    }
    if (k.field(f.key)) throw config_error(file, ptr + "/key", "duplicate key '" + f.key + "'");
    if (f.hyperparameter && k.by_hyperparameter(*f.hyperparameter))
      throw config_error(file, ptr + "/hyperparameter", "duplicate hyperparameter '" + *f.hyperparameter + "'");
    k.fields.push_back(std::move(f));
  }
  if (auto rs = j.find("trainer_refusals"); rs != j.end()) {
    if (!rs->is_array()) throw config_error(file, "/trainer_refusals", "expected an array");
    for (std::size_t i = 0; i < rs->size(); ++i) {
      const std::string ptr = "/trainer_refusals/" + std::to_string(i);
      const nlohmann::json& x = (*rs)[i];
      if (!x.is_object()) throw config_error(file, ptr, "expected an object");
      trainer_refusal r;
      r.id = contract_string(x, "id", file, ptr);
      if (auto f = x.find("fields"); f != x.end()) r.fields = contract_strings(*f, file, ptr + "/fields");
      if (r.fields.empty()) throw config_error(file, ptr + "/fields", "a refusal names at least one field");
      r.scope = contract_string(x, "scope", file, ptr);
      if (r.scope != "static" && r.scope != "runtime") throw config_error(file, ptr + "/scope", "expected static or runtime");
      r.reason = contract_string(x, "reason", file, ptr);
      auto w = x.find("when");
      if (w == x.end() || !w->is_object()) throw config_error(file, ptr + "/when", "expected an object");
      for (auto c = w->begin(); c != w->end(); ++c) {
        const std::string cp = ptr + "/when/" + pointer_escape(c.key());
        contract_condition cond;
        if (c->is_array()) {
          for (const auto& e : *c) cond.values.push_back(e.is_string() ? e.get<std::string>() : e.dump());
        } else if (c->is_object() && c->contains("minimum")) {
          cond.minimum = contract_int((*c)["minimum"], file, cp + "/minimum");
        } else if (c->is_object() && c->contains("not")) {
          cond.not_values = contract_strings((*c)["not"], file, cp + "/not");
        } else {
          throw config_error(file, cp, "expected a list of values, {\"minimum\": N} or {\"not\": [...]}");
        }
        r.when.emplace_back(c.key(), std::move(cond));
      }
      k.refusals.push_back(std::move(r));
    }
  }
  if (auto ps = j.find("presets"); ps != j.end()) {
    if (!ps->is_object()) throw config_error(file, "/presets", "expected an object");
    for (auto p = ps->begin(); p != ps->end(); ++p) {
      if (!p->is_string()) throw config_error(file, "/presets/" + pointer_escape(p.key()), "expected a string");
      k.presets[p.key()] = p->get<std::string>();
    }
  }
  // every unsupported value names a refusal the contract lists
  for (std::size_t i = 0; i < k.fields.size(); ++i)
    for (std::size_t u = 0; u < k.fields[i].unsupported.size(); ++u)
      if (!k.refusal(k.fields[i].unsupported[u].refusal))
        throw config_error(file, "/fields/" + std::to_string(i) + "/trainer/unsupported/" + std::to_string(u) + "/refusal",
                           "unknown refusal '" + k.fields[i].unsupported[u].refusal + "'");
  return k;
}

/// Reads the contract file at `path`. Throws config_error (with the member's line).
[[nodiscard]] inline training_contract load_contract(const std::filesystem::path& path) {
  const std::string text = read_text_file(path);
  try {
    return parse_contract(parse_json(text, path.string()), path.string());
  } catch (const config_error& e) {
    throw with_location(e, text);
  }
}

// ------------------------------------------------------------------------------------------ values

namespace detail {

inline std::string trim(std::string_view s) {
  std::size_t a = 0, b = s.size();
  while (a < b && std::isspace(static_cast<unsigned char>(s[a]))) ++a;
  while (b > a && std::isspace(static_cast<unsigned char>(s[b - 1]))) --b;
  return std::string(s.substr(a, b - a));
}

/// SDK v2 stores json.dumps(value) in the HyperParameters map: one level of JSON string quoting is removed.
inline std::string unquote(std::string_view raw) {
  const std::string s = trim(raw);
  if (s.size() >= 2 && s.front() == '"' && s.back() == '"') {
    try {
      const auto j = nlohmann::json::parse(s);
      if (j.is_string()) return j.get<std::string>();
    } catch (const nlohmann::json::exception&) {
    }
  }
  return std::string(raw);
}

/// What a field expects, as apps/train/contract.py `_what` says it: "an integer (tokens)", "one of a, b".
inline std::string expected(const contract_field& f) {
  if (f.type == "enum") {
    std::string s = "one of ";
    bool first = true;
    for (const auto& v : f.values) { s += (first ? "" : ", ") + v; first = false; }
    for (const auto& e : f.pattern_examples) { s += (first ? "" : ", ") + e; first = false; }
    return s;
  }
  const std::string unit = f.unit.empty() ? "" : " (" + f.unit + ")";
  if (f.type == "int") return "an integer" + unit;
  if (f.type == "float") return "a number" + unit;
  if (f.type == "bool") return "true or false";
  return "a string" + unit;
}

[[noreturn]] inline void bad_value(const contract_field& f, const std::string& message) {
  throw plan_error({f.key, "/" + f.key, "hyperparameter '" + f.hyperparameter.value_or(f.key) + "': " + message});
}

}  // namespace detail

/// The one decoder of a hyperparameter string, as apps/train/contract.py `decode_value` reads it: one level of
/// JSON string quoting removed (SDK v2 sends json.dumps of every value), booleans true/false in any case
/// ("True" from the SDK v2 toolkit, "true" from SDK v3), integers, finite numbers, enum members and the
/// field's patterns, then the range. Returns the typed value. Throws plan_error (field = the plan key) with
/// a message naming the hyperparameter: "hyperparameter 'seq_len': expected an integer (tokens), got '4k'".
[[nodiscard]] inline nlohmann::json decode_hyperparameter(const contract_field& f, std::string_view raw) {
  using detail::bad_value;
  const std::string s = detail::trim(detail::unquote(raw));
  const std::string got = "got '" + std::string(raw) + "'";
  nlohmann::json v;
  if (f.type == "bool") {
    std::string low = s;
    for (auto& ch : low) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
    if (low != "true" && low != "false") bad_value(f, "expected true or false (True/False), " + got);
    v = low == "true";
  } else if (f.type == "int") {
    static const std::regex integer("[+-]?[0-9]+");
    if (!std::regex_match(s, integer)) bad_value(f, "expected " + detail::expected(f) + ", " + got);
    errno = 0;
    char* end = nullptr;
    const long long n = std::strtoll(s.c_str(), &end, 10);
    if (errno == ERANGE) bad_value(f, s + " is out of range");
    v = static_cast<std::int64_t>(n);
  } else if (f.type == "float") {
    // decimal notation only, as apps/train/contract.py reads it (strtod alone also takes hex floats, "0x4" = 4, and
    // Python's float() digit separators, "1_0" = 10: each side refused what the other read)
    static const std::regex decimal("[+-]?([0-9]+(\\.[0-9]*)?|\\.[0-9]+)([eE][+-]?[0-9]+)?|[+-]?(inf|infinity|nan)", std::regex::icase);
    if (!std::regex_match(s, decimal)) bad_value(f, "expected " + detail::expected(f) + ", " + got);
    char* end = nullptr;
    const double d = std::strtod(s.c_str(), &end);
    if (end != s.c_str() + s.size()) bad_value(f, "expected " + detail::expected(f) + ", " + got);
    if (!std::isfinite(d)) bad_value(f, "expected a finite number, " + got);
    v = d;
  } else if (f.type == "enum") {
    bool ok = std::find(f.values.begin(), f.values.end(), s) != f.values.end();
    for (const auto& p : f.value_patterns) ok = ok || std::regex_match(s, std::regex(p));
    if (!ok) bad_value(f, "expected " + detail::expected(f) + ", " + got);
    v = s;
  } else {
    if (!f.pattern.empty() && !std::regex_match(s, std::regex(f.pattern)))
      bad_value(f, "'" + std::string(raw) + "' does not match " + f.pattern);
    v = s;
  }
  if (v.is_number()) {
    const double d = v.get<double>();
    if (f.minimum && d < *f.minimum) bad_value(f, s + " is below the minimum " + detail::contract_number(*f.minimum));
    if (f.maximum && d > *f.maximum) bad_value(f, s + " is above the maximum " + detail::contract_number(*f.maximum));
    if (f.exclusive_minimum && d <= *f.exclusive_minimum) bad_value(f, s + " must be above " + detail::contract_number(*f.exclusive_minimum));
    if (f.exclusive_maximum && d >= *f.exclusive_maximum) bad_value(f, s + " must be below " + detail::contract_number(*f.exclusive_maximum));
  }
  return v;
}

/// Whether `raw` means "not given" (the default applies): "", "null" (SDK v3 for None), "None".
[[nodiscard]] inline bool is_null_hyperparameter(const training_contract& k, std::string_view raw) {
  const std::string s = detail::trim(raw);
  return std::find(k.null_values.begin(), k.null_values.end(), s) != k.null_values.end();
}

/// A typed value as SDK v3 writes it into hyperparameters.json: strings unchanged, the others as JSON
/// (true/false, 4096, 0.0002), null as "null". The form decode_hyperparameter reads most plainly.
[[nodiscard]] inline std::string hyperparameter_text(const nlohmann::json& v) {
  if (v.is_string()) return v.get<std::string>();
  if (v.is_number_float()) return bwplan::detail::shortest(v.get<double>());
  return v.dump();
}

// ------------------------------------------------------------------------------------------ plan → hyperparameters

/// The value of plan-kind hyperparameter `key` for plan `p` (world size, accumulation and sharding resolved),
/// with the contract's defaults written out: the global batch, the blocks kept bf16 (nvfp4: 0.15), the hybrid
/// shard group (GPUs per node / tp). Null: the field is not sent for this plan (gpu unknown; shard_group
/// without hybrid sharding). Throws config_error when the contract has a plan field bwplan does not know.
[[nodiscard]] inline nlohmann::json plan_hyperparameter(const training_contract& k, const plan& p, std::string_view key) {
  const training_config& c = p.training;
  if (key == "model") return p.model;
  if (key == "gpu") return p.target.gpu.empty() ? nlohmann::json() : nlohmann::json(p.target.gpu);
  if (key == "gpus") return c.world_size;
  if (key == "precision") return to_string(c.format);
  if (key == "master_weights") return to_string(c.master);
  if (key == "micro_batch_size") return c.micro_batch;
  if (key == "seq_len") return c.seq_len;
  if (key == "global_batch_size") return p.global_batch ? *p.global_batch : c.micro_batch * c.grad_accum * std::max(1, c.world_size / (c.tp * c.cp * c.pp));
  if (key == "grad_accum") return c.grad_accum;
  if (key == "activation_checkpointing") return to_string(c.ac);
  if (key == "sharding") return to_string(c.shard);
  if (key == "shard_group") return c.shard == sharding::hybrid ? nlohmann::json(c.shard_size()) : nlohmann::json();
  if (key == "tp") return c.tp;
  if (key == "cp") return c.cp;
  if (key == "ep") return c.ep;
  if (key == "pp") return c.pp;
  if (key == "pp_schedule") return to_string(c.schedule);
  if (key == "vpp") return c.vpp;
  if (key == "optimizer") return to_string(c.optim);
  if (key == "optimizer_impl") return to_string(c.optimizer);
  if (key == "loss") return to_string(c.loss);
  if (key == "finetune") return to_string(c.finetune);
  // LoRA settings: sent with adapters only (a full fine-tune keeps their defaults, plan violations)
  if (key == "lora_rank") return c.adapters() ? nlohmann::json(c.lora.rank) : nlohmann::json();
  if (key == "lora_alpha") return c.adapters() ? nlohmann::json(c.lora.alpha) : nlohmann::json();
  if (key == "lora_targets") return c.adapters() ? nlohmann::json(lora_targets_to_string(c.lora.targets)) : nlohmann::json();
  if (key == "lora_dropout") return c.adapters() ? nlohmann::json(c.lora.dropout) : nlohmann::json();
  if (key == "bf16_layers") return to_string(c.bf16_kept());
  if (key == "fp8_all_gather") return c.fp8_all_gather;
  if (key == "stack") return to_string(c.stack);
  if (key == "compile") return c.compile;
  if (key == "modules") return to_string(c.modules);
  if (key == "expandable_segments") return c.expandable_segments;
  if (key == "offload") return offload_to_string(c.offload);
  if (key == "optimizer_in_backward") return c.optimizer_in_backward;
  if (key == "sequence_parallel") return c.sequence_parallel;
  if (key == "fsdp_embedding_units") return c.fsdp_embedding_units;
  if (key == "tp_comm_overlap") return c.tp_comm_overlap;
  if (key == "moe_a2a_overlap") return c.moe_a2a_overlap;
  throw config_error(k.file, "/fields", "plan field '" + std::string(key) + "' of the training contract is unknown to this bwplan");
}

/// The hyperparameters of plan `p` (resolved, see plan_hyperparameter), typed, in contract order:
/// contract_version, then every plan field that is a hyperparameter. Contract-only keys (max_steps, data, ...)
/// are the caller's. Values are not validated here: see validate_hyperparameters.
[[nodiscard]] inline nlohmann::ordered_json plan_hyperparameters(const training_contract& k, const plan& p) {
  nlohmann::ordered_json out;
  for (const auto& f : k.fields) {
    if (!f.hyperparameter) continue;
    if (f.key == "contract_version") { out[*f.hyperparameter] = k.version; continue; }
    if (f.kind != "plan") continue;
    nlohmann::json v = plan_hyperparameter(k, p, f.key);
    if (!v.is_null()) out[*f.hyperparameter] = std::move(v);
  }
  return out;
}

/// Checks every typed value of `hps` with the contract's decoder (the trainer's own reading): a known
/// hyperparameter, of its type, in its values, pattern and range. Throws plan_error (field = the plan key)
/// for the first that is not.
inline void validate_hyperparameters(const training_contract& k, const nlohmann::ordered_json& hps) {
  for (auto it = hps.begin(); it != hps.end(); ++it) {
    const contract_field* f = k.by_hyperparameter(it.key());
    if (f == nullptr)
      throw plan_error({it.key(), "/" + it.key(), "hyperparameter '" + it.key() + "': unknown (not in training contract version " +
                                                      std::to_string(k.version) + ")"});
    (void)decode_hyperparameter(*f, hyperparameter_text(*it));
  }
}

// ------------------------------------------------------------------------------------------ refusals

namespace detail {

/// A plan value for a refusal condition: an integer, or a name.
struct condition_value {
  bool integer = false;
  std::int64_t i = 0;
  std::string s;
};

inline std::optional<condition_value> refusal_value(const plan& p, std::string_view key) {
  const training_config& c = p.training;
  const int world = c.world_size;
  const int tcp = std::max(1, c.tp * c.cp * c.pp);
  auto num = [](std::int64_t v) { return condition_value{true, v, std::to_string(v)}; };
  auto name = [](std::string v) { return condition_value{false, 0, std::move(v)}; };
  if (key == "precision") return name(to_string(c.format));
  if (key == "master_weights") return name(to_string(c.master));
  if (key == "sharding") return name(to_string(c.shard));
  if (key == "activation_checkpointing") return name(to_string(c.ac));
  if (key == "loss") return name(to_string(c.loss));
  if (key == "optimizer_impl") return name(to_string(c.optimizer));
  if (key == "optimizer") return name(to_string(c.optim));
  if (key == "finetune") return name(to_string(c.finetune));
  if (key == "tp") return num(c.tp);
  if (key == "cp") return num(c.cp);
  if (key == "ep") return num(c.ep);
  if (key == "pp") return num(c.pp);
  if (key == "pp_schedule") return name(to_string(c.schedule));
  if (key == "vpp") return num(c.vpp);
  if (key == "gpus") return num(world);
  if (key == "micro_batch_size") return num(c.micro_batch);
  if (key == "seq_len") return num(c.seq_len);
  if (key == "grad_accum") return num(c.grad_accum);
  if (key == "dp") return num(world / tcp);
  if (key == "dp_cp") return num(world / tcp * c.cp);
  if (key == "fp8_all_gather") return name(c.fp8_all_gather ? "true" : "false");
  if (key == "stack") return name(to_string(c.stack));
  if (key == "compile") return name(c.compile ? "true" : "false");
  if (key == "modules") return name(to_string(c.modules));
  if (key == "expandable_segments") return name(c.expandable_segments ? "true" : "false");
  if (key == "offload") return name(offload_to_string(c.offload));
  if (key == "optimizer_in_backward") return name(c.optimizer_in_backward ? "true" : "false");
  if (key == "sequence_parallel") return name(c.sequence_parallel ? "true" : "false");
  if (key == "fsdp_embedding_units") return name(c.fsdp_embedding_units ? "true" : "false");
  if (key == "tp_comm_overlap") return name(c.tp_comm_overlap ? "true" : "false");
  if (key == "moe_a2a_overlap") return name(c.moe_a2a_overlap ? "true" : "false");
  if (key == "gpu") return name(p.target.gpu);
  if (key == "model") return name(p.model);
  return std::nullopt;
}

inline bool condition_holds(const contract_condition& cond, const std::optional<condition_value>& v) {
  if (!v) return false;
  if (cond.minimum) return v->integer && v->i >= *cond.minimum;
  if (!cond.not_values.empty()) return std::find(cond.not_values.begin(), cond.not_values.end(), v->s) == cond.not_values.end();
  return std::find(cond.values.begin(), cond.values.end(), v->s) != cond.values.end();
}

inline std::string condition_label(std::string_view key, const condition_value& v) {
  if (key == "dp") return "data-parallel size " + v.s;
  if (key == "dp_cp") return v.s + " data- x context-parallel ranks";
  return std::string(key) + " " + v.s;
}

}  // namespace detail

/// What the reference trainer cannot run of plan `p` (world size resolved), as violations of the field to
/// change: every `trainer_refusals` entry of scope static whose `when` matches; every value a field lists as
/// unsupported whose refusal needs the run time to decide (mxfp8 on the PyTorch 2.11 image: the trainer always
/// refuses it there, so bwplan never emits it); and the contract rules bwplan's own rules leave out (R-cp-seq:
/// with tp > 1 the sequence is a multiple of tp x 2 x cp; R-hybrid: the shard group is a multiple of cp).
/// Messages read "pp 2: the reference trainer cannot run it (T-pp): pipeline parallelism is not implemented
/// ...". `first_only` stops at the first (recommend's search filter).
[[nodiscard]] inline std::vector<plan_violation> trainer_refusals(const training_contract& k, const plan& p, bool first_only = false) {
  std::vector<plan_violation> out;
  auto add = [&](const std::string& field, std::string message) { out.push_back({field, "/" + field, std::move(message)}); };
  for (const auto& r : k.refusals) {
    if (r.scope != "static" || r.when.empty()) continue;
    bool all = true;
    for (const auto& [key, cond] : r.when) all = all && detail::condition_holds(cond, detail::refusal_value(p, key));
    if (!all) continue;
    if (first_only) return {{r.fields.front(), "/" + r.fields.front(), r.id}};
    std::string what;
    for (const auto& [key, cond] : r.when) what += (what.empty() ? "" : ", ") + detail::condition_label(key, *detail::refusal_value(p, key));
    add(r.fields.front(), what + ": the reference trainer cannot run it (" + r.id + "): " + r.reason);
  }
  for (const auto& f : k.fields) {
    for (const auto& u : f.unsupported) {
      const trainer_refusal* r = k.refusal(u.refusal);
      if (r != nullptr && r->scope == "static") continue;  // decided by its `when` above
      const auto v = detail::refusal_value(p, f.key);
      if (!v) continue;
      const bool hit = (u.value && !v->integer && v->s == *u.value) || (u.minimum && v->integer && v->i >= *u.minimum);
      if (!hit) continue;
      if (first_only) return {{f.key, "/" + f.key, u.refusal}};
      add(f.key, f.key + " " + v->s + ": the reference trainer cannot run it (" + u.refusal + "): " + u.reason);
    }
  }
  const training_config& c = p.training;
  if (c.cp > 1 && c.tp > 1 && c.seq_len % (2 * c.cp * c.tp) != 0) {
    if (first_only) return {{"seq_len", "/seq_len", "R-cp-seq"}};
    add("seq_len", "sequence length " + std::to_string(c.seq_len) + " is not a multiple of tp x 2 x cp = " + std::to_string(2 * c.cp * c.tp) +
                       ": sequence parallelism splits each of the 2 x cp context-parallel chunks over tp (training contract rule R-cp-seq)");
  }
  if (c.shard == sharding::hybrid && c.cp > 1 && c.shard_size() % c.cp != 0) {
    if (first_only) return {{"shard_group", "/shard_group", "R-hybrid"}};
    add("shard_group", "shard group " + std::to_string(c.shard_size()) + " is not a multiple of cp = " + std::to_string(c.cp) +
                           ": the context-parallel ranks are part of the FSDP shard group (training contract rule R-hybrid)");
  }
  return out;
}

/// Whether the reference trainer runs plan `p` (no trainer_refusals).
[[nodiscard]] inline bool trainer_runs(const training_contract& k, const plan& p) { return trainer_refusals(k, p, true).empty(); }

}  // namespace bwplan::io
