// bwplan: GPU memory and throughput planning for LLM training
// SPDX-License-Identifier: Apache-2.0
#pragma once

// Validation of request bodies against an AWS service model (the botocore `service-2.json` layout),
// with the rules botocore's ParamValidator checks and the ones it leaves to the service.

#include <bwplan/error.hpp>
#include <bwplan/hardware.hpp>
#include <bwplan/io/json.hpp>

#include <nlohmann/json.hpp>

#include <cstdint>
#include <filesystem>
#include <limits>
#include <map>
#include <memory>
#include <mutex>
#include <regex>
#include <string>
#include <string_view>
#include <vector>

namespace bwplan::io {

/// One rule of the service model that a value breaks.
struct shape_violation {
  std::string path;   ///< member path as botocore writes it: `ResourceConfig.InstanceCount`, `Tags[0].Key`, `HyperParameters.epochs`
  std::string rule;   ///< what is wrong, e.g. "length 70 is above the maximum 63 of TrainingJobName"
  std::string shape;  ///< the shape whose rule was broken
  /// "path: rule", the one line the CLI prints.
  [[nodiscard]] std::string to_string() const { return (path.empty() ? std::string("(request)") : path) + ": " + rule; }
};

namespace detail {

/// Decodes UTF-8 into code points (one wchar_t each; wchar_t is 32 bits on the platforms bwplan builds on).
/// Returns false on malformed UTF-8.
inline bool utf8_decode(std::string_view s, std::wstring& out) {
  static_assert(sizeof(wchar_t) >= 4, "code points must fit in wchar_t");
  out.clear();
  out.reserve(s.size());
  for (std::size_t i = 0; i < s.size();) {
    const auto c = static_cast<unsigned char>(s[i]);
    std::uint32_t cp = 0;
    std::size_t n = 0;
    if (c < 0x80) { cp = c; n = 1; }
    else if ((c & 0xE0) == 0xC0) { cp = c & 0x1Fu; n = 2; }
    else if ((c & 0xF0) == 0xE0) { cp = c & 0x0Fu; n = 3; }
    else if ((c & 0xF8) == 0xF0) { cp = c & 0x07u; n = 4; }
    else return false;
    if (i + n > s.size()) return false;
    for (std::size_t k = 1; k < n; ++k) {
      const auto cc = static_cast<unsigned char>(s[i + k]);
      if ((cc & 0xC0) != 0x80) return false;
      cp = (cp << 6) | (cc & 0x3Fu);
    }
    static constexpr std::uint32_t min_for_len[] = {0, 0, 0x80, 0x800, 0x10000};
    if (cp < min_for_len[n] || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return false;
    out.push_back(static_cast<wchar_t>(cp));
    i += n;
  }
  return true;
}

/// An AWS (Java/Smithy) pattern translated for std::wregex (ECMAScript grammar, code points).
struct translated_pattern {
  std::wstring ecma;                ///< the pattern for std::wregex, matched against the whole value
  bool forbid_trailing_hyphen = false;  ///< a trailing `(?<!-)` was removed: the value must not end with '-'
};

/// Translates the constructs of AWS patterns that ECMAScript lacks:
/// - `\p{L}` (letters): ASCII letters, Latin-1 letters and every code point from U+0100 that is not in
///   the General Punctuation to Miscellaneous Symbols blocks (U+2000–U+2BFF), the surrogates or
///   private use; an approximation that accepts every letter and a few non-letters (marks, some symbols);
/// - `\p{Z}` (separators): exactly U+0020, U+00A0, U+1680, U+2000–U+200A, U+2028, U+2029, U+202F, U+205F, U+3000;
/// - `\p{N}` (numbers): ASCII digits, ², ³, ¹, ¼–¾ (other scripts' digits are inside the `\p{L}` ranges);
/// - `\p{Alnum}`: ASCII letters and digits (Java's POSIX class is ASCII-only);
/// - a trailing `(?<!-)` lookbehind (std::regex has none): removed, and checked as "does not end with '-'".
/// Everything else in the SageMaker patterns (`\d`, `\w`, `\S`, `(?:…)`, `\/`, `{m,n}`) is ECMAScript already.
/// Throws std::invalid_argument for other `\p{…}` classes or lookbehinds.
/// Source: java.util.regex.Pattern (the model's patterns are Java regexes) and ECMA-262 §22.2.
inline translated_pattern translate_aws_pattern(std::string_view aws) {
  translated_pattern t;
  std::string p(aws);
  const std::string tail = "(?<!-)";
  if (p.size() >= tail.size() && p.compare(p.size() - tail.size(), tail.size(), tail) == 0) {
    p.erase(p.size() - tail.size());
    t.forbid_trailing_hyphen = true;
  }
  if (p.find("(?<") != std::string::npos) throw std::invalid_argument("lookbehind or named group not supported");
  const std::wstring letters = std::wstring(L"a-zA-Z\u00AA\u00B5\u00BA\u00C0-\u00D6\u00D8-\u00F6\u00F8-\u1FFF\u2C00-\uD7FF\uF900-\uFFEF") +
                               static_cast<wchar_t>(0x10000) + L"-" + static_cast<wchar_t>(0xEFFFF);
  const std::wstring separators = L" \u00A0\u1680\u2000-\u200A\u2028\u2029\u202F\u205F\u3000";
  const std::wstring numbers = L"0-9\u00B2\u00B3\u00B9\u00BC-\u00BE";
  std::wstring w;
  if (!utf8_decode(p, w)) throw std::invalid_argument("pattern is not UTF-8");
  std::wstring out;
  for (std::size_t i = 0; i < w.size(); ++i) {
    if (w[i] == L'\\' && i + 1 < w.size() && w[i + 1] == L'p') {
      const auto close = w.find(L'}', i);
      if (i + 2 >= w.size() || w[i + 2] != L'{' || close == std::wstring::npos)
        throw std::invalid_argument("malformed \\p class");
      const std::wstring cls = w.substr(i + 3, close - i - 3);
      std::wstring body;
      if (cls == L"L") body = letters;
      else if (cls == L"Z") body = separators;
      else if (cls == L"N") body = numbers;
      else if (cls == L"Alnum") body = L"a-zA-Z0-9";
      else throw std::invalid_argument("unsupported class \\p{" + std::string(cls.begin(), cls.end()) + "}");
      // inside a bracket expression the class contributes its ranges; outside, it becomes one
      const bool in_bracket = [&] {
        int depth = 0;
        for (std::size_t k = 0; k < i; ++k) {
          if (w[k] == L'\\') { ++k; continue; }
          if (w[k] == L'[') depth = 1;
          else if (w[k] == L']') depth = 0;
        }
        return depth > 0;
      }();
      out += in_bracket ? body : L"[" + body + L"]";
      i = close;
      continue;
    }
    if (w[i] == L'\\' && i + 1 < w.size()) {  // keep every other escape pair as is
      out += w[i];
      out += w[++i];
      continue;
    }
    out += w[i];
  }
  t.ecma = std::move(out);
  return t;
}

}  // namespace detail

/// A loaded AWS service model (or a subset with the same layout, such as
/// `configs/sagemaker/createtrainingjob-shapes.json`), able to validate request bodies.
///
/// `check` walks a JSON value against a shape and reports every rule it breaks:
/// - structure: required members present, no unknown members (botocore ParamValidator);
/// - JSON type per shape type: string, boolean, integer/long (JSON integers only), float/double (numbers),
///   timestamp (string or number), blob (string), list (array), map and structure (object) (ParamValidator);
/// - `min`/`max` on string length (in code points), list length and map size, and on integer values
///   (ParamValidator checks `min` only; `max` is enforced by the service);
/// - `enum` on strings and `pattern` as a full match after `detail::translate_aws_pattern`
///   (enforced by the service, not by botocore).
/// Source: botocore `validate.py` and the model's shape traits (https://github.com/boto/botocore,
/// `botocore/data/sagemaker/2017-07-24/service-2.json`). @sa docs/sagemaker.md#validation
class service_model {
 public:
  /// Loads the model from `path`. Throws config_error when the file is not a service model.
  [[nodiscard]] static service_model load(const std::filesystem::path& path) {
    return service_model(read_json_file(path), path.string());
  }

