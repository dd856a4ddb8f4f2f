// SageMaker AI payloads from a plan: the CreateTrainingJob request body, the SageMaker Python SDK v2
// `PyTorch(...)` arguments and the SDK v3 `ModelTrainer` form, plus the checks SageMaker would apply.
// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <bwplan/bwplan.hpp>
#include <bwplan/io/contract.hpp>
#include <bwplan/io/service_model.hpp>
#include <bwplan/plan.hpp>

#include <nlohmann/json.hpp>

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace bwplan::sagemaker {

/// A PyTorch training Deep Learning Container for SageMaker (repository `pytorch-training` up to 2.10,
/// `pytorch` on Amazon Linux 2023 from 2.11). Source: aws/deep-learning-containers
/// `docs/src/data/pytorch-training/*.yml` and `docs/src/data/pytorch/*.yml`.
/// @sa docs/sagemaker.md#image
struct dlc_image {
  std::string version;     ///< full PyTorch version, e.g. "2.10.0"
  std::string repository;  ///< ECR repository
  std::string tag;         ///< image tag
  std::string python;      ///< e.g. "py313"
  double cuda = 0;         ///< CUDA toolkit of the image, e.g. 13.0
};

/// The PyTorch training images bwplan knows, oldest first.
[[nodiscard]] const std::vector<dlc_image>& pytorch_images();
/// The image for `version` ("2.10" or "2.10.0"). Throws invalid_request naming the known versions.
[[nodiscard]] const dlc_image& find_image(std::string_view version);
/// The SageMaker model parallelism v2 image: the newest in the AWS docs, PyTorch 2.5.1, SMP 2.8.0, CUDA 12.4
/// (https://docs.aws.amazon.com/sagemaker/latest/dg/distributed-model-parallel-support-v2.html).
[[nodiscard]] const dlc_image& smp_image();
/// ECR registry host of the DLC account for `region`, e.g. "763104351884.dkr.ecr.us-west-2.amazonaws.com".
/// `smp` selects the SMP account (658645717510, in the 17 regions the SDK lists). Throws invalid_request.
[[nodiscard]] std::string registry(std::string_view region, bool smp = false);
/// Full image URI of `img` in `region`.
[[nodiscard]] std::string image_uri(const dlc_image& img, std::string_view region, bool smp = false);
/// Oldest CUDA toolkit that can build for `gpu`: 11.8 for Hopper (sm_90), 12.8 for B200/GB200 (sm_100),
/// 12.9 for B300/GB300 (sm_103). Sources: NVIDIA CUDA 11.8, 12.8 and 12.9 release notes.
[[nodiscard]] double min_cuda(const gpu_spec& gpu);

/// Largest --train-tokens (as `--tokens`: 10^18) and --runtime-margin accepted.
inline constexpr std::int64_t max_train_tokens = 1'000'000'000'000'000'000;
inline constexpr double max_runtime_margin = 100;
/// Largest --max-steps accepted.
inline constexpr std::int64_t max_steps_limit = 1'000'000'000'000;
/// The oldest PyTorch image the reference trainer runs on: apps/train/requirements.txt pins torchao 0.18.0, whose
/// extensions need torch >= 2.11, and the trainer's library calls were checked against torch 2.11.0.
inline constexpr const char* trainer_min_framework = "2.11";

/// Everything the user chose that is not part of the plan (the `bwplan sagemaker` flags).
struct job_settings {
  std::string role_arn;            ///< --role-arn (empty: the AWS documentation placeholder, with a warning)
  std::string output_s3;           ///< --output-s3 (empty: placeholder bucket, with a warning)
  std::string checkpoint_s3;       ///< --checkpoint-s3 (empty: <output>/<job>/checkpoints/)
  std::string source_s3;           ///< --source-s3: sourcedir.tar.gz (empty: s3://<output bucket>/<job>/source/sourcedir.tar.gz)
  std::string source_dir;          ///< --source-dir: the CLI writes the trainer and the plan there (entry point train.py)
  std::string entry_point = "train.py";  ///< --entry-point, the script in sourcedir.tar.gz
  std::string region;                    ///< --region (empty: the training plan's region, else us-west-2)
  std::string framework_version = trainer_min_framework;  ///< --framework-version (PyTorch), 2.11 or newer
  std::string image_uri;           ///< --image-uri, overrides the DLC lookup
  std::string job_name;            ///< --job-name, used verbatim
  std::string base_job_name;       ///< --base-job-name, gets the SDK timestamp suffix
  std::string training_plan_arn;   ///< --training-plan-arn
  std::string input_mode = "File"; ///< --input-mode (TrainingInputMode)
  std::string distribution = "torch_distributed";  ///< --distribution: torch_distributed (smp is refused: see build_request)
  std::string model_id;            ///< --model-id: the `model` hyperparameter (hub id, s3:// prefix, preset; default: the plan's model)
  std::vector<std::string> channels;         ///< --train-s3 [NAME=]URI
  std::vector<std::string> tags;             ///< --tag KEY=VALUE
  std::vector<std::string> env;              ///< --env KEY=VALUE
  std::vector<std::string> hyperparameters;  ///< --hyperparameter KEY=VALUE: contract-only keys (learning_rate, seed, ...), typed by the contract
  std::vector<std::string> subnets;          ///< --subnet
  std::vector<std::string> security_groups;  ///< --security-group
  std::string max_runtime;         ///< --max-runtime: seconds, or with s/m/h/d suffix (empty: from the estimate)
  std::int64_t max_pending_s = 0;  ///< --max-pending (training plans), 0: omitted
  std::int64_t volume_gb = 0;      ///< --volume-gb, 0: from the model size
  std::int64_t keep_alive_s = 0;   ///< --keep-alive (warm pool), 0: omitted
  std::int64_t max_steps = 0;      ///< --max-steps, 0: from --train-tokens or 1000
  std::int64_t train_tokens = 0;   ///< --train-tokens, total tokens to train on
  int retries = 0;                 ///< --retries (RetryStrategy), 0: omitted
  double runtime_margin = 1.5;     ///< --runtime-margin, multiplies the estimated training time
  double price_per_hour = -1;      ///< recommend's --price-per-hour, USD per instance-hour (< 0: the catalog's, price_per_hour())
};

/// The plan the payload launches.
struct plan_view {
  const plan& p;                          ///< the plan as evaluated (world size, sharding and accumulation resolved)
  const model_spec& model;
  const gpu_spec& gpu;
  const instance_spec& instance;
  const throughput_estimate& throughput;
  const io::training_contract& contract;  ///< how the plan reaches the trainer
  [[nodiscard]] const training_config& config() const noexcept { return p.training; }
};

/// A built request and what it was built from.
struct job_request {
  nlohmann::ordered_json request;          ///< CreateTrainingJob body, SDK v2 script mode
  nlohmann::ordered_json hyperparameters;  ///< the trainer's hyperparameters (training contract), typed (before the SDK's encoding)
  nlohmann::ordered_json distribution;     ///< the SDK `distribution` argument
  nlohmann::ordered_json channels;         ///< {channel: S3 URI}
  std::string job_name;                    ///< TrainingJobName
  std::string base_job_name;               ///< name without the timestamp
  std::string source_s3;                   ///< sourcedir.tar.gz
  std::string entry_point;                 ///< script in sourcedir.tar.gz
  std::string region;                      ///< the job's region (--region, or the training plan's)
  std::string model_file;                  ///< a local config.json the trainer reads from the source dir (models/...), or ""
  std::string model_in_source_dir;         ///< its path inside the source dir (the `model` hyperparameter)
  std::int64_t steps = 0;                  ///< optimizer steps the run is sized for
  double estimated_s = 0;                  ///< steps × step time, seconds
  double price_per_hour = 0;               ///< the catalog's USD per instance-hour (0: none)
  std::string price_label;                 ///< which price that is (the catalog's price_note: EC2 on-demand, ...)
  std::vector<std::string> warnings;       ///< things the user should know (placeholders, prose-only limits)
  std::vector<std::string> notes;          ///< things worth knowing that need no action (reserved capacity, price)
};

/// The region of an ARN ("arn:aws:sagemaker:us-east-1:111122223333:training-plan/x" → "us-east-1"), or "".
[[nodiscard]] std::string arn_region(std::string_view arn);

/// Why the reference trainer (training contract `plan.contract`) cannot run `plan`, as violations of the plan
/// field to change: the contract's refusals (io::trainer_refusals), a mixture-of-experts model (T-model), and
/// every hyperparameter value outside the contract (a GPU it does not know, a bf16_layers form it cannot
/// read). Empty: bwplan may emit the job.
[[nodiscard]] std::vector<plan_violation> launch_violations(const plan_view& plan);

/// Builds the CreateTrainingJob request for `plan` (see docs/sagemaker.md#mapping for every field): the
/// reference trainer (train.py) with the plan as its hyperparameters, per the training contract.
/// `now` stamps the job name. Throws plan_error (field = the plan key) when the trainer cannot run the plan
/// (launch_violations), and invalid_request for settings that cannot be turned into a request (malformed
/// KEY=VALUE, a --hyperparameter outside the contract, unknown or too old framework version, a region that
/// disagrees with the training plan's, an image whose CUDA cannot run the GPU, --distribution smp). It does
/// not validate against the service model: call `check_request`.
[[nodiscard]] job_request build_request(const plan_view& plan, const job_settings& s,
                                        std::chrono::system_clock::time_point now = std::chrono::system_clock::now());

/// The SDK v2 `sagemaker.pytorch.PyTorch(...)` keyword arguments and the `fit(...)` arguments that send `r`.
[[nodiscard]] nlohmann::ordered_json to_estimator(const job_request& r);
/// The SDK v3 `ModelTrainer(...)` arguments, builder calls and `train(...)` arguments for `r`.
[[nodiscard]] nlohmann::ordered_json to_modeltrainer(const job_request& r);

/// Every rule of the service model (`model`, operation CreateTrainingJob) that `request` breaks, followed by the
/// documented cross-field rules the model cannot express (TrainingImage xor AlgorithmName, InstanceCount ≥ 1,
/// MaxRuntimeInSeconds ≤ 28 days, MaxWaitTimeInSeconds only with Spot and ≥ MaxRuntimeInSeconds,
/// InstanceGroups xor InstanceType).
[[nodiscard]] std::vector<io::shape_violation> request_violations(const io::service_model& model, const nlohmann::json& request);
/// Throws invalid_request "SageMaker would reject the CreateTrainingJob request: <path>: <rule>" for the first violation.
void check_request(const io::service_model& model, const nlohmann::json& request);

/// `json.dumps(v)` as Python's json module writes it (separators ", " and ": ", ASCII only, objects in their
/// insertion order as Python dicts): the SDK v2 encoding of hyperparameter values
/// (`EstimatorBase._json_encode_hyperparameters`).
[[nodiscard]] std::string sdk_json_encode(const nlohmann::ordered_json& v);
/// A job-name stem from free text: lower case, runs of other characters become one '-', at most `max` characters.
[[nodiscard]] std::string name_stem(std::string_view text, std::size_t max);
/// `base` + "-YYYY-MM-DD-HH-MM-SS-mmm" (UTC), the SDK's `name_from_base`, with `base` cut to keep 63 characters.
[[nodiscard]] std::string timestamped_name(std::string_view base, std::chrono::system_clock::time_point now);
/// Seconds from "3600", "90m", "36h", "2d" or "45s". Throws invalid_request.
[[nodiscard]] std::int64_t parse_duration(std::string_view text, std::string_view flag);

}  // namespace bwplan::sagemaker
