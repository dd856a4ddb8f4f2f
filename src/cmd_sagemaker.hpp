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
int emit_sagemaker(const context& ctx, const sagemaker::job_settings& s, const std::string& format,
                   const sagemaker::plan_view& plan);

}  // namespace bwplan::cli