  /// Wraps a parsed model; `source` names it in errors. Throws config_error without a `shapes` object.
  service_model(nlohmann::json doc, std::string source) : doc_(std::move(doc)), source_(std::move(source)) {
    if (!doc_.is_object() || !doc_.contains("shapes") || !doc_["shapes"].is_object())
      throw config_error(source_, "/shapes", "missing: not an AWS service model");
  }

  /// File or name the model was loaded from.
  [[nodiscard]] const std::string& source() const noexcept { return source_; }
  /// The raw document.
  [[nodiscard]] const nlohmann::json& document() const noexcept { return doc_; }
  /// The shape called `name`. Throws config_error if the model lacks it.
  [[nodiscard]] const nlohmann::json& shape(std::string_view name) const {
    const auto& shapes = doc_["shapes"];
    auto it = shapes.find(std::string(name));
    if (it == shapes.end()) throw config_error(source_, "/shapes/" + std::string(name), "missing shape");
    return *it;
  }
  /// Name of the input shape of `operation` (e.g. "CreateTrainingJob" → "CreateTrainingJobRequest").
  [[nodiscard]] std::string input_shape(std::string_view operation) const {
    const std::string ptr = "/operations/" + std::string(operation) + "/input/shape";
    const nlohmann::json::json_pointer jp(ptr);
    if (!doc_.contains(jp) || !doc_.at(jp).is_string()) throw config_error(source_, ptr, "missing operation input");
    return doc_.at(jp).get<std::string>();
  }

