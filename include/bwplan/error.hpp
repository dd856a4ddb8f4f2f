// bwplan: GPU memory and throughput planning for LLM training
// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <cstddef>
#include <stdexcept>
#include <string>
#include <utility>

namespace bwplan {

/// Base of every exception the library throws. All of them mean "unusable input":
/// a result such as "does not fit" is never an exception.
class error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

/// A data file (model config, hardware catalog) is malformed or holds an impossible value.
/// The message reads `FILE: /json/pointer: what is wrong`.
class config_error : public error {
 public:
  config_error(std::string file, std::string pointer, const std::string& what)
      : error(file + ": " + (pointer.empty() ? std::string{} : pointer + ": ") + what),
        file_(std::move(file)),
        pointer_(std::move(pointer)),
        reason_(what) {}
  /// As above, with the position of the offending member in the file's text (1-based line, 0-based byte
  /// offset), appended to the message as ` (line L, column C, byte B)`.
  config_error(std::string file, std::string pointer, const std::string& what, std::size_t line, std::size_t column,
               std::size_t byte_offset)
      : config_error(std::move(file), std::move(pointer),
                     what + " (line " + std::to_string(line) + ", column " + std::to_string(column) + ", byte " +
                         std::to_string(byte_offset) + ")") {
    reason_ = what;
    line_ = line;
    byte_ = byte_offset;
  }
  /// The file the error is in.
  [[nodiscard]] const std::string& file() const noexcept { return file_; }
  /// The JSON pointer of the offending member ("" for the whole document).
  [[nodiscard]] const std::string& pointer() const noexcept { return pointer_; }
  /// What is wrong, without the file, pointer and position.
  [[nodiscard]] const std::string& reason() const noexcept { return reason_; }
  /// 1-based line of the offending member, or 0 when unknown.
  [[nodiscard]] std::size_t line() const noexcept { return line_; }
  /// 0-based byte offset of the offending member, meaningful when line() > 0.
  [[nodiscard]] std::size_t byte_offset() const noexcept { return byte_; }

 private:
  std::string file_;
  std::string pointer_;
  std::string reason_;
  std::size_t line_ = 0;
  std::size_t byte_ = 0;
};

/// A request is impossible as asked: an unknown GPU, a world size that does not divide, a
/// micro-batch below 1. The message names the option and the problem.
class invalid_request : public error {
 public:
  using error::error;
};

}  // namespace bwplan
