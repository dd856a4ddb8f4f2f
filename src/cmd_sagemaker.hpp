// SageMaker flags and output, shared by `bwplan sagemaker` and `bwplan recommend --emit`.
// SPDX-License-Identifier: Apache-2.0
#pragma once

#include "cli.hpp"
#include "sagemaker.hpp"

#include <filesystem>
#include <memory>
#include <string>
#include <vector>

namespace bwplan::cli {

/// Registers the SageMaker flags (--role-arn, --output-s3, --train-s3, --checkpoint-s3, --region,
/// --framework-version, --training-plan-arn, --job-name, --image-uri, --max-runtime, --tag, ...) on `group`.
void add_sagemaker_options(CLI::App* group, const std::shared_ptr<sagemaker::job_settings>& s);

/// Path of the bundled service-model subset: <configs>/sagemaker/createtrainingjob-shapes.json.
[[nodiscard]] std::filesystem::path sagemaker_shapes_path(const context& ctx);

/// Writes the job's source dir `dir`: the reference trainer from ctx.trainer_dir() (train.py, bwtrain/*.py,
/// contract.py, training-contract.json, requirements.txt), the bundled preset configs and a local model config
/// (models/), and the plan `p` as plan.json. Returns what it wrote. Throws invalid_request naming --source-dir.
std::vector<std::string> write_source_dir(const context& ctx, const std::filesystem::path& dir, const sagemaker::job_request& r,
                                          const plan& p);

/// Builds the request for `plan`, validates it against the service model and prints it on ctx.out as
/// `format`: "request" (CreateTrainingJob JSON), "estimator" (SDK v2) or "modeltrainer" (SDK v3).
/// Throws invalid_request naming the member path, the rule and the flag behind it when SageMaker would reject it,
/// and the plan field's flag and the reason when the reference trainer cannot run the plan. With
/// `s.source_dir`, writes the source dir (write_source_dir) and says how to upload it.
///
/// `source_job`: the CreateTrainingJob request `--plan` read the plan from, if it was one. Only its plan is read
/// (docs/sagemaker.md#read-back); every other member the new request gives another value (role, output path, stopping
/// condition, the hyperparameters outside the plan, ...) is named in one warning, so none is lost silently.
int emit_sagemaker(const context& ctx, const sagemaker::job_settings& s, const std::string& format,
                   const sagemaker::plan_view& plan, const struct probe_job* probe = nullptr,
                   const nlohmann::json* source_job = nullptr);

/// A probe job (`bwplan sagemaker --probe`, docs/calibration.md#probe): the plans the reference trainer runs for
/// `steps` steps each (train.py --probe probe.json) and their estimated step times (for MaxRuntimeInSeconds).
struct probe_job {
  nlohmann::ordered_json plans = nlohmann::ordered_json::array();  ///< plan-file objects, as probe.json holds them
  std::vector<std::string> labels;                                 ///< what each plan varies
  std::vector<double> step_s;                                      ///< estimated seconds per step of each plan
  int steps = 5;                                                   ///< measure_warmup 2 + measure_steps 3
};

/// The probe plans of `base` (one node): the plan itself, with full activation checkpointing, with twice (or half)
/// the micro-batch and with half the sequence, each only where it fits (estimate with `k`), at most four.
[[nodiscard]] probe_job probe_plans(const plan& base, const model_spec& m, const resolved_target& t, const calibration_constants& k);

/// MaxRuntimeInSeconds of a probe: 15 minutes for the container, the pip install and the first model build, then
/// per plan 3 minutes (build, initialisation, compilation) plus its steps at 3× the estimated step time; rounded up
/// to whole 5 minutes.
[[nodiscard]] std::int64_t probe_runtime_s(const probe_job& p);

}  // namespace bwplan::cli