  /// Every rule of shape `shape_name` that `value` breaks (at most `limit`), in document order.
  [[nodiscard]] std::vector<shape_violation> check(const nlohmann::json& value, std::string_view shape_name,
                                                   std::size_t limit = std::numeric_limits<std::size_t>::max()) const {
    std::vector<shape_violation> out;
    walk(value, std::string(shape_name), "", out, limit);
    return out;
  }
  /// Every rule of the input shape of `operation` that `request` breaks.
  [[nodiscard]] std::vector<shape_violation> check_input(const nlohmann::json& request, std::string_view operation,
                                                         std::size_t limit = std::numeric_limits<std::size_t>::max()) const {
    return check(request, input_shape(operation), limit);
  }

 private:
  struct compiled {
    std::wregex re;
    bool forbid_trailing_hyphen = false;
  };

  /// std::regex objects are expensive to build: compile each pattern once, on first use.
  const compiled& pattern_for(const std::string& shape_name, const std::string& aws) const {
    std::lock_guard<std::mutex> lock(*mutex_);
    auto it = regex_cache_->find(shape_name);
    if (it != regex_cache_->end()) return it->second;
    try {
      auto t = detail::translate_aws_pattern(aws);
      compiled c{std::wregex(t.ecma, std::regex::ECMAScript | std::regex::optimize), t.forbid_trailing_hyphen};
      return regex_cache_->emplace(shape_name, std::move(c)).first->second;
    } catch (const std::exception& e) {
      throw config_error(source_, "/shapes/" + shape_name + "/pattern", "cannot translate pattern '" + aws + "': " + e.what());
    }
  }

  static std::string json_kind(const nlohmann::json& v) {
    if (v.is_number_integer()) return "integer";
    if (v.is_number_float()) return "number";
    if (v.is_boolean()) return "boolean";
    if (v.is_string()) return "string";
    if (v.is_array()) return "array";
    if (v.is_object()) return "object";
    return "null";
  }

  static std::string quoted(const std::string& s) {
    constexpr std::size_t keep = 80;
    return "'" + (s.size() > keep ? s.substr(0, keep) + "..." : s) + "'";
  }

  static std::string join_path(const std::string& base, const std::string& member) {
    return base.empty() ? member : base + "." + member;
  }

  void add(std::vector<shape_violation>& out, std::size_t limit, std::string path, std::string rule, const std::string& shape) const {
    if (out.size() < limit) out.push_back({std::move(path), std::move(rule), shape});
  }

  void range(std::vector<shape_violation>& out, std::size_t limit, const std::string& path, const nlohmann::json& sh,
             const std::string& name, long double n, const char* what) const {
    if (sh.contains("min") && n < sh["min"].get<long double>())
      add(out, limit, path, std::string(what) + " " + fmt_num(n) + " is below the minimum " + fmt_num(sh["min"].get<long double>()) + " of " + name, name);
    else if (sh.contains("max") && n > sh["max"].get<long double>())
      add(out, limit, path, std::string(what) + " " + fmt_num(n) + " is above the maximum " + fmt_num(sh["max"].get<long double>()) + " of " + name, name);
  }

  static std::string fmt_num(long double x) {
    if (x == static_cast<long double>(static_cast<long long>(x))) return std::to_string(static_cast<long long>(x));
    return std::to_string(static_cast<double>(x));
  }

  void check_string(const std::string& s, const std::string& path, const std::string& name, const nlohmann::json& sh,
                    std::vector<shape_violation>& out, std::size_t limit, const char* what) const {
    std::wstring w;
    if (!detail::utf8_decode(s, w)) { add(out, limit, path, std::string(what) + " is not valid UTF-8", name); return; }
    if (sh.contains("enum")) {
      const auto& e = sh["enum"];
      if (std::find(e.begin(), e.end(), s) == e.end()) {
        std::vector<std::string> names;
        for (const auto& x : e) names.push_back(x.get<std::string>());
        std::string rule = std::string(what) + " " + quoted(s) + " is not one of the " + std::to_string(names.size()) + " values of " + name;
        if (auto m = closest_match(s, names)) rule += " (closest: '" + *m + "')";
        add(out, limit, path, rule, name);
        return;
      }
    }
    const auto len = static_cast<long double>(w.size());
    if ((sh.contains("min") && len < sh["min"].get<long double>()) || (sh.contains("max") && len > sh["max"].get<long double>())) {
      range(out, limit, path, sh, name, len, (std::string(what) + " length").c_str());
      return;  // a pattern check of an over-long value proves nothing more (and std::regex recurses per character)
    }
    if (sh.contains("pattern")) {
      const std::string aws = sh["pattern"].get<std::string>();
      constexpr std::size_t longest_matched = 4096;
      if (w.size() > longest_matched) {
        add(out, limit, path, std::string(what) + " is too long (" + std::to_string(w.size()) + " characters) to match the pattern " + aws + " of " + name, name);
        return;
      }
      const compiled& c = pattern_for(name, aws);
      const bool ok = std::regex_match(w, c.re) && !(c.forbid_trailing_hyphen && !w.empty() && w.back() == L'-');
      if (!ok) add(out, limit, path, std::string(what) + " " + quoted(s) + " does not match the pattern " + aws + " of " + name, name);
    }
  }

