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

/// One broken legality rule of a plan: which field, where it sits in a plan file, and what is wrong.
/// `field` is the plan-file key (`micro_batch_size`, `tp`, ...); `message` never names a command-line flag,
/// so the CLI can put its flag in front and `bwplan check` can put the file position there.
struct plan_violation {
  std::string field;    ///< plan key, e.g. "micro_batch_size"
  std::string pointer;  ///< JSON pointer into a plan file, e.g. "/micro_batch_size"
  std::string message;  ///< what is wrong, with the numbers, e.g. "must be >= 1, got 0"
};

/// A plan breaks a legality rule (see bwplan::violations). what() reads `field: message`; violation()
/// carries the structured form for callers that render it their own way (a CLI flag, a check finding).
class plan_error : public invalid_request {
 public:
  explicit plan_error(plan_violation v) : invalid_request(v.field + ": " + v.message), v_(std::move(v)) {}
  /// The violated rule.
  [[nodiscard]] const plan_violation& violation() const noexcept { return v_; }

 private:
  plan_violation v_;
};

}  // namespace bwplan
