// SPDX-License-Identifier: Apache-2.0
// Input hardening for the CLI (src/input.hpp): flag validators, checked output files, argument checks and
// "did you mean" for unknown commands and options.
#include "input.hpp"

#include <bwplan/check.hpp>
#include <bwplan/error.hpp>
#include <bwplan/io/file.hpp>
#include <bwplan/io/service_model.hpp>

#include <fmt/format.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <set>

namespace bwplan::cli {

namespace {
/// A bound as users read it: 1000000 rather than 1e+06, 0.999 as it is.
std::string bound(double v) {
  if (v == std::floor(v) && std::fabs(v) < 1e16) return fmt::format("{}", static_cast<long long>(v));
  return fmt::format("{:g}", v);
}
}  // namespace

CLI::Validator finite_range(double lo, double hi) {
  return CLI::Validator(
      [lo, hi](std::string& v) -> std::string {
        const char* b = v.c_str();
        char* end = nullptr;
        errno = 0;
        const double x = v.empty() ? 0 : std::strtod(b, &end);
        if (v.empty() || end != b + v.size()) return "expected a number, got '" + v + "'";
        if (!std::isfinite(x)) return "must be a finite number, got '" + v + "'";
        if (x < lo || x > hi) return fmt::format("out of range: must be between {} and {}, got {}", bound(lo), bound(hi), v);
        return {};
      },
      fmt::format("{}..{}", bound(lo), bound(hi)));
}

CLI::Validator int_range(std::int64_t lo, std::int64_t hi) {
  return CLI::Validator(
      [lo, hi](std::string& v) -> std::string {
        std::string_view s = v;
        if (!s.empty() && s.front() == '+') s.remove_prefix(1);
        std::int64_t x = 0;
        const auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), x);
        if (ec == std::errc::result_out_of_range)
          return fmt::format("out of range: must be between {} and {}, got {}", lo, hi, v);
        if (s.empty() || ec != std::errc() || p != s.data() + s.size()) return "expected an integer, got '" + v + "'";
        if (x < lo || x > hi) return fmt::format("out of range: must be between {} and {}, got {}", lo, hi, v);
        return {};
      },
      fmt::format("{}..{}", lo, hi));
}

CLI::Validator non_empty() {
  return CLI::Validator([](std::string& v) -> std::string { return v.empty() ? "must not be empty" : ""; }, "");
}

std::vector<std::string> option_choices(const CLI::Option& opt) {
  std::vector<std::string> out;
  auto split = [&](const std::string& s, const std::string& sep) {
    std::size_t start = 0;
    while (start <= s.size()) {
      const std::size_t at = s.find(sep, start);
      std::string part = s.substr(start, at == std::string::npos ? std::string::npos : at - start);
      if (!part.empty()) out.push_back(part);
      if (at == std::string::npos) break;
      start = at + sep.size();
    }
  };
  const std::string& text = opt.get_option_text();
  if (text.find(" | ") != std::string::npos) {
    split(text, " | ");
    return out;
  }
  const std::string type = opt.get_type_name();  // CLI::IsMember: "TEXT:{a,b,c}"
  const auto open = type.find('{');
  const auto close = type.find('}', open == std::string::npos ? 0 : open);
  if (open != std::string::npos && close != std::string::npos && type.find("->") == std::string::npos)
    split(type.substr(open + 1, close - open - 1), ",");
  return out;
}

std::string model_path_for_plan(const std::string& model, const std::string& output) {
  namespace fs = std::filesystem;
  std::error_code ec;
  // (a config.json, or a directory holding one: a review found directory models kept relative to the working directory)
  if (output.empty() || output == "-" || model.empty() || fs::path(model).is_absolute() || !fs::exists(model, ec)) return model;
  const fs::path dir = fs::absolute(output, ec).parent_path();
  const fs::path rel = fs::absolute(model, ec).lexically_relative(dir);
  return rel.empty() ? fs::absolute(model, ec).lexically_normal().string() : rel.generic_string();
}

void refuse_output_over_input(const std::string& output, const std::vector<std::string>& inputs, const std::string& flag) {
  if (output.empty() || output == "-") return;
  for (const std::string& in : inputs) {
    std::error_code ec;  // (false with an error when either is not a file)
    if (!in.empty() && std::filesystem::equivalent(in, output, ec))
      throw invalid_request(fmt::format("{} {}: is the input {} (the output would replace it)", flag, io::display_path(output),
                                        io::display_path(in)));
  }
}

void write_output_file(const std::string& path, const std::string& text, const std::string& flag) {
  const std::string shown = io::display_path(path);
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  if (!f) throw invalid_request(fmt::format("{}: cannot open {} for writing ({})", flag, shown, std::strerror(errno)));
  errno = 0;
  f.write(text.data(), static_cast<std::streamsize>(text.size()));
  f.flush();
  const int after_write = errno;
  f.close();
  if (!f) {
    const int e = errno ? errno : after_write;
    throw invalid_request(fmt::format("{}: cannot write {}{}", flag, shown, e ? fmt::format(" ({})", std::strerror(e)) : ""));
  }
}