  void walk(const nlohmann::json& v, const std::string& name, const std::string& path, std::vector<shape_violation>& out,
            std::size_t limit) const {
    if (out.size() >= limit) return;
    const nlohmann::json& sh = shape(name);
    const std::string type = sh.value("type", "");
    auto type_error = [&](const char* expected) {
      add(out, limit, path, std::string("expected ") + expected + " (" + name + "), got " + json_kind(v), name);
    };
    if (type == "structure") {
      if (!v.is_object()) return type_error("an object");
      const auto& members = sh.contains("members") ? sh["members"] : nlohmann::json::object();
      if (sh.contains("required"))
        for (const auto& r : sh["required"])
          if (!v.contains(r.get<std::string>()))
            add(out, limit, join_path(path, r.get<std::string>()), "required member of " + name + " is missing", name);
      for (auto it = v.begin(); it != v.end(); ++it) {
        const std::string p = join_path(path, it.key());
        auto m = members.find(it.key());
        if (m == members.end()) {
          std::vector<std::string> names;
          for (auto k = members.begin(); k != members.end(); ++k) names.push_back(k.key());
          std::string rule = "unknown member of " + name;
          if (auto c = closest_match(it.key(), names)) rule += " (did you mean '" + *c + "'?)";
          add(out, limit, p, rule, name);
          continue;
        }
        walk(*it, (*m)["shape"].get<std::string>(), p, out, limit);
      }
    } else if (type == "list") {
      if (!v.is_array()) return type_error("an array");
      range(out, limit, path, sh, name, static_cast<long double>(v.size()), "list length");
      const std::string item = sh["member"]["shape"].get<std::string>();
      for (std::size_t i = 0; i < v.size(); ++i) walk(v[i], item, path + "[" + std::to_string(i) + "]", out, limit);
    } else if (type == "map") {
      if (!v.is_object()) return type_error("an object");
      range(out, limit, path, sh, name, static_cast<long double>(v.size()), "map size");
      const std::string key_shape = sh["key"]["shape"].get<std::string>();
      const std::string value_shape = sh["value"]["shape"].get<std::string>();
      for (auto it = v.begin(); it != v.end(); ++it) {
        const std::string p = join_path(path, it.key());
        check_string(it.key(), p, key_shape, shape(key_shape), out, limit, "key");
        walk(*it, value_shape, p, out, limit);
      }
    } else if (type == "string") {
      if (!v.is_string()) return type_error("a string");
      check_string(v.get<std::string>(), path, name, sh, out, limit, "value");
    } else if (type == "integer" || type == "long") {
      if (!v.is_number_integer()) return type_error("an integer");
      range(out, limit, path, sh, name,
            v.is_number_unsigned() ? static_cast<long double>(v.get<std::uint64_t>()) : static_cast<long double>(v.get<std::int64_t>()),
            "value");
    } else if (type == "boolean") {
      if (!v.is_boolean()) return type_error("true or false");
    } else if (type == "float" || type == "double") {
      if (!v.is_number()) return type_error("a number");
      range(out, limit, path, sh, name, v.get<long double>(), "value");
    } else if (type == "timestamp") {
      if (!v.is_string() && !v.is_number()) return type_error("a timestamp");
    } else if (type == "blob") {
      if (!v.is_string()) return type_error("a string");
    } else {
      throw config_error(source_, "/shapes/" + name + "/type", "unsupported shape type '" + type + "'");
    }
  }

  nlohmann::json doc_;
  std::string source_;
  std::shared_ptr<std::mutex> mutex_ = std::make_shared<std::mutex>();
  std::shared_ptr<std::map<std::string, compiled>> regex_cache_ = std::make_shared<std::map<std::string, compiled>>();
};

}  // namespace bwplan::io
