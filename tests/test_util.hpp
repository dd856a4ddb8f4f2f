// Helpers shared by the test files.
#pragma once

#include "cli.hpp"

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
