// bwplan: GPU memory and throughput planning for LLM training
// SPDX-License-Identifier: Apache-2.0
#pragma once

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
        pointer_(std::move(pointer)) {}
  /// The file the error is in.
  [[nodiscard]] const std::string& file() const noexcept { return file_; }
  /// The JSON pointer of the offending member ("" for the whole document).
  [[nodiscard]] const std::string& pointer() const noexcept { return pointer_; }

 private:
  std::string file_;
  std::string pointer_;
};

/// A request is impossible as asked: an unknown GPU, a world size that does not divide, a
/// micro-batch below 1. The message names the option and the problem.
class invalid_request : public error {
 public:
  using error::error;
};

}  // namespace bwplan
