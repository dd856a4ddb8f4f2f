// SPDX-License-Identifier: Apache-2.0
// SageMaker AI payloads from a plan. Every mapping is listed in docs/sagemaker.md.
#include "sagemaker.hpp"

#include <bwplan/io/plan.hpp>
#include <bwplan/plan.hpp>
#include <bwplan/quantity.hpp>

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <ctime>
#include <filesystem>
#include <map>
#include <set>

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

/// "s3://bucket/prefix/" → "s3://bucket/prefix" (no trailing slash).
std::string trim_slash(std::string s) {
  while (!s.empty() && s.back() == '/') s.pop_back();
  return s;
}

/// Model families the reference trainer's model path runs (T-model: decoder blocks under model.model.layers
/// with q/k/v/o and gate/up/down projections).
bool trainer_family(const std::string& family) {
  static const std::vector<std::string> f{"llama", "mistral", "qwen2", "qwen3", "gemma", "gemma2", "gemma3", "gemma3_text"};
  return std::find(f.begin(), f.end(), family) != f.end();
}

/// "2.11" or "2.11.0" → {2, 11}.
std::pair<int, int> major_minor(std::string_view v) {
  int major = 0, minor = 0;
  const auto dot = v.find('.');
  try {
    major = std::stoi(std::string(v.substr(0, dot)));
    if (dot != std::string_view::npos) minor = std::stoi(std::string(v.substr(dot + 1)));
  } catch (const std::exception&) {
  }
  return {major, minor};
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

std::string arn_region(std::string_view arn) {
  // arn:partition:service:region:account:resource
  std::size_t pos = 0;
  for (int i = 0; i < 3; ++i) {
    pos = arn.find(':', pos);
    if (pos == std::string_view::npos) return {};
    ++pos;
  }
  const auto end = arn.find(':', pos);
  if (end == std::string_view::npos || !starts_with(arn, "arn:")) return {};
  return std::string(arn.substr(pos, end - pos));
}

std::vector<plan_violation> launch_violations(const plan_view& plan) {
  std::vector<plan_violation> out = io::trainer_refusals(plan.contract, plan.p);
  if (std::string why = trainer_model_refusal(plan.model); !why.empty()) out.push_back({"model", "/model", std::move(why)});
  if (plan.config().modules == module_kernels::fused && !trainer_fuses_norms(plan.model))  // (the trainer finds it at start)
    out.push_back({"modules", "/modules",
                   fmt::format("modules fused: {}'s {}, which the reference trainer does not fuse "
                               "(T-modules, apps/train/bwtrain/model.py apply_module_kernels); use --modules transformers",
                               plan.model.name, trainer_unfused_norms(plan.model))});
  bwplan::plan q = plan.p;
  q.target.gpu = plan.gpu.id;
  try {
    io::validate_hyperparameters(plan.contract, io::plan_hyperparameters(plan.contract, q));
  } catch (const plan_error& e) {
    out.push_back(e.violation());
  }
  return out;
}

job_request build_request(const plan_view& plan, const job_settings& s, std::chrono::system_clock::time_point now) {
  const training_config& c = plan.config();
  const instance_spec& inst = plan.instance;
  const io::training_contract& contract = plan.contract;
  namespace fs = std::filesystem;
  job_request r;

  // ---- what the reference trainer runs: nothing else is emitted
  if (auto v = launch_violations(plan); !v.empty()) throw plan_error(v.front());
  if (!trainer_family(plan.model.family))
    r.warnings.push_back(fmt::format("model family '{}' ({}) is not one the reference trainer was written for (Llama, Mistral, Qwen2, "
                                     "Qwen3, Gemma): it refuses at start a model without model.layers, embed_tokens, norm and lm_head (T-model), "
                                     "and without the q/k/v/o and gate/up/down projections a LoRA plan (T-lora-targets) or a "
                                     "tensor-parallel one (T-tp-heads)",
                                     plan.model.family, plan.model.name));

  // ---- instances: torchrun in the container starts one process per GPU of every instance
  if (inst.gpus_per_node < 1) throw invalid_request(fmt::format("instance {} has no GPUs in the catalog", inst.id));
  if (c.world_size % inst.gpus_per_node != 0)
    throw invalid_request(fmt::format("--gpus {}: a SageMaker job uses every GPU of its instances ({} per {}); use a multiple of {}",
                                      c.world_size, inst.gpus_per_node, inst.id, inst.gpus_per_node));
  const int nodes = c.world_size / inst.gpus_per_node;

  // ---- region: the training plan's, which --region must not contradict
  r.region = s.region;
  if (const std::string plan_region = arn_region(s.training_plan_arn); !plan_region.empty()) {
    if (!s.region.empty() && s.region != plan_region)
      throw invalid_request(fmt::format("--region {}: the training plan {} is in {}, and a job runs in its plan's region; "
                                        "give --region {} or leave --region out",
                                        s.region, s.training_plan_arn, plan_region, plan_region));
    r.region = plan_region;
  }
  if (r.region.empty()) r.region = "us-west-2";

  // ---- image: a PyTorch DLC the trainer's pinned libraries run on
  if (s.distribution == "smp")
    throw invalid_request("--distribution smp: the reference trainer (train.py, training contract v" + std::to_string(contract.version) +
                          ") shards with PyTorch FSDP2 and DTensor under torchrun, not with the SMP v2 library, and the newest SMP v2 "
                          "image (PyTorch 2.5.1) predates the PyTorch 2.11 it needs; use --distribution torch_distributed");
  if (s.distribution != "torch_distributed")
    throw invalid_request("--distribution: expected torch_distributed, got '" + s.distribution + "'");
  const bool own_image = !s.image_uri.empty();
  const dlc_image& img = own_image ? pytorch_images().back() : find_image(s.framework_version);
  if (!own_image) {
    if (major_minor(img.version) < major_minor(trainer_min_framework))
      throw invalid_request(fmt::format("--framework-version {}: the reference trainer needs the PyTorch {} image or newer "
                                        "(apps/train/requirements.txt pins torchao 0.18.0, whose extensions need torch >= 2.11)",
                                        s.framework_version, trainer_min_framework));
    if (major_minor(img.version) > major_minor(trainer_min_framework))
      r.warnings.push_back(fmt::format("--framework-version {}: the trainer's pinned libraries (requirements.txt) were checked against "
                                       "torch 2.11.0; image {} has torch {}",
                                       s.framework_version, img.tag, img.version));
    if (img.cuda + 1e-9 < min_cuda(plan.gpu))
      throw invalid_request(fmt::format("--framework-version {}: image {} has CUDA {:.1f}, but {} on {} needs CUDA >= {:.1f}",
                                        s.framework_version, img.tag, img.cuda, plan.gpu.id, inst.id, min_cuda(plan.gpu)));
  }
  const std::string image = own_image ? s.image_uri : image_uri(img, r.region);

  // ---- names and locations
  if (!s.job_name.empty() && !s.base_job_name.empty()) throw invalid_request("--job-name and --base-job-name exclude each other");
  if (!s.source_dir.empty() && s.entry_point != "train.py")
    throw invalid_request("--entry-point " + s.entry_point + ": the source dir bwplan writes (--source-dir) runs the reference trainer, train.py");
  std::string inst_short = starts_with(inst.id, "ml.") ? inst.id.substr(3) : inst.id;  // "p6-b200.48xlarge"
  inst_short = name_stem(inst_short.substr(0, inst_short.find('.')), 20);             // "p6-b200"
  r.base_job_name = !s.base_job_name.empty() ? s.base_job_name
                                             : name_stem(fmt::format("{}-{}-{}n", plan.model.name, inst_short, nodes), 39);
  r.job_name = !s.job_name.empty() ? s.job_name : timestamped_name(r.base_job_name, now);
  if (!s.base_job_name.empty() && s.base_job_name.size() > 39)  // 63 - the 24-character timestamp (cut silently before: an audit)
    r.warnings.push_back(fmt::format("--base-job-name: {} characters; the job name keeps the first {} before its timestamp ({})",
                                     s.base_job_name.size(), r.job_name.size() > 24 ? r.job_name.size() - 24 : 0, r.job_name));
  std::string output = s.output_s3;
  // an s3:// URI needs its bucket: "s3://" alone made the derived checkpoint URI fail, blamed on --checkpoint-s3 (an audit)
  if (starts_with(output, "s3://") && (output.size() == 5 || output[5] == '/'))
    throw invalid_request(fmt::format("--output-s3 {}: no bucket; expected s3://BUCKET[/PREFIX]", output));
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
  const std::int64_t tokens_per_step = c.micro_batch * c.seq_len * c.grad_accum * c.dp();
  r.steps = s.max_steps > 0 ? s.max_steps : s.train_tokens > 0 ? (s.train_tokens + tokens_per_step - 1) / tokens_per_step : 1000;
  r.estimated_s = static_cast<double>(r.steps) * plan.throughput.step.raw();
  std::int64_t runtime = 0;
  if (!s.max_runtime.empty()) {
    // whole seconds, at least 1 (a review: 0.0001s became MaxRuntimeInSeconds 1 without a word)
    const double d = bwplan::parse_duration(s.max_runtime, "--max-runtime", 1.0);  // (a bare number is seconds here)
    // (1.1h is 3960.0000000000005 s in binary: whole to a microsecond counts as whole)
    if (!(d >= 1 - 1e-6) || std::abs(d - std::round(d)) > 1e-6)
      throw invalid_request(fmt::format("--max-runtime {}: MaxRuntimeInSeconds is a whole number of seconds, at least 1; got {:g} s",
                                        s.max_runtime, d));
    runtime = std::llround(d);  // (at most 10 years: parse_duration; past 28 days the request check names it)
    if (static_cast<double>(runtime) < r.estimated_s)
      r.warnings.push_back(fmt::format("--max-runtime {}: below the estimated {:.0f} s of {} steps; SageMaker stops the job before "
                                       "it ends (the trainer's checkpoints let a new job resume)",
                                       s.max_runtime, r.estimated_s, r.steps));
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

  // ---- the model the trainer loads
  std::string model = s.model_id.empty() ? plan.p.model : s.model_id;
  if (!s.model_id.empty()) {
    // --model-id names where the weights come from, not another model: a preset or its Hugging Face id that is not
    // the plan's model is refused (a review: the 70B's id on an 8B plan went out, and `check` of the job then said
    // 320 GiB per GPU); an id bwplan cannot map (an s3:// prefix, another org/name) is taken on trust, with a warning
    auto lower = [](std::string t) {
      std::transform(t.begin(), t.end(), t.begin(), [](unsigned char ch) { return static_cast<char>(std::tolower(ch)); });
      return t;
    };
    const std::string given = lower(s.model_id), planned = lower(plan.p.model);
    std::string preset_of_id;  // the bundled preset --model-id names, by its preset id or its hub id
    for (const auto& [id, hub] : plan.contract.presets)
      if (given == id || given == lower(hub)) preset_of_id = id;
    const auto planned_hub = plan.contract.presets.find(planned);
    bool planned_is_preset = planned_hub != plan.contract.presets.end();  // (else a local config: compared by the warning)
    for (const auto& [id, hub] : plan.contract.presets) planned_is_preset = planned_is_preset || planned == lower(hub);
    const bool same = given == planned || (planned_hub != plan.contract.presets.end() && given == lower(planned_hub->second)) ||
                      lower(plan.model.name) == preset_of_id;
    if (!preset_of_id.empty() && !same && planned_is_preset)
      throw invalid_request(fmt::format("--model-id {}: is the preset {}, but the plan was estimated for {}; estimate that model "
                                        "(MODEL {}) or give the plan's own weights",
                                        s.model_id, preset_of_id, plan.model.name, s.model_id));
    if (!same && (preset_of_id.empty() || !planned_is_preset))  // (a local copy of a preset's config with its weights: fine)
      r.warnings.push_back(fmt::format("--model-id {}: the trainer loads these weights for a plan estimated for {}; bwplan cannot "
                                       "check they are that model (their config.json must match it)",
                                       s.model_id, plan.model.name));
  }
  bool random_init = false;
  if (s.model_id.empty() && fs::exists(model)) {
    // a local config.json (or a directory holding one): the trainer builds it, with random weights, from the source dir
    const fs::path file = fs::is_directory(model) ? fs::path(model) / "config.json" : fs::path(model);
    const std::string stem = file.filename() == "config.json" ? fs::absolute(file).parent_path().filename().string() : file.stem().string();
    r.model_file = file.string();
    r.model_in_source_dir = "models/" + name_stem(stem, 60) + ".json";
    model = r.model_in_source_dir;
    random_init = true;
    r.warnings.push_back(fmt::format("MODEL {} is a local config.json: the trainer builds it with random weights (model_init random) "
                                     "from {} in the source dir{}; for pretrained weights pass --model-id ORG/NAME or an s3:// prefix",
                                     plan.p.model, model, s.source_dir.empty() ? " (put it there, or use --source-dir)" : ""));
  }

  // ---- the trainer's hyperparameters: the plan per the training contract, then the contract-only keys
  bwplan::plan sent = plan.p;
  sent.model = model;
  sent.target.gpu = plan.gpu.id;
  sent.target.power_limit_w = 0;  // planning only: the job runs at SageMaker's own limit and kernel (warned, emit_sagemaker)
  sent.target.attention_kernel.clear();
  ojson hp = io::plan_hyperparameters(contract, sent);
  hp["max_steps"] = r.steps;
  std::string data = "synthetic";
  if (channels.contains("train")) data = "train";
  else if (!channels.empty()) data = channels.begin().key();
  hp["data"] = data;
  if (channels.empty())
    r.warnings.push_back("no --train-s3: the job has no input channel, so the trainer trains on synthetic random tokens (data synthetic); "
                         "give --train-s3 s3://... with a packed token dataset (docs/training-contract.md section 6)");
  if (random_init) hp["model_init"] = "random";
  for (const auto& kv : s.hyperparameters) {
    auto [k, v] = key_value(kv, "--hyperparameter");
    if (starts_with(k, "sagemaker_")) throw invalid_request("--hyperparameter: keys starting with sagemaker_ are reserved by the SDK, got '" + k + "'");
    const io::contract_field* f = contract.by_hyperparameter(k);
    if (f == nullptr) {
      std::string msg = fmt::format("--hyperparameter {}: unknown to the reference trainer (training contract version {}); it takes ",
                                    k, contract.version);
      std::string keys;
      for (const auto& x : contract.fields)
        if (x.kind == "contract" && x.hyperparameter && x.key != "contract_version") keys += (keys.empty() ? "" : ", ") + *x.hyperparameter;
      if (auto m = closest_match(k, contract.hyperparameter_names())) msg = fmt::format("--hyperparameter {}: unknown (did you mean '{}'?); the trainer takes ", k, *m);
      throw invalid_request(msg + keys);
    }
    if (f->kind == "plan" || f->key == "contract_version")
      throw invalid_request(fmt::format("--hyperparameter {}: set by the plan (its flag or plan file), so that the job runs the plan that was "
                                        "estimated", k));
    if (f->key == "max_steps") throw invalid_request("--hyperparameter max_steps: use --max-steps (it also sizes MaxRuntimeInSeconds)");
    try {
      hp[k] = io::decode_hyperparameter(*f, v);
    } catch (const plan_error& e) {
      throw invalid_request("--" + e.violation().message);  // "--hyperparameter 'seed': -1 is below the minimum 0"
    }
  }
  try {
    io::validate_hyperparameters(contract, hp);
  } catch (const plan_error& e) {
    throw plan_error(e.violation());
  }
  r.hyperparameters = hp;
  if (hp.value("model_init", std::string("pretrained")) != "random") {
    const std::string key = lower(model);
    const std::string hub = contract.presets.count(key) ? contract.presets.at(key) : model;
    bool token = false;
    for (const auto& kv : s.env) token = token || starts_with(kv, "HF_TOKEN=");
    if (!token && (starts_with(hub, "meta-llama/") || starts_with(hub, "google/gemma")))
      r.warnings.push_back(fmt::format("{} is gated on the Hugging Face Hub: pass --env HF_TOKEN=... (a token whose account accepted its "
                                       "license), or give an s3:// copy with --model-id",
                                       hub));
  }

  // ---- distribution (SDK v2 `distribution=`) and the reserved hyperparameters it adds
  r.distribution = {{"torch_distributed", {{"enabled", true}}}};
  ojson all = hp;
  all["sagemaker_submit_directory"] = r.source_s3;
  all["sagemaker_program"] = s.entry_point;
  all["sagemaker_container_log_level"] = 20;
  all["sagemaker_job_name"] = r.job_name;
  all["sagemaker_region"] = r.region;
  all["sagemaker_torch_distributed_enabled"] = true;
  all["sagemaker_instance_type"] = inst.id;

  // ---- volume: the model download (bf16), two retained checkpoints of this node's share of the
  // optimizer state (fp32 master + Adam m, v = 12 B/param; 6 with bf16 master), and 50 GB for data and logs
  std::int64_t volume = s.volume_gb;
  if (volume <= 0) {
    const double p = static_cast<double>(count_parameters(plan.model).total());
    const double state = c.master == master_weights::fp32 ? 12 : 6;
    // this node's share of the state: its GPUs over the GPUs one copy is spread over (shard group x tp)
    const double share = std::min(1.0, static_cast<double>(c.gpus_per_node) / (c.shard_size() * c.tp));
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
  // the caching allocator's setting the plan was estimated with (the trainer checks it against its hyperparameter)
  if (c.expandable_segments) env["PYTORCH_CUDA_ALLOC_CONF"] = "expandable_segments:True";
  std::set<std::string> env_given;
  for (const auto& kv : s.env) {
    auto [k, v] = key_value(kv, "--env");
    if (!env_given.insert(k).second)  // (the last value won without a word: a helper's audit)
      throw invalid_request(fmt::format("--env {}: given twice; give each variable once", k));
    if (k == "PYTORCH_CUDA_ALLOC_CONF" || k == "PYTORCH_ALLOC_CONF") {  // (torch 2.9+ reads the second first: a review)
      // (a review: backend:cudaMallocAsync and max_split_size_mb passed; io::alloc_conf_problem)
      if (const std::string why = io::alloc_conf_problem(v, c.expandable_segments); !why.empty())
        throw invalid_request(fmt::format("--env {}={}: {}; --expandable-segments sets the allocator setting the plan is estimated "
                                          "and run with",
                                          k, v, why));
    }
    env[k] = v;
  }

  // ---- the request, in the order of the API reference
  ojson q;
  q["TrainingJobName"] = r.job_name;
  q["RoleArn"] = role;
  // the trainer prints "step 10/1000 loss 2.3456 (1.234 s)" on rank 0 every 10 steps (apps/train/bwtrain/engine.py)
  q["AlgorithmSpecification"] = {
      {"TrainingImage", image},
      {"TrainingInputMode", s.input_mode},
      {"EnableSageMakerMetricsTimeSeries", true},
      {"MetricDefinitions",
       {{{"Name", "train:loss"}, {"Regex", "step [0-9]+/[0-9]+ loss ([0-9.]+(?:[eE][-+]?[0-9]+)?)"}},
        {{"Name", "train:step_seconds"}, {"Regex", "step [0-9]+/[0-9]+ loss [^ ]+ \\(([0-9.]+) s\\)"}}}}};
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
    if (k == "bwplan:version" || k == "bwplan:contract" || k == "bwplan:plan")
      throw invalid_request("--tag " + k + ": set by bwplan (the version, contract and plan of the job); use another key");
    // tag keys are unique per resource (SageMaker refuses a request that repeats one; bwplan sent both: a helper's audit)
    for (const auto& t : tags)
      if (t["Key"] == k) throw invalid_request("--tag " + k + ": given twice; tag keys must be unique");
    tags.push_back({{"Key", k}, {"Value", v}});
  }
  tags.push_back({{"Key", "bwplan:version"}, {"Value", version_string}});
  tags.push_back({{"Key", "bwplan:contract"}, {"Value", std::to_string(contract.version)}});
  tags.push_back({{"Key", "bwplan:plan"},
                  {"Value", tag_safe(fmt::format("{} {} mbs={} seq={} accum={} ac={} shard={} tp={} cp={} world={}", plan.model.name,
                                                 to_string(c.format), c.micro_batch, c.seq_len, c.grad_accum, to_string(c.ac),
                                                 to_string(c.shard), c.tp, c.cp, c.world_size))}});
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
  if (!s.training_plan_arn.empty())
    r.notes.push_back("reserved capacity: SageMaker starts terminating the plan's instances 30 minutes before it ends; the trainer reads "
                      "SAGEMAKER_CURRENT_CAPACITY_BLOCK_EXPIRATION_TIMESTAMP, saves a checkpoint to /opt/ml/checkpoints before then and "
                      "exits, and a new job with the same CheckpointConfig.S3Uri resumes from it");
  // SageMaker's training price when the catalog (or --hardware) has one; recommend's --price-per-hour over both
  r.price_per_hour = s.price_per_hour >= 0 ? s.price_per_hour : inst.price_per_hour();
  r.price_label = s.price_per_hour >= 0 ? "--price-per-hour" : inst.price_source();
  if (r.price_per_hour > 0)
    r.notes.push_back(fmt::format("price: {:.2f} USD per instance-hour ({}): about {:.0f} USD for "
                                  "the {} steps on {} instance(s), at most {:.0f} USD at MaxRuntimeInSeconds",
                                  r.price_per_hour, r.price_label, r.estimated_s / 3600 * nodes * r.price_per_hour, r.steps, nodes,
                                  static_cast<double>(runtime) / 3600 * nodes * r.price_per_hour));
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
  // SDK v3 installs requirements.txt only when SourceCode names it (shared/reference/sagemaker-run.md 2.4)
  m["source_code"] = {{"source_dir", r.source_s3}, {"entry_script", r.entry_point}, {"requirements", "requirements.txt"}};
  m["distributed"] = {{"Torchrun", {{"process_count_per_node", nullptr}}}};
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
