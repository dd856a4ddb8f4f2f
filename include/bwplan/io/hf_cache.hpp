// bwplan: GPU memory and throughput planning for LLM training
// SPDX-License-Identifier: Apache-2.0
#pragma once

// Models by Hugging Face id: the config.json of a model in the local Hugging Face hub cache, in the layout
// huggingface_hub writes (`models--ORG--NAME/refs/main` holds a commit hash; the files are in
// `models--ORG--NAME/snapshots/<hash>/`). Nothing is downloaded.

#include <bwplan/io/file.hpp>

#include <cstdlib>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace bwplan::io {

/// The hub cache directory huggingface_hub uses: $HF_HUB_CACHE, else $HUGGINGFACE_HUB_CACHE (older
/// releases), else $HF_HOME/hub, else $XDG_CACHE_HOME/huggingface/hub, else ~/.cache/huggingface/hub.
/// Empty when none can be formed (no HOME).
[[nodiscard]] inline std::filesystem::path hf_hub_cache_dir() {
  auto env = [](const char* name) -> std::string {
    const char* v = std::getenv(name);
    return v && *v ? std::string(v) : std::string();
  };
  if (auto v = env("HF_HUB_CACHE"); !v.empty()) return v;
  if (auto v = env("HUGGINGFACE_HUB_CACHE"); !v.empty()) return v;
  if (auto v = env("HF_HOME"); !v.empty()) return std::filesystem::path(v) / "hub";
  if (auto v = env("XDG_CACHE_HOME"); !v.empty()) return std::filesystem::path(v) / "huggingface" / "hub";
  if (auto v = env("HOME"); !v.empty()) return std::filesystem::path(v) / ".cache" / "huggingface" / "hub";
  return {};
}

/// Whether `id` has the shape of a Hugging Face model id, "ORG/NAME" (one slash; letters, digits, '-', '_', '.';
/// each part starting with a letter or digit, so "./x" and "../x" are paths; not ending in ".json").
[[nodiscard]] inline bool is_hf_model_id(std::string_view id) {
  const auto slash = id.find('/');
  if (slash == std::string_view::npos || slash == 0 || slash + 1 >= id.size() || id.find('/', slash + 1) != std::string_view::npos)
    return false;
  auto alnum = [](char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9'); };
  if (!alnum(id.front()) || !alnum(id[slash + 1])) return false;
  if (id.size() > 96 * 2 + 1 || id.find("..") != std::string_view::npos) return false;
  if (id.size() >= 5 && id.substr(id.size() - 5) == ".json") return false;
  for (char c : id) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' || c == '_' ||
                    c == '.' || c == '/';
    if (!ok) return false;
  }
  return true;
}

/// The folder of model `id` in `cache`: "Qwen/Qwen2.5-0.5B" → cache / "models--Qwen--Qwen2.5-0.5B".
[[nodiscard]] inline std::filesystem::path hf_model_folder(const std::filesystem::path& cache, std::string_view id) {
  std::string name = "models--";
  for (char c : id) {
    if (c == '/') name += "--";
    else name += c;
  }
  return cache / name;
}

/// The config.json of model `id` in the hub cache `cache`, if it is there: the snapshot `refs/main` names,
/// else the only snapshot holding a config.json. nullopt when the model or its config.json is not cached.
[[nodiscard]] inline std::optional<std::filesystem::path> find_hf_config(const std::filesystem::path& cache, std::string_view id) {
  namespace fs = std::filesystem;
  if (cache.empty() || !is_hf_model_id(id)) return std::nullopt;
  const fs::path folder = hf_model_folder(cache, id);
  std::error_code ec;
  if (!fs::is_directory(folder, ec)) return std::nullopt;
  const fs::path snapshots = folder / "snapshots";
  if (fs::is_regular_file(folder / "refs" / "main", ec)) {
    std::string hash;
    try {
      hash = read_text_file(folder / "refs" / "main", 4096);
    } catch (const config_error&) {
      hash.clear();
    }
    while (!hash.empty() && (hash.back() == '\n' || hash.back() == '\r' || hash.back() == ' ')) hash.pop_back();
    bool plain = !hash.empty();  // a commit hash: no path separators, no ".."
    for (char c : hash)
      if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9'))) plain = false;
    if (plain && fs::is_regular_file(snapshots / hash / "config.json", ec)) return snapshots / hash / "config.json";
  }
  std::vector<fs::path> found;
  if (fs::is_directory(snapshots, ec))
    for (const auto& e : fs::directory_iterator(snapshots, ec))
      if (fs::is_regular_file(e.path() / "config.json", ec)) found.push_back(e.path() / "config.json");
  if (found.size() == 1) return found.front();
  return std::nullopt;
}

}  // namespace bwplan::io