std::string invalid_utf8_argument(const std::vector<std::string>& args) {
  std::wstring scratch;
  for (std::size_t i = 0; i < args.size(); ++i) {
    if (io::detail::utf8_decode(args[i], scratch)) continue;
    const std::string& a = args[i];
    std::string who;
    if (a.size() > 1 && a.front() == '-' && a.find('=') != std::string::npos) {
      who = a.substr(0, a.find('='));
      if (!io::detail::utf8_decode(who, scratch)) who.clear();
    } else if (i > 0 && args[i - 1].size() > 1 && args[i - 1].front() == '-' && args[i - 1].find('=') == std::string::npos &&
               !(a.size() > 1 && a.front() == '-')) {
      who = args[i - 1];
    }
    if (who.empty()) who = fmt::format("argument {}", i + 1);
    return who + ": not valid UTF-8 (bwplan reads its arguments as UTF-8 text)";
  }
  return {};
}

namespace {

/// Every spelling of the options of `app` and of its option groups ("--gpu", "-o").
void option_names(const CLI::App& app, std::vector<std::string>& out) {
  for (const CLI::Option* opt : app.get_options()) {
    for (const auto& l : opt->get_lnames()) out.push_back("--" + l);
    for (const auto& s : opt->get_snames()) out.push_back("-" + s);
  }
  for (const CLI::App* g : app.get_subcommands([](const CLI::App* a) { return a->get_name().empty(); }))
    option_names(*g, out);
}

}  // namespace

std::string conversion_message(const CLI::App& app, const std::string& what) {
  static constexpr std::string_view prefix = "Could not convert: ";
  const std::size_t eq = what.find(" = ");
  if (what.rfind(prefix, 0) != 0 || eq == std::string::npos) return what;
  const std::string name = what.substr(prefix.size(), eq - prefix.size());
  const std::string value = what.substr(eq + 3);
  const CLI::Option* opt = nullptr;
  for (const CLI::App* sub : app.get_subcommands())
    if ((opt = sub->get_option_no_throw(name)) != nullptr) break;
  if (opt == nullptr) opt = app.get_option_no_throw(name);
  const std::string type = opt != nullptr ? opt->get_type_name() : std::string();
  if (type.rfind("INT", 0) == 0 || type.rfind("UINT", 0) == 0) {
    std::string_view digits = value;
    if (!digits.empty() && (digits.front() == '-' || digits.front() == '+')) digits.remove_prefix(1);
    const bool whole = !digits.empty() && digits.find_first_not_of("0123456789") == std::string_view::npos;
    return name + (whole ? ": out of range: too large, got " + value : ": expected an integer, got '" + value + "'");
  }
  if (type.rfind("FLOAT", 0) == 0) return name + ": expected a number, got '" + value + "'";
  return what;
}

std::string unknown_argument_message(const CLI::App& app) {
  const CLI::App* sub = nullptr;
  for (const CLI::App* s : app.get_subcommands([](const CLI::App* a) { return !a->get_name().empty(); }))
    if (s->parsed()) sub = s;
  const CLI::App& where = sub ? *sub : app;
  std::vector<std::string> extras = where.remaining();
  if (extras.empty()) extras = app.remaining(true);
  if (extras.empty()) return "unexpected argument";
  const std::string& x = extras.front();
  const std::string shown = io::display_path(x);
  const std::string cmd = sub ? "bwplan " + sub->get_name() : std::string("bwplan");
  if (x.size() > 1 && x.front() == '-') {
    std::vector<std::string> names;
    option_names(where, names);
    if (!sub) option_names(app, names);
    std::string msg = fmt::format("{}: unknown option '{}'", cmd, shown);
    if (auto m = closest_match(x.substr(0, x.find('=')), names)) msg += fmt::format(" (did you mean '{}'?)", *m);
    return msg + fmt::format("; see '{} --help'", cmd);
  }
  if (!sub) {
    std::vector<std::string> names;
    for (const CLI::App* s : app.get_subcommands([](const CLI::App* a) { return !a->get_name().empty(); }))
      names.push_back(s->get_name());
    std::string msg = fmt::format("unknown command '{}'", shown);
    if (auto m = closest_match(x, names)) msg += fmt::format(" (did you mean '{}'?)", *m);
    msg += "; commands:";
    for (std::size_t i = 0; i < names.size(); ++i) msg += (i ? ", " : " ") + names[i];
    return msg;
  }
  return fmt::format("{}: unexpected argument '{}'{}; see '{} --help'", cmd, shown,
                     extras.size() > 1 ? fmt::format(" (and {} more)", extras.size() - 1) : "", cmd);
}

std::vector<std::string> unique_instances(const hardware_catalog& cat, const std::vector<std::string>& ids) {
  std::vector<std::string> out;
  std::set<std::string> seen;
  for (const auto& id : ids) {
    if (id.empty()) throw invalid_request("--instance: must not be empty");
    if (seen.count(id)) continue;  // the same spelling again: no catalog lookup
    seen.insert(id);
    const std::string canonical = cat.instance(id).id;
    if (std::find(out.begin(), out.end(), canonical) == out.end()) out.push_back(canonical);
  }
  return out;
}

std::optional<std::pair<std::size_t, std::string>> unknown_disabled_rule(const check_settings& s) {
  for (std::size_t i = 0; i < s.disable.size(); ++i) {
    const std::string& id = s.disable[i];
    if (find_rule(id) != nullptr) continue;
    std::vector<std::string> ids;
    for (const auto& r : check_rules()) ids.emplace_back(r.id);
    std::string msg = "unknown rule ID '" + id + "'";
    if (auto c = closest_match(id, ids)) msg += " (did you mean '" + *c + "'?)";
    return std::pair{i, msg};
  }
  return std::nullopt;
}

}  // namespace bwplan::cli
