// Helpers shared by the test files.
#pragma once

#include "cli.hpp"

#include <catch2/catch.hpp>

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

}  // namespace bwplan::test
