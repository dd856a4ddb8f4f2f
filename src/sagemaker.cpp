// SPDX-License-Identifier: Apache-2.0
// SageMaker AI payloads from a plan. Every mapping is listed in docs/sagemaker.md.
#include "sagemaker.hpp"

#include <bwplan/plan.hpp>
#include <bwplan/quantity.hpp>

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <ctime>
#include <filesystem>
#include <map>

namespace bwplan::sagemaker {

namespace {

using ojson = nlohmann::ordered_json;

/// The AWS documentation's example account and bucket, used (with a warning) when the user gives none.
constexpr const char* placeholder_role = "arn:aws:iam::111122223333:role/SageMakerTrainingExecutionRole";
constexpr const char* placeholder_output = "s3://amzn-s3-demo-bucket/bwplan/";
/// SageMaker's documented maximum of MaxRuntimeInSeconds: 28 days (prose in the API reference, not in the model).
constexpr std::int64_t max_runtime_limit_s = 28LL * 24 * 3600;
/// Time allowed for everything around the training steps: image pull, data download, model load, final checkpoint upload.
constexpr double startup_allowance_s = 1800;

std::string lower(std::string s) {
  for (auto& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

bool starts_with(std::string_view s, std::string_view p) { return s.substr(0, p.size()) == p; }

/// "KEY=VALUE" split at the first '='. Throws invalid_request naming `flag`.
std::pair<std::string, std::string> key_value(const std::string& text, std::string_view flag) {
  const auto eq = text.find('=');
  if (eq == std::string::npos || eq == 0)
    throw invalid_request(fmt::format("{}: expected KEY=VALUE, got '{}'", flag, text));
  return {text.substr(0, eq), text.substr(eq + 1)};
}

/// A user hyperparameter value as the Python SDK user would have typed it: JSON numbers, booleans, null,
/// arrays and objects keep their type; anything else is a string.
nlohmann::json typed_value(const std::string& v) {
  if (v.empty()) return v;
  try {
    auto j = nlohmann::json::parse(v);
    if (!j.is_string()) return j;
  } catch (const nlohmann::json::parse_error&) {
  }
  return v;
}

/// "s3://bucket/prefix/" → "s3://bucket/prefix" (no trailing slash).
std::string trim_slash(std::string s) {
  while (!s.empty() && s.back() == '/') s.pop_back();
  return s;
}

/// Hugging Face id of a bundled preset (the presets are config.json files without their hub id).
std::string hub_id(const std::string& model_arg, const model_spec& m) {
  static const std::map<std::string, std::string> ids{
      {"gemma-2b-it", "google/gemma-2b-it"},
      {"llama-3.1-405b", "meta-llama/Llama-3.1-405B"},
      {"llama-3.1-70b", "meta-llama/Llama-3.1-70B"},
      {"llama-3.1-8b", "meta-llama/Llama-3.1-8B"},
      {"llama-3.2-1b", "meta-llama/Llama-3.2-1B"},
      {"llama-3.2-3b", "meta-llama/Llama-3.2-3B"},
      {"mistral-7b-v0.1", "mistralai/Mistral-7B-v0.1"},
      {"qwen2.5-7b", "Qwen/Qwen2.5-7B"},
      {"qwen2.5-14b", "Qwen/Qwen2.5-14B"},
      {"qwen2.5-32b", "Qwen/Qwen2.5-32B"},
      {"qwen2.5-72b", "Qwen/Qwen2.5-72B"},
      {"qwen3-0.6b", "Qwen/Qwen3-0.6B"},
      {"qwen3-8b", "Qwen/Qwen3-8B"},
      {"qwen3-32b", "Qwen/Qwen3-32B"},
      {"smollm2-1.7b-instruct", "HuggingFaceTB/SmolLM2-1.7B-Instruct"},
      {"tinyllama-1.1b-chat-v1.0", "TinyLlama/TinyLlama-1.1B-Chat-v1.0"},
      {"deepseek-v3-base", "deepseek-ai/DeepSeek-V3-Base"},
      {"deepseek-r1", "deepseek-ai/DeepSeek-R1"},
      {"mixtral-8x7b-v0.1", "mistralai/Mixtral-8x7B-v0.1"},
      {"mixtral-8x22b-v0.1", "mistralai/Mixtral-8x22B-v0.1"},
      {"mistral-7b-instruct-v0.3", "mistralai/Mistral-7B-Instruct-v0.3"},
      {"qwen3-30b-a3b", "Qwen/Qwen3-30B-A3B"},
      {"qwen3-30b-a3b-instruct-2507", "Qwen/Qwen3-30B-A3B-Instruct-2507"},
      {"llama-3.2-3b-instruct", "meta-llama/Llama-3.2-3B-Instruct"},
      {"phi-3-mini-128k-instruct", "microsoft/Phi-3-mini-128k-instruct"},
      {"gemma-2-9b-it", "google/gemma-2-9b-it"},
      {"falcon-7b", "tiiuae/falcon-7b"},
      {"falcon-7b-instruct", "tiiuae/falcon-7b-instruct"},
      {"gpt2", "openai-community/gpt2"},
      {"gpt2-large", "openai-community/gpt2-large"},
      {"gpt2-xl", "openai-community/gpt2-xl"},
  };
  const bool looks_like_hub_id = !std::filesystem::exists(model_arg) && std::count(model_arg.begin(), model_arg.end(), '/') == 1 &&
                                 model_arg.find(".json") == std::string::npos && !starts_with(model_arg, "/") &&
                                 !starts_with(model_arg, ".");
  if (looks_like_hub_id) return model_arg;
  if (auto it = ids.find(lower(model_arg)); it != ids.end()) return it->second;
  if (auto it = ids.find(lower(m.name)); it != ids.end()) return it->second;
  return m.name;
}

/// Transformers decoder-layer class per `model_type` (FSDP auto-wrap unit).
std::string decoder_layer(const std::string& family) {
  static const std::map<std::string, std::string> cls{{"llama", "LlamaDecoderLayer"},   {"mistral", "MistralDecoderLayer"},
                                                      {"qwen2", "Qwen2DecoderLayer"},   {"qwen3", "Qwen3DecoderLayer"},
                                                      {"gemma", "GemmaDecoderLayer"},   {"phi3", "Phi3DecoderLayer"}};
  auto it = cls.find(family);
  return it == cls.end() ? std::string{} : it->second;
}

/// Characters allowed in a tag value (TagValue pattern, ASCII part): others become '-'.
std::string tag_safe(std::string s) {
  for (auto& c : s)
    if (!(std::isalnum(static_cast<unsigned char>(c)) || std::string_view(" _.:/=+-@").find(c) != std::string_view::npos)) c = '-';
  return s;
}

void py_string(std::string& out, const std::string& s) {
  out += '"';
  std::wstring w;
  if (!io::detail::utf8_decode(s, w)) throw invalid_request("hyperparameter text is not valid UTF-8");
  for (wchar_t wc : w) {
    const auto cp = static_cast<std::uint32_t>(wc);
    switch (cp) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      case '\b': out += "\\b"; break;
      case '\f': out += "\\f"; break;
      default:
        if (cp >= 0x20 && cp < 0x7F) out += static_cast<char>(cp);
        else if (cp <= 0xFFFF) out += fmt::format("\\u{:04x}", cp);
        else {
          const std::uint32_t v = cp - 0x10000;
          out += fmt::format("\\u{:04x}\\u{:04x}", 0xD800 + (v >> 10), 0xDC00 + (v & 0x3FF));
        }
    }
  }
  out += '"';
}

void py_dumps(std::string& out, const nlohmann::ordered_json& v) {
  switch (v.type()) {
    case nlohmann::json::value_t::object: {
      out += '{';
      bool first = true;
      for (auto it = v.begin(); it != v.end(); ++it) {
        if (!first) out += ", ";
        first = false;
        py_string(out, it.key());
        out += ": ";
        py_dumps(out, *it);
      }
      out += '}';
      break;
    }
    case nlohmann::json::value_t::array: {
      out += '[';
      for (std::size_t i = 0; i < v.size(); ++i) {
        if (i) out += ", ";
        py_dumps(out, v[i]);
      }
      out += ']';
      break;
    }
    case nlohmann::json::value_t::string: py_string(out, v.get<std::string>()); break;
    default: out += v.dump();  // null, true/false, integers; floats in the shortest round-trip form, as Python's repr
  }
}

/// Hyperparameters in the SDK v2 encoding (`json.dumps` of each value).
ojson encode_all(const ojson& hp) {
  ojson out = ojson::object();
  for (auto it = hp.begin(); it != hp.end(); ++it) out[it.key()] = sdk_json_encode(*it);
  return out;
}

void add_violation(std::vector<io::shape_violation>& out, std::string path, std::string rule) {
  out.push_back({std::move(path), std::move(rule), "CreateTrainingJobRequest"});
}

}  // namespace

const std::vector<dlc_image>& pytorch_images() {
  static const std::vector<dlc_image> v{
      {"2.6.0", "pytorch-training", "2.6.0-gpu-py312-cu126-ubuntu22.04-sagemaker", "py312", 12.6},
      {"2.7.1", "pytorch-training", "2.7.1-gpu-py312-cu128-ubuntu22.04-sagemaker", "py312", 12.8},
      {"2.8.0", "pytorch-training", "2.8.0-gpu-py312-cu129-ubuntu22.04-sagemaker", "py312", 12.9},
      {"2.9.0", "pytorch-training", "2.9.0-gpu-py312-cu130-ubuntu22.04-sagemaker", "py312", 13.0},
      {"2.10.0", "pytorch-training", "2.10.0-gpu-py313-cu130-ubuntu22.04-sagemaker", "py313", 13.0},
      {"2.11.0", "pytorch", "2.11.0-cu130-amzn2023-sagemaker", "py312", 13.0},
      {"2.12.1", "pytorch", "2.12.1-cu130-amzn2023-sagemaker", "py312", 13.0},
      {"2.13.0", "pytorch", "2.13.0-cu133-amzn2023-sagemaker", "py312", 13.3},
  };
  return v;
}

const dlc_image& find_image(std::string_view version) {
  std::vector<std::string> known;
  for (const auto& img : pytorch_images()) {
    const std::string minor = img.version.substr(0, img.version.rfind('.'));
    if (version == img.version || version == minor) return img;
    known.push_back(minor);
  }
  std::string list;
  for (std::size_t i = 0; i < known.size(); ++i) list += (i ? ", " : "") + known[i];
  throw invalid_request(fmt::format("--framework-version: no SageMaker PyTorch training image known for '{}' (known: {}); pass --image-uri",
                                    version, list));
}

const dlc_image& smp_image() {
  static const dlc_image img{"2.5.1", "smdistributed-modelparallel", "2.5.1-gpu-py311-cu124", "py311", 12.4};
  return img;
}

std::string registry(std::string_view region, bool smp) {
  static const std::map<std::string, std::string, std::less<>> accounts{
      {"us-east-1", "763104351884"},      {"us-east-2", "763104351884"},      {"us-west-1", "763104351884"},
      {"us-west-2", "763104351884"},      {"ap-south-1", "763104351884"},     {"ap-northeast-1", "763104351884"},
      {"ap-northeast-2", "763104351884"}, {"ap-southeast-1", "763104351884"}, {"ap-southeast-2", "763104351884"},
      {"ca-central-1", "763104351884"},   {"eu-central-1", "763104351884"},   {"eu-west-1", "763104351884"},
      {"eu-west-2", "763104351884"},      {"eu-west-3", "763104351884"},      {"eu-north-1", "763104351884"},
      {"sa-east-1", "763104351884"},      {"af-south-1", "626614931356"},     {"ap-east-1", "871362719292"},
      {"ap-east-2", "975050140332"},      {"ap-south-2", "772153158452"},     {"ap-southeast-3", "907027046896"},
      {"ap-southeast-4", "457447274322"}, {"ap-southeast-5", "550225433462"}, {"ap-southeast-6", "633930458069"},
      {"ap-southeast-7", "590183813437"}, {"ap-northeast-3", "364406365360"}, {"ca-west-1", "204538143572"},
      {"eu-central-2", "380420809688"},   {"eu-south-1", "692866216735"},     {"eu-south-2", "503227376785"},
      {"il-central-1", "780543022126"},   {"me-central-1", "914824155844"},   {"me-south-1", "217643126080"},
      {"mx-central-1", "637423239942"},   {"cn-north-1", "727897471807"},     {"cn-northwest-1", "727897471807"},
  };
  // Regions of the SMP v2 images (sagemaker-python-sdk image_uri_config/pytorch-smp.json).
  static const std::vector<std::string_view> smp_regions{
      "ap-northeast-1", "ap-northeast-2", "ap-northeast-3", "ap-south-1", "ap-southeast-1", "ap-southeast-2",
      "ca-central-1",   "eu-central-1",   "eu-north-1",     "eu-west-1",  "eu-west-2",      "eu-west-3",
      "sa-east-1",      "us-east-1",      "us-east-2",      "us-west-1",  "us-west-2"};
  auto it = accounts.find(region);
  if (it == accounts.end()) {
    std::vector<std::string> names;
    for (const auto& [r, a] : accounts) names.push_back(r);
    std::string msg = fmt::format("--region: no Deep Learning Containers registry known for '{}'", region);
    if (auto m = closest_match(region, names)) msg += fmt::format(" (did you mean '{}'?)", *m);
    throw invalid_request(msg + "; pass --image-uri");
  }
  std::string account = it->second;
  if (smp) {
    if (std::find(smp_regions.begin(), smp_regions.end(), region) == smp_regions.end())
      throw invalid_request(fmt::format("--distribution smp: the SMP v2 images are not published in {}", region));
    account = "658645717510";
  }
  const bool china = starts_with(region, "cn-");
  return fmt::format("{}.dkr.ecr.{}.amazonaws.com{}", account, region, china ? ".cn" : "");
}

std::string image_uri(const dlc_image& img, std::string_view region, bool smp) {
  return fmt::format("{}/{}:{}", registry(region, smp), img.repository, img.tag);
}

double min_cuda(const gpu_spec& gpu) {
  const std::string id = lower(gpu.id);
  if (id == "b300" || id == "gb300") return 12.9;
  if (gpu.architecture == "blackwell") return 12.8;
  if (gpu.architecture == "hopper") return 11.8;
  return 11.0;
}

std::string sdk_json_encode(const nlohmann::ordered_json& v) {
  std::string out;
  py_dumps(out, v);
  return out;
}

std::string name_stem(std::string_view text, std::size_t max) {
  std::string s;
  for (char c : text) {
    const auto u = static_cast<unsigned char>(c);
    if (std::isalnum(u)) s += static_cast<char>(std::tolower(u));
    else if (!s.empty() && s.back() != '-') s += '-';
  }
  if (s.size() > max) s.resize(max);
  while (!s.empty() && s.back() == '-') s.pop_back();
  return s;
}

std::string timestamped_name(std::string_view base, std::chrono::system_clock::time_point now) {
  const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(now.time_since_epoch()).count();
  const std::time_t secs = static_cast<std::time_t>(ms / 1000);
  std::tm tm{};
  gmtime_r(&secs, &tm);
  const std::string stamp = fmt::format("{:04}-{:02}-{:02}-{:02}-{:02}-{:02}-{:03}", tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday,
                                        tm.tm_hour, tm.tm_min, tm.tm_sec, static_cast<int>(ms % 1000));
  std::string b(base.substr(0, 63 - stamp.size() - 1));
  while (!b.empty() && b.back() == '-') b.pop_back();
  return b.empty() ? stamp : b + "-" + stamp;
}

std::int64_t parse_duration(std::string_view text, std::string_view flag) {
  // one duration grammar for the whole CLI; a bare number is seconds here (MaxRuntimeInSeconds)
  return static_cast<std::int64_t>(std::ceil(bwplan::parse_duration(std::string(text), std::string(flag), 1.0)));
}

job_request build_request(const plan_view& plan, const job_settings& s, std::chrono::system_clock::time_point now) {
  const training_config& c = plan.config;
  const instance_spec& inst = plan.instance;
  job_request r;

  // ---- instances: torchrun in the container starts one process per GPU of every instance
  if (inst.gpus_per_node < 1) throw invalid_request(fmt::format("instance {} has no GPUs in the catalog", inst.id));
  if (c.world_size % inst.gpus_per_node != 0)
    throw invalid_request(fmt::format("--gpus {}: a SageMaker job uses every GPU of its instances ({} per {}); use a multiple of {}",
                                      c.world_size, inst.gpus_per_node, inst.id, inst.gpus_per_node));
  const int nodes = c.world_size / inst.gpus_per_node;

  // ---- image
  const bool smp = s.distribution == "smp";
  if (s.distribution != "torch_distributed" && !smp)
    throw invalid_request("--distribution: expected torch_distributed or smp, got '" + s.distribution + "'");
  const bool own_image = !s.image_uri.empty();
  const dlc_image& img = smp ? smp_image() : own_image ? pytorch_images().back() : find_image(s.framework_version);
  if (img.cuda + 1e-9 < min_cuda(plan.gpu)) {
    if (smp)
      throw invalid_request(fmt::format(
          "--distribution smp: the newest SMP v2 image ({}, CUDA {:.1f}) cannot run on {} ({} needs CUDA >= {:.1f}); "
          "use --distribution torch_distributed (native FSDP)",
          img.tag, img.cuda, inst.id, plan.gpu.id, min_cuda(plan.gpu)));
    if (!own_image)
      throw invalid_request(fmt::format("--framework-version {}: image {} has CUDA {:.1f}, but {} on {} needs CUDA >= {:.1f}",
                                        s.framework_version, img.tag, img.cuda, plan.gpu.id, inst.id, min_cuda(plan.gpu)));
  }
  if (smp && c.shard != sharding::full)
    throw invalid_request("--distribution smp: SMP v2 shards with FSDP; the plan uses --sharding none");
  const std::string image = own_image ? s.image_uri : image_uri(img, s.region, smp);

  // ---- names and locations
  if (!s.job_name.empty() && !s.base_job_name.empty()) throw invalid_request("--job-name and --base-job-name exclude each other");
  std::string inst_short = starts_with(inst.id, "ml.") ? inst.id.substr(3) : inst.id;  // "p6-b200.48xlarge"
  inst_short = name_stem(inst_short.substr(0, inst_short.find('.')), 20);             // "p6-b200"
  r.base_job_name = !s.base_job_name.empty() ? s.base_job_name
                                             : name_stem(fmt::format("{}-{}-{}n", plan.model.name, inst_short, nodes), 39);
  r.job_name = !s.job_name.empty() ? s.job_name : timestamped_name(r.base_job_name, now);
  std::string output = s.output_s3;
  if (output.empty()) {
    output = placeholder_output;
    r.warnings.push_back(fmt::format("no --output-s3: OutputDataConfig uses the placeholder {}; replace it before submitting", output));
  }
  std::string role = s.role_arn;
  if (role.empty()) {
    role = placeholder_role;
    r.warnings.push_back(fmt::format("no --role-arn: RoleArn is the placeholder {}; replace it before submitting", role));
  }
  r.entry_point = s.entry_point;
  r.source_s3 = s.source_s3;
  if (r.source_s3.empty()) {
    if (!starts_with(output, "s3://")) throw invalid_request("--source-s3: needed when --output-s3 is not an s3:// URI");
    const std::string rest = output.substr(5);
    const std::string bucket = rest.substr(0, rest.find('/'));
    r.source_s3 = fmt::format("s3://{}/{}/source/sourcedir.tar.gz", bucket, r.job_name);
  }
  const std::string checkpoint = s.checkpoint_s3.empty() ? fmt::format("{}/{}/checkpoints/", trim_slash(output), r.job_name) : s.checkpoint_s3;

  // ---- length of the run
  if (!(s.runtime_margin >= 1 && s.runtime_margin <= max_runtime_margin))  // NaN fails both
    throw invalid_request(fmt::format("--runtime-margin: must be between 1 and {:g}, got {}", max_runtime_margin, s.runtime_margin));
  if (s.max_steps < 0 || s.max_steps > max_steps_limit)
    throw invalid_request(fmt::format("--max-steps: must be between 1 and {}, got {}", max_steps_limit, s.max_steps));
  if (s.train_tokens < 0 || s.train_tokens > max_train_tokens)
    throw invalid_request(fmt::format("--train-tokens: must be between 1 and {}, got {}", max_train_tokens, s.train_tokens));
  if (s.max_steps > 0 && s.train_tokens > 0) throw invalid_request("--max-steps and --train-tokens exclude each other");
  const std::int64_t tokens_per_step = c.micro_batch * c.seq_len * c.grad_accum * c.world_size;
  r.steps = s.max_steps > 0 ? s.max_steps : s.train_tokens > 0 ? (s.train_tokens + tokens_per_step - 1) / tokens_per_step : 1000;
  r.estimated_s = static_cast<double>(r.steps) * plan.throughput.step.raw();
  std::int64_t runtime = 0;
  if (!s.max_runtime.empty()) {
    runtime = parse_duration(s.max_runtime, "--max-runtime");
  } else {
    const double need = r.estimated_s * s.runtime_margin + startup_allowance_s;
    // compared as a double first: a huge estimate must not reach the integer conversion
    if (!(need <= static_cast<double>(max_runtime_limit_s))) runtime = max_runtime_limit_s + 1;
    else runtime = static_cast<std::int64_t>(std::ceil(need / 900.0)) * 900;  // whole quarter hours
    if (runtime > max_runtime_limit_s)
      throw invalid_request(fmt::format(
          "the run needs about {:.4g} days ({} steps x {:.2f} s x margin {} + {:.0f} s), above SageMaker's 28-day limit on "
          "MaxRuntimeInSeconds; use fewer --max-steps or more --nodes, and resume from checkpoints",
          need / 86400, r.steps, plan.throughput.step.raw(), s.runtime_margin, startup_allowance_s));
  }

  // ---- hyperparameters of the script (typed, as a Python SDK user passes them)
  ojson hp = ojson::object();
  hp["model_id"] = s.model_id.empty() ? hub_id(s.model_arg.empty() ? plan.model.name : s.model_arg, plan.model) : s.model_id;
  hp["max_steps"] = r.steps;
  hp["per_device_train_batch_size"] = c.micro_batch;
  hp["gradient_accumulation_steps"] = c.grad_accum;
  hp["max_seq_length"] = c.seq_len;
  hp["bf16"] = true;  // bf16 compute (autocast / FSDP2 MixedPrecisionPolicy); the GEMM format is "precision"
  hp["precision"] = to_string(c.format);
  hp["master_weights"] = to_string(c.master);
  hp["gradient_checkpointing"] = c.ac.mode != ac_mode::none;
  hp["activation_checkpointing"] = to_string(c.ac);
  hp["sharding"] = to_string(c.shard);
  if (c.shard == sharding::full) {
    hp["fsdp"] = "full_shard auto_wrap";
    if (auto cls = decoder_layer(plan.model.family); !cls.empty()) hp["fsdp_transformer_layer_cls_to_wrap"] = cls;
  }
  hp["optim"] = c.optimizer == optimizer_impl::fused ? "adamw_torch_fused" : "adamw_torch";
  hp["use_liger_kernel"] = c.loss == loss_impl::chunked;
  for (const auto& kv : s.hyperparameters) {
    auto [k, v] = key_value(kv, "--hyperparameter");
    if (starts_with(k, "sagemaker_")) throw invalid_request("--hyperparameter: keys starting with sagemaker_ are reserved by the SDK, got '" + k + "'");
    hp[k] = typed_value(v);
  }
  r.hyperparameters = hp;

  // ---- distribution (SDK v2 `distribution=`) and the reserved hyperparameters it adds
  ojson dist = {{"torch_distributed", {{"enabled", true}}}};
  ojson mp_parameters;
  if (smp) {
    mp_parameters = {{"hybrid_shard_degree", c.world_size},
                     {"sm_activation_offloading", false},
                     {"tensor_parallel_degree", 1},
                     {"context_parallel_degree", 1},
                     {"expert_parallel_degree", 1}};
    dist["smdistributed"] = {{"modelparallel", {{"enabled", true}, {"parameters", mp_parameters}}}};
  }
  r.distribution = dist;

  ojson all = hp;
  all["sagemaker_submit_directory"] = r.source_s3;
  all["sagemaker_program"] = s.entry_point;
  all["sagemaker_container_log_level"] = 20;
  all["sagemaker_job_name"] = r.job_name;
  all["sagemaker_region"] = s.region;
  if (smp) {
    all["mp_parameters"] = mp_parameters;
    all["sagemaker_distributed_dataparallel_enabled"] = false;
  }
  all["sagemaker_torch_distributed_enabled"] = true;
  all["sagemaker_instance_type"] = inst.id;

  // ---- channels
  ojson channels = ojson::object();
  ojson input = ojson::array();
  for (const auto& ch : s.channels) {
    std::string name = "train", uri = ch;
    if (!starts_with(ch, "s3://") && !starts_with(ch, "https://")) std::tie(name, uri) = key_value(ch, "--train-s3");
    if (channels.contains(name)) throw invalid_request("--train-s3: channel '" + name + "' given twice");
    channels[name] = uri;
    input.push_back({{"ChannelName", name},
                     {"DataSource", {{"S3DataSource", {{"S3DataType", "S3Prefix"}, {"S3Uri", uri}, {"S3DataDistributionType", "FullyReplicated"}}}}}});
  }
  r.channels = channels;

  // ---- volume: the model download (bf16), two retained checkpoints of this node's share of the
  // optimizer state (fp32 master + Adam m, v = 12 B/param; 6 with bf16 master), and 50 GB for data and logs
  std::int64_t volume = s.volume_gb;
  if (volume <= 0) {
    const double p = static_cast<double>(count_parameters(plan.model).total());
    const double state = c.master == master_weights::fp32 ? 12 : 6;
    const double share = c.shard == sharding::full ? 1.0 / nodes : 1.0;
    const double gb = (2 * p + 2 * state * p * share) / 1e9 + 50;
    volume = static_cast<std::int64_t>(std::ceil(gb / 50.0)) * 50;
  }

  // ---- environment: NCCL over EFA. The training toolkit sets FI_PROVIDER only for its own list of EFA
  // instance types, which lacks P6-B200 and P6-B300, so bwplan sets them for every EFA instance.
  ojson env = ojson::object();
  env["NCCL_DEBUG"] = "WARN";
  env["TORCH_NCCL_ASYNC_ERROR_HANDLING"] = "1";
  if (inst.efa_per_node.raw() > 0) {
    env["FI_PROVIDER"] = "efa";
    env["FI_EFA_USE_DEVICE_RDMA"] = "1";
  }
  for (const auto& kv : s.env) {
    auto [k, v] = key_value(kv, "--env");
    env[k] = v;
  }

  // ---- the request, in the order of the API reference
  ojson q;
  q["TrainingJobName"] = r.job_name;
  q["RoleArn"] = role;
  q["AlgorithmSpecification"] = {
      {"TrainingImage", image},
      {"TrainingInputMode", s.input_mode},
      {"EnableSageMakerMetricsTimeSeries", true},
      {"MetricDefinitions",
       {{{"Name", "train:loss"}, {"Regex", "'loss': ([0-9.]+(?:[eE][-+]?[0-9]+)?)"}},
        {{"Name", "train:tokens_per_second"}, {"Regex", "'?(?:train_)?tokens_per_second'?: ([0-9.]+(?:[eE][-+]?[0-9]+)?)"}}}}};
  q["HyperParameters"] = encode_all(all);
  if (!input.empty()) q["InputDataConfig"] = input;
  q["OutputDataConfig"] = {{"S3OutputPath", output}, {"CompressionType", "NONE"}};
  ojson rc = {{"InstanceType", inst.id}, {"InstanceCount", nodes}, {"VolumeSizeInGB", volume}};
  if (s.keep_alive_s > 0) rc["KeepAlivePeriodInSeconds"] = s.keep_alive_s;
  if (!s.training_plan_arn.empty()) rc["TrainingPlanArn"] = s.training_plan_arn;
  q["ResourceConfig"] = rc;
  if (!s.subnets.empty() || !s.security_groups.empty()) {
    ojson vpc = ojson::object();
    if (!s.security_groups.empty()) vpc["SecurityGroupIds"] = s.security_groups;
    if (!s.subnets.empty()) vpc["Subnets"] = s.subnets;
    q["VpcConfig"] = vpc;
  }
  ojson stop = {{"MaxRuntimeInSeconds", runtime}};
  if (s.max_pending_s > 0) stop["MaxPendingTimeInSeconds"] = s.max_pending_s;
  q["StoppingCondition"] = stop;
  ojson tags = ojson::array();
  for (const auto& kv : s.tags) {
    auto [k, v] = key_value(kv, "--tag");
    if (k.size() >= 4 && std::equal(k.begin(), k.begin() + 4, "aws:", [](char a, char b) {
          return std::tolower(static_cast<unsigned char>(a)) == b;
        }))
      throw invalid_request("--tag: keys starting with 'aws:' are reserved by AWS, got '" + k + "'");
    tags.push_back({{"Key", k}, {"Value", v}});
  }
  tags.push_back({{"Key", "bwplan:version"}, {"Value", version_string}});
  tags.push_back({{"Key", "bwplan:plan"},
                  {"Value", tag_safe(fmt::format("{} mbs={} seq={} accum={} ac={} shard={} world={}", plan.model.name, c.micro_batch,
                                                 c.seq_len, c.grad_accum, to_string(c.ac),
                                                 to_string(c.shard), c.world_size))}});
  q["Tags"] = tags;
  q["CheckpointConfig"] = {{"S3Uri", checkpoint}, {"LocalPath", "/opt/ml/checkpoints"}};
  q["Environment"] = env;
  if (s.retries > 0) q["RetryStrategy"] = {{"MaximumRetryAttempts", s.retries}};
  else if (s.retries < 0) throw invalid_request(fmt::format("--retries: must be >= 0, got {}", s.retries));
  r.request = q;

  if (s.max_pending_s > 0 && s.training_plan_arn.empty())
    r.warnings.push_back("--max-pending applies to jobs in a training plan (MaxPendingTimeInSeconds); no --training-plan-arn was given");
  for (auto it = q["HyperParameters"].begin(); it != q["HyperParameters"].end(); ++it)
    if (it->get<std::string>().size() > 256)
      r.warnings.push_back(fmt::format("hyperparameter '{}' is {} characters; the API reference's prose limits values to 256 "
                                       "(the service model allows 2500)", it.key(), it->get<std::string>().size()));
  return r;
}

nlohmann::ordered_json to_estimator(const job_request& r) {
  const ojson& q = r.request;
  ojson e;
  e["entry_point"] = r.entry_point;
  e["source_dir"] = r.source_s3;
  e["role"] = q["RoleArn"];
  e["image_uri"] = q["AlgorithmSpecification"]["TrainingImage"];
  e["instance_type"] = q["ResourceConfig"]["InstanceType"];
  e["instance_count"] = q["ResourceConfig"]["InstanceCount"];
  e["volume_size"] = q["ResourceConfig"]["VolumeSizeInGB"];
  if (q["ResourceConfig"].contains("KeepAlivePeriodInSeconds")) e["keep_alive_period_in_seconds"] = q["ResourceConfig"]["KeepAlivePeriodInSeconds"];
  if (q["ResourceConfig"].contains("TrainingPlanArn")) e["training_plan"] = q["ResourceConfig"]["TrainingPlanArn"];
  e["max_run"] = q["StoppingCondition"]["MaxRuntimeInSeconds"];
  e["input_mode"] = q["AlgorithmSpecification"]["TrainingInputMode"];
  e["output_path"] = q["OutputDataConfig"]["S3OutputPath"];
  e["disable_output_compression"] = true;
  e["checkpoint_s3_uri"] = q["CheckpointConfig"]["S3Uri"];
  e["checkpoint_local_path"] = q["CheckpointConfig"]["LocalPath"];
  if (q.contains("RetryStrategy")) e["max_retry_attempts"] = q["RetryStrategy"]["MaximumRetryAttempts"];
  if (q.contains("VpcConfig")) {
    if (q["VpcConfig"].contains("Subnets")) e["subnets"] = q["VpcConfig"]["Subnets"];
    if (q["VpcConfig"].contains("SecurityGroupIds")) e["security_group_ids"] = q["VpcConfig"]["SecurityGroupIds"];
  }
  e["distribution"] = r.distribution;
  e["hyperparameters"] = r.hyperparameters;
  e["environment"] = q["Environment"];
  e["metric_definitions"] = q["AlgorithmSpecification"]["MetricDefinitions"];
  e["enable_sagemaker_metrics"] = true;
  e["container_log_level"] = 20;
  e["tags"] = q["Tags"];
  e["debugger_hook_config"] = false;
  e["disable_profiler"] = true;
  ojson out;
  out["sdk"] = "sagemaker>=2.200,<3 (sagemaker.pytorch.PyTorch)";
  out["estimator"] = e;
  ojson fit;
  fit["inputs"] = r.channels.empty() ? ojson(nullptr) : r.channels;
  fit["job_name"] = r.job_name;
  out["fit"] = fit;
  std::vector<std::string> notes{
      "PyTorch(**estimator).fit(**fit) sends the CreateTrainingJob request of --format request: the SDK json.dumps() "
      "every hyperparameter value and adds the sagemaker_* keys from entry_point, source_dir, distribution and region"};
  if (q["StoppingCondition"].contains("MaxPendingTimeInSeconds"))
    notes.push_back("MaxPendingTimeInSeconds has no PyTorch(...) argument in SDK v2; set it in the request instead");
  out["notes"] = notes;
  return out;
}

nlohmann::ordered_json to_modeltrainer(const job_request& r) {
  const ojson& q = r.request;
  ojson m;
  m["training_image"] = q["AlgorithmSpecification"]["TrainingImage"];
  m["role"] = q["RoleArn"];
  m["base_job_name"] = r.base_job_name;
  m["training_input_mode"] = q["AlgorithmSpecification"]["TrainingInputMode"];
  m["source_code"] = {{"source_dir", r.source_s3},
                      {"entry_script", r.entry_point}};
  ojson torchrun = {{"process_count_per_node", nullptr}};
  if (r.distribution.contains("smdistributed"))
    torchrun["smp"] = r.distribution["smdistributed"]["modelparallel"]["parameters"];
  m["distributed"] = {{"Torchrun", torchrun}};
  ojson compute = {{"instance_type", q["ResourceConfig"]["InstanceType"]},
                   {"instance_count", q["ResourceConfig"]["InstanceCount"]},
                   {"volume_size_in_gb", q["ResourceConfig"]["VolumeSizeInGB"]}};
  if (q["ResourceConfig"].contains("KeepAlivePeriodInSeconds")) compute["keep_alive_period_in_seconds"] = q["ResourceConfig"]["KeepAlivePeriodInSeconds"];
  if (q["ResourceConfig"].contains("TrainingPlanArn")) compute["training_plan_arn"] = q["ResourceConfig"]["TrainingPlanArn"];
  m["compute"] = compute;
  if (q.contains("VpcConfig")) {
    ojson net = ojson::object();
    if (q["VpcConfig"].contains("Subnets")) net["subnets"] = q["VpcConfig"]["Subnets"];
    if (q["VpcConfig"].contains("SecurityGroupIds")) net["security_group_ids"] = q["VpcConfig"]["SecurityGroupIds"];
    m["networking"] = net;
  }
  ojson stop = {{"max_runtime_in_seconds", q["StoppingCondition"]["MaxRuntimeInSeconds"]}};
  if (q["StoppingCondition"].contains("MaxPendingTimeInSeconds"))
    stop["max_pending_time_in_seconds"] = q["StoppingCondition"]["MaxPendingTimeInSeconds"];
  m["stopping_condition"] = stop;
  m["output_data_config"] = {{"s3_output_path", q["OutputDataConfig"]["S3OutputPath"]}, {"compression_type", "NONE"}};
  ojson inputs = ojson::array();
  for (auto it = r.channels.begin(); it != r.channels.end(); ++it)
    inputs.push_back({{"channel_name", it.key()}, {"data_source", *it}});
  if (!inputs.empty()) m["input_data_config"] = inputs;
  m["checkpoint_config"] = {{"s3_uri", q["CheckpointConfig"]["S3Uri"]}, {"local_path", q["CheckpointConfig"]["LocalPath"]}};
  m["environment"] = q["Environment"];
  m["hyperparameters"] = r.hyperparameters;
  ojson tags = ojson::array();
  for (const auto& t : q["Tags"]) tags.push_back({{"key", t["Key"]}, {"value", t["Value"]}});
  m["tags"] = tags;
  ojson out;
  out["sdk"] = "sagemaker>=3 (sagemaker.train.ModelTrainer)";
  out["model_trainer"] = m;
  ojson builders = ojson::object();
  ojson metrics = ojson::array();
  for (const auto& d : q["AlgorithmSpecification"]["MetricDefinitions"]) metrics.push_back({{"name", d["Name"]}, {"regex", d["Regex"]}});
  builders["with_metric_definitions"] = metrics;
  if (q.contains("RetryStrategy")) builders["with_retry_strategy"] = {{"maximum_retry_attempts", q["RetryStrategy"]["MaximumRetryAttempts"]}};
  out["builders"] = builders;
  out["notes"] = {
      "ModelTrainer appends its own timestamp to base_job_name and runs torchrun through its sm_drivers channel "
      "(ContainerEntrypoint), not through the SageMaker training toolkit",
      "SDK v3 passes string hyperparameters unchanged and json.dumps() the others (safe_serialize)",
      "process_count_per_node null: torchrun starts one process per GPU of each instance"};
  return out;
}

std::vector<io::shape_violation> request_violations(const io::service_model& model, const nlohmann::json& request) {
  auto out = model.check_input(request, "CreateTrainingJob");
  if (!request.is_object()) return out;
  // Cross-field rules stated in the CreateTrainingJob API reference, which the shapes cannot express.
  if (auto a = request.find("AlgorithmSpecification"); a != request.end() && a->is_object()) {
    const bool image = a->contains("TrainingImage"), algo = a->contains("AlgorithmName");
    if (image == algo)
      add_violation(out, "AlgorithmSpecification", image ? "TrainingImage and AlgorithmName exclude each other"
                                                         : "one of TrainingImage or AlgorithmName is required");
  }
  if (auto rc = request.find("ResourceConfig"); rc != request.end() && rc->is_object()) {
    if (rc->contains("InstanceGroups") && (rc->contains("InstanceType") || rc->contains("InstanceCount")))
      add_violation(out, "ResourceConfig.InstanceGroups", "excludes InstanceType and InstanceCount");
    if (rc->contains("InstanceType") && !rc->contains("InstanceCount"))
      add_violation(out, "ResourceConfig.InstanceCount", "required with InstanceType");
    if (auto n = rc->find("InstanceCount"); n != rc->end() && n->is_number_integer() && n->get<std::int64_t>() < 1)
      add_violation(out, "ResourceConfig.InstanceCount", fmt::format("{} instances: a training job needs at least 1", n->get<std::int64_t>()));
  }
  if (auto sc = request.find("StoppingCondition"); sc != request.end() && sc->is_object()) {
    auto rt = sc->find("MaxRuntimeInSeconds");
    if (rt != sc->end() && rt->is_number_integer() && rt->get<std::int64_t>() > max_runtime_limit_s)
      add_violation(out, "StoppingCondition.MaxRuntimeInSeconds",
                    fmt::format("value {} is above SageMaker's documented maximum of 28 days ({} s)", rt->get<std::int64_t>(), max_runtime_limit_s));
    if (auto w = sc->find("MaxWaitTimeInSeconds"); w != sc->end()) {
      if (!request.value("EnableManagedSpotTraining", false))
        add_violation(out, "StoppingCondition.MaxWaitTimeInSeconds", "applies only with EnableManagedSpotTraining");
      else if (rt != sc->end() && w->is_number_integer() && rt->is_number_integer() && w->get<std::int64_t>() < rt->get<std::int64_t>())
        add_violation(out, "StoppingCondition.MaxWaitTimeInSeconds", "must be >= MaxRuntimeInSeconds");
    }
  }
  return out;
}

void check_request(const io::service_model& model, const nlohmann::json& request) {
  const auto v = request_violations(model, request);
  if (!v.empty()) throw invalid_request("SageMaker would reject the CreateTrainingJob request: " + v.front().to_string());
}

}  // namespace bwplan::sagemaker
