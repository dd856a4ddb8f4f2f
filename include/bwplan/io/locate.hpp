// bwplan: GPU memory and throughput planning for LLM training
// SPDX-License-Identifier: Apache-2.0
#pragma once

// Where a JSON member sits in the text of its file, for error messages and CI annotations that point
// at a line. nlohmann_json keeps no positions in a parsed document, so this scans the text once more.

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace bwplan::io {

/// A position in a text: 0-based byte offset, 1-based line and column (column counted in bytes).
struct text_location {
  std::size_t byte = 0;
  std::size_t line = 1;
  std::size_t column = 1;
};

/// Line and column of byte offset `byte` in `text` (clamped to the text's end).
[[nodiscard]] inline text_location location_of(std::string_view text, std::size_t byte) noexcept {
  text_location l;
  l.byte = byte < text.size() ? byte : text.size();
  for (std::size_t i = 0; i < l.byte; ++i) {
    if (text[i] == '\n') { ++l.line; l.column = 1; } else { ++l.column; }
  }
  return l;
}

/// `key` escaped as one reference token of a JSON pointer ("~" → "~0", "/" → "~1"; RFC 6901).
[[nodiscard]] inline std::string pointer_escape(std::string_view key) {
  std::string s;
  for (char c : key) {
    if (c == '~') s += "~0";
    else if (c == '/') s += "~1";
    else s += c;
  }
  return s;
}

/// The reference tokens of an RFC 6901 JSON pointer ("/a/b~1c" → {"a", "b/c"}); "" → {}.
[[nodiscard]] inline std::vector<std::string> pointer_tokens(std::string_view pointer) {
  std::vector<std::string> out;
  if (pointer.empty()) return out;
  std::size_t i = pointer.front() == '/' ? 1 : 0;
  std::string cur;
  for (; i <= pointer.size(); ++i) {
    if (i == pointer.size() || pointer[i] == '/') {
      out.push_back(cur);
      cur.clear();
    } else if (pointer[i] == '~' && i + 1 < pointer.size() && (pointer[i + 1] == '0' || pointer[i + 1] == '1')) {
      cur += pointer[i + 1] == '0' ? '~' : '/';
      ++i;
    } else {
      cur += pointer[i];
    }
  }
  return out;
}

namespace detail {

/// Recursive-descent scanner over JSON text (comments allowed) that stops at the member a pointer names.
/// Never reads past the text; gives up (nullopt) on anything it does not understand or nested deeper
/// than 256 levels.
class json_locator {
 public:
  json_locator(std::string_view text, std::vector<std::string> target) : t_(text), target_(std::move(target)) {}

  std::optional<std::size_t> run() {
    skip_ws();
    if (target_.empty()) return i_ < t_.size() ? std::optional<std::size_t>(i_) : std::nullopt;
    if (!value(0, true)) return std::nullopt;
    return found_;
  }

 private:
  bool done() const { return found_.has_value(); }

  void skip_ws() {
    while (i_ < t_.size()) {
      const char c = t_[i_];
      if (c == ' ' || c == '\t' || c == '\n' || c == '\r') { ++i_; continue; }
      if (c == '/' && i_ + 1 < t_.size() && t_[i_ + 1] == '/') {
        while (i_ < t_.size() && t_[i_] != '\n') ++i_;
        continue;
      }
      if (c == '/' && i_ + 1 < t_.size() && t_[i_ + 1] == '*') {
        const std::size_t end = t_.find("*/", i_ + 2);
        i_ = end == std::string_view::npos ? t_.size() : end + 2;
        continue;
      }
      break;
    }
  }

  /// Reads a string token at i_; returns its decoded value (escapes other than \uXXXX kept simple:
  /// \uXXXX is decoded to UTF-8, surrogate pairs joined).
  std::optional<std::string> string_token() {
    if (i_ >= t_.size() || t_[i_] != '"') return std::nullopt;
    ++i_;
    std::string s;
    while (i_ < t_.size()) {
      const char c = t_[i_++];
      if (c == '"') return s;
      if (c != '\\') { s += c; continue; }
      if (i_ >= t_.size()) return std::nullopt;
      const char e = t_[i_++];
      switch (e) {
        case 'n': s += '\n'; break;
        case 't': s += '\t'; break;
        case 'r': s += '\r'; break;
        case 'b': s += '\b'; break;
        case 'f': s += '\f'; break;
        case 'u': {
          auto hex4 = [&]() -> std::optional<unsigned> {
            if (i_ + 4 > t_.size()) return std::nullopt;
            unsigned v = 0;
            for (int k = 0; k < 4; ++k) {
              const char h = t_[i_++];
              v <<= 4;
              if (h >= '0' && h <= '9') v |= static_cast<unsigned>(h - '0');
              else if (h >= 'a' && h <= 'f') v |= static_cast<unsigned>(h - 'a' + 10);
              else if (h >= 'A' && h <= 'F') v |= static_cast<unsigned>(h - 'A' + 10);
              else return std::nullopt;
            }
            return v;
          };
          auto cp = hex4();
          if (!cp) return std::nullopt;
          unsigned code = *cp;
          if (code >= 0xD800 && code <= 0xDBFF && i_ + 1 < t_.size() && t_[i_] == '\\' && t_[i_ + 1] == 'u') {
            i_ += 2;
            auto lo = hex4();
            if (!lo) return std::nullopt;
            code = 0x10000 + ((code - 0xD800) << 10) + (*lo - 0xDC00);
          }
          if (code < 0x80) {
            s += static_cast<char>(code);
          } else if (code < 0x800) {
            s += static_cast<char>(0xC0 | (code >> 6));
            s += static_cast<char>(0x80 | (code & 0x3F));
          } else if (code < 0x10000) {
            s += static_cast<char>(0xE0 | (code >> 12));
            s += static_cast<char>(0x80 | ((code >> 6) & 0x3F));
            s += static_cast<char>(0x80 | (code & 0x3F));
          } else {
            s += static_cast<char>(0xF0 | ((code >> 18) & 0x07));
            s += static_cast<char>(0x80 | ((code >> 12) & 0x3F));
            s += static_cast<char>(0x80 | ((code >> 6) & 0x3F));
            s += static_cast<char>(0x80 | (code & 0x3F));
          }
          break;
        }
        default: s += e; break;  // \" \\ \/
      }
    }
    return std::nullopt;
  }

  /// Scans one value at i_. `on_path`: the value's path equals the first `depth` target tokens.
  bool value(std::size_t depth, bool on_path) {
    if (depth > 256) return false;
    skip_ws();
    if (i_ >= t_.size()) return false;
    const char c = t_[i_];
    if (c == '{') {
      ++i_;
      skip_ws();
      if (i_ < t_.size() && t_[i_] == '}') { ++i_; return true; }
      while (i_ < t_.size()) {
        skip_ws();
        const std::size_t key_at = i_;
        auto key = string_token();
        if (!key) return false;
        const bool member_on_path = on_path && depth < target_.size() && *key == target_[depth];
        if (member_on_path && depth + 1 == target_.size()) { found_ = key_at; return true; }
        skip_ws();
        if (i_ >= t_.size() || t_[i_] != ':') return false;
        ++i_;
        if (!value(depth + 1, member_on_path)) return false;
        if (done()) return true;
        skip_ws();
        if (i_ < t_.size() && t_[i_] == ',') { ++i_; continue; }
        if (i_ < t_.size() && t_[i_] == '}') { ++i_; return true; }
        return false;
      }
      return false;
    }
    if (c == '[') {
      ++i_;
      skip_ws();
      if (i_ < t_.size() && t_[i_] == ']') { ++i_; return true; }
      for (std::size_t index = 0; i_ < t_.size(); ++index) {
        skip_ws();
        const bool item_on_path = on_path && depth < target_.size() && std::to_string(index) == target_[depth];
        if (item_on_path && depth + 1 == target_.size()) { found_ = i_; return true; }
        if (!value(depth + 1, item_on_path)) return false;
        if (done()) return true;
        skip_ws();
        if (i_ < t_.size() && t_[i_] == ',') { ++i_; continue; }
        if (i_ < t_.size() && t_[i_] == ']') { ++i_; return true; }
        return false;
      }
      return false;
    }
    if (c == '"') return string_token().has_value();
    // number, true, false, null
    const std::size_t start = i_;
    while (i_ < t_.size()) {
      const char d = t_[i_];
      if (d == ',' || d == ']' || d == '}' || d == ' ' || d == '\t' || d == '\n' || d == '\r' || d == '/') break;
      ++i_;
    }
    return i_ > start;
  }

  std::string_view t_;
  std::vector<std::string> target_;
  std::size_t i_ = 0;
  std::optional<std::size_t> found_;
};

}  // namespace detail

/// Where the member named by JSON pointer `pointer` starts in `text`: the opening quote of its key for an
/// object member, the first byte of the value for an array element, the document for "". nullopt when
/// the member is not in the text (a missing field) or the text is not JSON. Comments are skipped.
[[nodiscard]] inline std::optional<text_location> locate(std::string_view text, std::string_view pointer) {
  auto at = detail::json_locator(text, pointer_tokens(pointer)).run();
  if (!at) return std::nullopt;
  return location_of(text, *at);
}

}  // namespace bwplan::io
