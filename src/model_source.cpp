// SPDX-License-Identifier: Apache-2.0
#include "model_source.hpp"

#include <bwplan/error.hpp>
#include <bwplan/hardware.hpp>
#include <bwplan/io/file.hpp>
#include <bwplan/io/hf_cache.hpp>
#include <bwplan/io/json.hpp>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <cctype>
#include <system_error>
#include <vector>

namespace bwplan::cli {

model_spec find_model(const std::filesystem::path& configs, const std::string& arg) {
  namespace fs = std::filesystem;
  if (arg.empty()) throw invalid_request("MODEL: empty model argument");
  const std::string shown = io::display_path(arg);
  std::error_code ec;
  const fs::file_status st = fs::status(arg, ec);  // error_code: an over-long name is "not a file", not an exception
  if (!ec && fs::exists(st)) {
    if (fs::is_directory(st)) {
      const fs::path cfg = fs::path(arg) / "config.json";
      if (fs::exists(cfg, ec)) return io::load_model(cfg, fs::path(arg).filename().string());
      // (invalid_request: resolve_plan names the plan file's `model` member when the path came from --plan)
      throw invalid_request(shown + ": is a directory without a config.json");
    }
    const fs::path p(arg);
    std::string name = p.stem().string();
    if (name == "config") name = p.parent_path().filename().string();
    return io::load_model(p, name);
  }
  if (ec == std::errc::permission_denied) throw config_error(shown, "", "permission denied");

  const auto slash = arg.rfind('/');
  const std::string tail = slash == std::string::npos ? arg : arg.substr(slash + 1);
  const bool hub_id = io::is_hf_model_id(arg);
  const fs::path cache = io::hf_hub_cache_dir();
  if (hub_id) {
    if (auto cfg = io::find_hf_config(cache, arg)) {
      spdlog::info("MODEL {}: {} (local Hugging Face cache)", arg, cfg->string());
      return io::load_model(*cfg, tail);
    }
  }
  std::string key = arg;
  for (auto& ch : key) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
  if (slash != std::string::npos && arg.find(".json") == std::string::npos)
    key = key.substr(slash + 1);  // "meta-llama/Llama-3.1-8B" → preset "llama-3.1-8b"
  const fs::path dir = configs / "models";
  std::vector<std::string> names;
  if (fs::is_directory(dir, ec))
    for (const auto& e : fs::directory_iterator(dir, ec))
      if (e.path().extension() == ".json") names.push_back(e.path().stem().string());
  std::sort(names.begin(), names.end());
  if (std::find(names.begin(), names.end(), key) != names.end()) return io::load_model(dir / (key + ".json"), tail);
  std::vector<std::string> longer;  // presets that extend the name: "mixtral-8x7b" → "mixtral-8x7b-v0.1"
  for (const auto& n : names)
    if (n.size() > key.size() + 1 && n.compare(0, key.size() + 1, key + "-") == 0) longer.push_back(n);
  if (longer.size() == 1 && !key.empty()) {
    spdlog::info("MODEL {}: preset {}", arg, longer.front());
    return io::load_model(dir / (longer.front() + ".json"), longer.front());  // the preset's own name
  }

  std::string msg;
  if (hub_id) {
    msg = fmt::format("MODEL: '{}' is not in the local Hugging Face cache ({}) nor a bundled preset; download its config with "
                      "`huggingface-cli download {} config.json` (HF_HOME / HF_HUB_CACHE choose the cache) or pass a "
                      "config.json path",
                      shown, cache.empty() ? "no cache directory: HOME is not set" : io::display_path(io::hf_model_folder(cache, arg).string()),
                      arg);
  } else {
    msg = "MODEL: '" + shown + "' is neither a file nor a bundled preset";
  }
  if (longer.size() > 1) {
    msg += " (several presets match:";
    for (std::size_t i = 0; i < longer.size(); ++i) msg += (i ? ", " : " ") + longer[i];
    msg += ")";
  } else if (!hub_id && key.size() <= 200) {  // another hub model's preset is no suggestion for a hub id
    if (auto m = closest_match(key, names)) msg += " (did you mean '" + *m + "'?)";
  }
  if (!hub_id) {
    msg += "; presets: ";
    for (std::size_t i = 0; i < names.size(); ++i) msg += (i ? ", " : "") + names[i];
    msg += "; a Hugging Face id (ORG/NAME) is read from the local Hugging Face cache";
  }
  throw invalid_request(msg);
}

}  // namespace bwplan::cli
