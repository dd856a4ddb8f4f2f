// Input hardening for the CLI: one set of checks where values enter from flags, and output that fails loudly.
// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <bwplan/hardware.hpp>
#include <bwplan/plan.hpp>

#include <CLI/CLI.hpp>

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

namespace bwplan::cli {

// Ranges of the numeric flags that have no plan_limits counterpart (far above any real value; beyond them a
// value is a typo or an attack, not a plan).
inline constexpr double max_price_per_hour = 1e6;      ///< --price-per-hour, USD per instance-hour
inline constexpr double max_budget_usd = 1e12;         ///< --budget-usd
inline constexpr double max_headroom = 0.999;          ///< --headroom (a share of capacity, below 1)
inline constexpr std::int64_t max_global_batch_tokens = std::int64_t{1} << 50;  ///< --global-batch-tokens

/// Validator for a floating-point flag: the value must parse as a number, be finite (no nan, inf) and lie
/// in [lo, hi]. CLI11 reports a failure as "--flag: <what is wrong>" (exit 2).
[[nodiscard]] CLI::Validator finite_range(double lo, double hi);
/// Validator for an integer flag: the value must parse as an integer in [lo, hi] (no wrap, no silent clamp).
[[nodiscard]] CLI::Validator int_range(std::int64_t lo, std::int64_t hi);
/// Validator refusing an empty value ("--instance ''" must not fall back to the default silently).
[[nodiscard]] CLI::Validator non_empty();

/// Makes `opt` take one of the names of `choices` (case-insensitive) and store the mapped value; help shows
/// the names as users type them ("fp32 | bf16"), not CLI11's enum mapping.
template <typename T>
CLI::Option* choice(CLI::Option* opt, const std::vector<std::pair<std::string, T>>& choices) {
  std::string names;
  std::map<std::string, T> map;
  for (const auto& [name, value] : choices) {
    names += (names.empty() ? "" : " | ") + name;
    map.emplace(name, value);
  }
  CLI::Validator check(
      [map, names](std::string& v) -> std::string {
        std::string low = v;
        for (auto& c : low) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
        auto it = map.find(low);
        if (it == map.end()) return "expected " + names + ", got '" + v + "'";
        if constexpr (std::is_enum_v<T>)  // CLI11 converts enums from their underlying integer
          v = std::to_string(static_cast<std::underlying_type_t<T>>(it->second));
        else
          v = low;
        return {};
      },
      names);
  opt->transform(check)->option_text(names);
  return opt;
}

/// The choices of an option registered with choice() or a CLI::IsMember check, for shell completion (empty
/// when the option takes free text).
[[nodiscard]] std::vector<std::string> option_choices(const CLI::Option& opt);

/// Writes `text` to the file `path` and flushes it; throws invalid_request naming `flag` and the path when it
/// cannot be opened or any byte cannot be written (a full disk, /dev/full).
void write_output_file(const std::string& path, const std::string& text, const std::string& flag);

/// Throws invalid_request naming `flag` when `output` is the same file as one of `inputs` (a plan, a model
/// config, measurements the command reads): writing it would replace the input with the output. Inputs that are
/// not files (a preset name, "") are skipped.
/// The plan file's `model` for a plan written to `output`: a model config file given as a path relative to the
/// working directory is rewritten relative to `output`'s folder, where plan readers look for it (resolve_plan,
/// check); a preset name, an absolute path, or a plan written to stdout ("" or "-") keep `model` as given.
[[nodiscard]] std::string model_path_for_plan(const std::string& model, const std::string& output);

void refuse_output_over_input(const std::string& output, const std::vector<std::string>& inputs, const std::string& flag);

/// "" when every argument is valid UTF-8; otherwise one line naming the flag whose value is not (or the
/// argument's position).
[[nodiscard]] std::string invalid_utf8_argument(const std::vector<std::string>& args);

/// One line for a CLI11 ExtrasError caught while parsing `app`: an unknown command or option with the closest
/// known one ("did you mean 'estimate'?").
[[nodiscard]] std::string unknown_argument_message(const CLI::App& app);

/// One line for a CLI11 ConversionError caught while parsing `app`: its "Could not convert: --mbs = x" (a value
/// CLI11's own conversion of an INT or FLOAT option refused) in the words of the range-checked flags (`int_range`,
/// `finite_range`): "--mbs: expected an integer, got 'x'", "out of range: too large" for a whole number past the
/// option's type, "--lora-alpha: expected a number, got 'x'". Any other conversion message is returned as it is.
[[nodiscard]] std::string conversion_message(const CLI::App& app, const std::string& what);

/// `ids` resolved against the catalog, duplicates (also by alias or case) removed, in first-seen order.
/// Throws invalid_request for an unknown id or an empty one.
[[nodiscard]] std::vector<std::string> unique_instances(const hardware_catalog& cat, const std::vector<std::string>& ids);

/// The first rule ID of a plan's check.disable that names no check rule (check_rules): its index in the list and the
/// message ("unknown rule ID 'BWP07' (did you mean 'BWP007'?)"); nullopt when every ID names a rule. check and every
/// command that reads a plan file (resolve_plan) refuse such a plan with it.
[[nodiscard]] std::optional<std::pair<std::size_t, std::string>> unknown_disabled_rule(const check_settings& s);

}  // namespace bwplan::cli
