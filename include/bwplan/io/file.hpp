// bwplan: GPU memory and throughput planning for LLM training
// SPDX-License-Identifier: Apache-2.0
#pragma once

// Reading untrusted input files: the one place every file bwplan reads (model configs, catalogs, plans,
// ground-truth runs, the SageMaker service model) goes through. Only regular files, at most
// `max_input_bytes`, never blocking on a FIFO or a device, and never silently dropping what follows a NUL.

#include <bwplan/error.hpp>

#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <string_view>
#include <system_error>

#if defined(__unix__) || defined(__APPLE__)
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#define BWPLAN_POSIX_IO 1
#endif

namespace bwplan::io {

/// Largest input file bwplan reads (64 MiB): far above any config, catalog, plan or ground-truth file.
inline constexpr std::uintmax_t max_input_bytes = std::uintmax_t{64} << 20;

/// Longest file name shown in a message; longer ones are cut (with "...") so an error stays one short line.
inline constexpr std::size_t max_shown_path = 200;

/// `path` as shown in messages: control characters replaced by '?', cut to `max_shown_path` bytes.
[[nodiscard]] inline std::string display_path(std::string_view path) {
  std::string s;
  const std::size_t n = path.size() > max_shown_path ? max_shown_path : path.size();
  s.reserve(n + 3);
  for (std::size_t i = 0; i < n; ++i) {
    const auto c = static_cast<unsigned char>(path[i]);
    s += (c < 0x20 || c == 0x7f) ? '?' : static_cast<char>(c);
  }
  if (path.size() > max_shown_path) s += "...";
  return s;
}

namespace detail {

/// Why `ec` prevented reading a file, in the words of a message ("no such file", "permission denied").
[[nodiscard]] inline std::string io_reason(const std::error_code& ec) {
  if (ec == std::errc::no_such_file_or_directory) return "no such file";
  if (ec == std::errc::filename_too_long) return "file name too long";
  if (ec == std::errc::permission_denied) return "permission denied";
  if (ec == std::errc::not_a_directory) return "a component of the path is not a directory";
  return "cannot read file (" + ec.message() + ")";
}

/// Throws config_error for a NUL byte in `text` (JSON and the text formats bwplan reads never hold one; a
/// parser stopping there would ignore the rest of the file).
inline void reject_nul(std::string_view text, const std::string& shown) {
  const std::size_t at = text.find('\0');
  if (at == std::string_view::npos) return;
  std::size_t line = 1;
  for (std::size_t i = 0; i < at; ++i)
    if (text[i] == '\n') ++line;
  throw config_error(shown, "", "contains a NUL byte (line " + std::to_string(line) + ", byte " + std::to_string(at) +
                                    "): not a text file");
}

}  // namespace detail

/// The whole file at `path` as bytes. Throws config_error (naming the path, cut to `max_shown_path`) when it
/// does not exist, is a directory, is not a regular file (a FIFO, device or socket: refused before it is
/// opened, so it never blocks), is larger than `limit` bytes, holds a NUL byte, or cannot be read.
[[nodiscard]] inline std::string read_text_file(const std::filesystem::path& path, std::uintmax_t limit = max_input_bytes) {
  namespace fs = std::filesystem;
  const std::string shown = display_path(path.string());
  const std::string too_big = "larger than the " + std::to_string(limit >> 20) + " MiB limit on input files";
  std::error_code ec;
  const fs::file_status st = fs::status(path, ec);
  if (ec || !fs::exists(st)) throw config_error(shown, "", detail::io_reason(ec ? ec : std::make_error_code(std::errc::no_such_file_or_directory)));
  if (fs::is_directory(st)) throw config_error(shown, "", "is a directory, not a file");
  if (!fs::is_regular_file(st)) throw config_error(shown, "", "is not a regular file (a FIFO, device or socket)");
  std::string text;
#ifdef BWPLAN_POSIX_IO
  // O_NONBLOCK: should the path have become a FIFO since the check above, open() must not wait for a writer.
  const int fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) throw config_error(shown, "", detail::io_reason(std::error_code(errno, std::generic_category())));
  struct fd_guard {
    int fd;
    ~fd_guard() { ::close(fd); }
  } guard{fd};
  struct stat sb {};
  if (::fstat(fd, &sb) != 0) throw config_error(shown, "", detail::io_reason(std::error_code(errno, std::generic_category())));
  if (!S_ISREG(sb.st_mode)) throw config_error(shown, "", "is not a regular file (a FIFO, device or socket)");
  if (static_cast<std::uintmax_t>(sb.st_size) > limit) throw config_error(shown, "", too_big);
  char buf[1 << 16];
  for (;;) {
    const ssize_t n = ::read(fd, buf, sizeof buf);
    if (n < 0) {
      if (errno == EINTR) continue;
      throw config_error(shown, "", detail::io_reason(std::error_code(errno, std::generic_category())));
    }
    if (n == 0) break;
    if (text.size() + static_cast<std::size_t>(n) > limit) throw config_error(shown, "", too_big);  // grew while read
    text.append(buf, static_cast<std::size_t>(n));
  }
#else
  if (fs::file_size(path, ec) > limit && !ec) throw config_error(shown, "", too_big);
  std::ifstream in(path, std::ios::binary);
  if (!in) throw config_error(shown, "", "cannot open file");
  char buf[1 << 16];
  while (in.read(buf, sizeof buf) || in.gcount() > 0) {
    if (text.size() + static_cast<std::size_t>(in.gcount()) > limit) throw config_error(shown, "", too_big);
    text.append(buf, static_cast<std::size_t>(in.gcount()));
  }
  if (in.bad()) throw config_error(shown, "", "cannot read file");
#endif
  detail::reject_nul(text, shown);
  return text;
}

}  // namespace bwplan::io
