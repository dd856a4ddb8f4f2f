// SageMaker flags and output, shared by `bwplan sagemaker` and `bwplan recommend --emit`.
// SPDX-License-Identifier: Apache-2.0
#pragma once

#include "cli.hpp"
#include "sagemaker.hpp"

#include <memory>
#include <string>

namespace bwplan::cli {

/// Registers the SageMaker flags (--role-arn, --output-s3, --train-s3, --checkpoint-s3, --region,
/// --framework-version, --training-plan-arn, --job-name, --image-uri, --max-runtime, --tag, ...) on `group`.
void add_sagemaker_options(CLI::App* group, const std::shared_ptr<sagemaker::job_settings>& s);

/// Path of the bundled service-model subset: <configs>/sagemaker/createtrainingjob-shapes.json.
[[nodiscard]] std::filesystem::path sagemaker_shapes_path(const context& ctx);

/// Builds the request for `plan`, validates it against the service model and prints it on ctx.out as
/// `format`: "request" (CreateTrainingJob JSON), "estimator" (SDK v2) or "modeltrainer" (SDK v3).
/// Throws invalid_request naming the member path, the rule and the flag behind it when SageMaker would reject it.
int emit_sagemaker(const context& ctx, const sagemaker::job_settings& s, const std::string& format,
                   const sagemaker::plan_view& plan);

}  // namespace bwplan::cli
