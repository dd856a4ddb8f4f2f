// SageMaker payloads: the service-model validator on mutated requests, the request builder, the SDK forms,
// and the CLI (bwplan sagemaker, bwplan recommend --emit, the README commands).
#include "cmd_sagemaker.hpp"
#include "test_util.hpp"

#include <bwplan/io/service_model.hpp>

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include <fstream>
#include <regex>
#include <set>
#include <sstream>

using namespace bwplan;
using test::run_cli;
using nlohmann::json;

namespace {

cli::context test_context() {
  static std::ostringstream sink;
  return cli::context{sink, sink, {}, {}};
}

/// The bundled shapes (configs/sagemaker), loaded once.
const io::service_model& bundled() {
  static const io::service_model m = io::service_model::load(cli::sagemaker_shapes_path(test_context()));
  return m;
}

/// The minimal valid request of ../shared/reference/sagemaker.md §7 (2 x ml.p6-b200.48xlarge, torchrun + FSDP).
json valid_request() {
  return json::parse(R"json({
    "TrainingJobName": "llama31-8b-fsdp-p6b200-2026-08-21-12-00-00-000",
    "RoleArn": "arn:aws:iam::111122223333:role/SageMakerTrainingExecutionRole",
    "AlgorithmSpecification": {
      "TrainingImage": "763104351884.dkr.ecr.us-west-2.amazonaws.com/pytorch-training:2.10.0-gpu-py313-cu130-ubuntu22.04-sagemaker",
      "TrainingInputMode": "File", "EnableSageMakerMetricsTimeSeries": true,
      "MetricDefinitions": [{"Name": "train:loss", "Regex": "'loss': ([0-9\\.]+)"}]},
    "HyperParameters": {"model_id": "\"meta-llama/Llama-3.1-8B\"", "max_steps": "1000", "bf16": "true"},
    "InputDataConfig": [{"ChannelName": "train", "DataSource": {"S3DataSource": {"S3DataType": "S3Prefix",
      "S3Uri": "s3://amzn-s3-demo-bucket/datasets/llama31-8b/train/", "S3DataDistributionType": "FullyReplicated"}}}],
    "OutputDataConfig": {"S3OutputPath": "s3://amzn-s3-demo-bucket/llama31-8b-fsdp/output/", "CompressionType": "NONE"},
    "ResourceConfig": {"InstanceType": "ml.p6-b200.48xlarge", "InstanceCount": 2, "VolumeSizeInGB": 500},
    "StoppingCondition": {"MaxRuntimeInSeconds": 172800},
    "CheckpointConfig": {"S3Uri": "s3://amzn-s3-demo-bucket/llama31-8b-fsdp/checkpoints/", "LocalPath": "/opt/ml/checkpoints"},
    "Environment": {"NCCL_DEBUG": "WARN", "FI_PROVIDER": "efa"},
    "RetryStrategy": {"MaximumRetryAttempts": 1},
    "Tags": [{"Key": "project", "Value": "bwplan"}]
  })json");
}

/// The violations of `request` (schema and cross-field rules), as "path: rule" lines.
std::vector<std::string> problems(const json& request) {
  std::vector<std::string> out;
  for (const auto& v : sagemaker::request_violations(bundled(), request)) out.push_back(v.to_string());
  return out;
}

/// Mutates a copy of the valid request at JSON pointer `ptr` and returns the one violation it causes.
std::string one_problem(const std::string& ptr, const json& value) {
  json r = valid_request();
  r[json::json_pointer(ptr)] = value;
  const auto p = problems(r);
  INFO(ptr << " = " << value.dump());
  REQUIRE(p.size() == 1);
  return p.front();
}

std::string one_problem_without(const std::string& parent, const std::string& member) {
  json r = valid_request();
  r[json::json_pointer(parent)].erase(member);
  const auto p = problems(r);
  REQUIRE(p.size() == 1);
  return p.front();
}

int lines(const std::string& s) { return static_cast<int>(std::count(s.begin(), s.end(), '\n')); }

const std::vector<std::string> credentials{"--role-arn", "arn:aws:iam::111122223333:role/SageMakerTrainingExecutionRole",
                                           "--output-s3", "s3://amzn-s3-demo-bucket/bwplan/"};

std::vector<std::string> with(std::vector<std::string> a, const std::vector<std::string>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

}  // namespace

TEST_CASE("sagemaker: the bundled shapes are the verbatim copy of ../shared", "[sagemaker]") {
  if (!test::have_shared()) return;
  auto slurp = [](const std::filesystem::path& p) {
    std::ifstream in(p, std::ios::binary);
    REQUIRE(in);
    return std::string(std::istreambuf_iterator<char>(in), {});
  };
  CHECK(slurp(cli::sagemaker_shapes_path(test_context())) ==
        slurp(test::shared_dir() / "sagemaker" / "createtrainingjob-shapes.json"));
  CHECK(bundled().input_shape("CreateTrainingJob") == "CreateTrainingJobRequest");
}

TEST_CASE("sagemaker: the reference request passes the validator", "[sagemaker]") {
  CHECK(problems(valid_request()).empty());
}

TEST_CASE("sagemaker: mutated requests break exactly the rule the model states", "[sagemaker]") {
  SECTION("job name: pattern and maximum length") {
    CHECK(one_problem("/TrainingJobName", "bad_name") ==
          "TrainingJobName: value 'bad_name' does not match the pattern [a-zA-Z0-9](-*[a-zA-Z0-9]){0,62} of TrainingJobName");
    CHECK(one_problem("/TrainingJobName", "-leading") == "TrainingJobName: value '-leading' does not match the pattern "
                                                         "[a-zA-Z0-9](-*[a-zA-Z0-9]){0,62} of TrainingJobName");
    CHECK(one_problem("/TrainingJobName", std::string(64, 'a')) == "TrainingJobName: value length 64 is above the maximum 63 of TrainingJobName");
    CHECK(problems([] { json r = valid_request(); r["TrainingJobName"] = std::string(63, 'a'); return r; }()).empty());
  }
  SECTION("role ARN: minimum length, then pattern") {
    CHECK(one_problem("/RoleArn", "arn:x") == "RoleArn: value length 5 is below the minimum 20 of RoleArn");
    CHECK_THAT(one_problem("/RoleArn", "arn:aws:iam::12345:role/Training"),
               Catch::StartsWith("RoleArn: value 'arn:aws:iam::12345:role/Training' does not match the pattern arn:aws[a-z\\-]*:iam::\\d{12}:role/"));
  }
  SECTION("S3 URIs") {
    CHECK_THAT(one_problem("/OutputDataConfig/S3OutputPath", "amzn-s3-demo-bucket/out"),
               Catch::StartsWith("OutputDataConfig.S3OutputPath: value 'amzn-s3-demo-bucket/out' does not match the pattern (https|s3)://"));
    CHECK_THAT(one_problem("/InputDataConfig/0/DataSource/S3DataSource/S3Uri", "gs://bucket/x"),
               Catch::StartsWith("InputDataConfig[0].DataSource.S3DataSource.S3Uri: value 'gs://bucket/x' does not match"));
    CHECK(one_problem("/CheckpointConfig/S3Uri", "s3://b/" + std::string(1020, 'k')) ==
          "CheckpointConfig.S3Uri: value length 1027 is above the maximum 1024 of S3Uri");
  }
  SECTION("instance type the API does not know, instance count below 1 or not an integer") {
    CHECK(one_problem("/ResourceConfig/InstanceType", "ml.p6-b200.96xlarge") ==
          "ResourceConfig.InstanceType: value 'ml.p6-b200.96xlarge' is not one of the 151 values of TrainingInstanceType "
          "(closest: 'ml.p6-b200.48xlarge')");
    CHECK(one_problem("/ResourceConfig/InstanceCount", 0) == "ResourceConfig.InstanceCount: 0 instances: a training job needs at least 1");
    CHECK(one_problem("/ResourceConfig/InstanceCount", "2") ==
          "ResourceConfig.InstanceCount: expected an integer (TrainingInstanceCount), got string");
    CHECK(one_problem("/ResourceConfig/VolumeSizeInGB", 500.5) ==
          "ResourceConfig.VolumeSizeInGB: expected an integer (OptionalVolumeSizeInGB), got number");
    CHECK(one_problem("/ResourceConfig/KeepAlivePeriodInSeconds", 21601) ==
          "ResourceConfig.KeepAlivePeriodInSeconds: value 21601 is above the maximum 21600 of KeepAlivePeriodInSeconds");
  }
  SECTION("hyperparameters over the limits") {
    CHECK(one_problem("/HyperParameters/notes", std::string(2501, 'x')) ==
          "HyperParameters.notes: value length 2501 is above the maximum 2500 of HyperParameterValue");
    CHECK(one_problem("/HyperParameters/epochs", 3) == "HyperParameters.epochs: expected a string (HyperParameterValue), got integer");
    CHECK(one_problem("/HyperParameters/" + std::string(257, 'k'), "1") ==
          "HyperParameters." + std::string(257, 'k') + ": key length 257 is above the maximum 256 of HyperParameterKey");
    json many = valid_request();
    for (int i = 0; i < 98; ++i) many["HyperParameters"]["k" + std::to_string(i)] = "1";
    CHECK(problems(many) == std::vector<std::string>{"HyperParameters: map size 101 is above the maximum 100 of HyperParameters"});
  }
  SECTION("enums, ranges and list lengths") {
    CHECK(one_problem("/AlgorithmSpecification/TrainingInputMode", "Streaming") ==
          "AlgorithmSpecification.TrainingInputMode: value 'Streaming' is not one of the 3 values of TrainingInputMode");
    CHECK(one_problem("/RetryStrategy/MaximumRetryAttempts", 31) ==
          "RetryStrategy.MaximumRetryAttempts: value 31 is above the maximum 30 of MaximumRetryAttempts");
    CHECK(one_problem("/StoppingCondition/MaxRuntimeInSeconds", 0) ==
          "StoppingCondition.MaxRuntimeInSeconds: value 0 is below the minimum 1 of MaxRuntimeInSeconds");
    CHECK(one_problem("/StoppingCondition/MaxRuntimeInSeconds", 2419201) ==
          "StoppingCondition.MaxRuntimeInSeconds: value 2419201 is above SageMaker's documented maximum of 28 days (2419200 s)");
    CHECK(one_problem("/StoppingCondition/MaxPendingTimeInSeconds", 3600) ==
          "StoppingCondition.MaxPendingTimeInSeconds: value 3600 is below the minimum 7200 of MaxPendingTimeInSeconds");
    CHECK(one_problem("/InputDataConfig", json::array()) == "InputDataConfig: list length 0 is below the minimum 1 of InputDataConfig");
    CHECK(one_problem("/AlgorithmSpecification/EnableSageMakerMetricsTimeSeries", "true") ==
          "AlgorithmSpecification.EnableSageMakerMetricsTimeSeries: expected true or false (Boolean), got string");
  }
  SECTION("tags: Unicode letters pass, other symbols do not; at most 50") {
    CHECK(problems([] { json r = valid_request(); r["Tags"][0]["Key"] = "équipe:Ωmega 東京"; return r; }()).empty());
    CHECK(one_problem("/Tags/0/Key", "cost#center") ==
          "Tags[0].Key: value 'cost#center' does not match the pattern ([\\p{L}\\p{Z}\\p{N}_.:/=+\\-@]*) of TagKey");
    json many = valid_request();
    for (int i = 0; i < 50; ++i) many["Tags"].push_back({{"Key", "k" + std::to_string(i)}, {"Value", "v"}});
    CHECK(problems(many) == std::vector<std::string>{"Tags: list length 51 is above the maximum 50 of TagList"});
  }
  SECTION("environment keys") {
    CHECK(one_problem("/Environment/1BAD", "x") ==
          "Environment.1BAD: key '1BAD' does not match the pattern [a-zA-Z_][a-zA-Z0-9_]* of TrainingEnvironmentKey");
  }
  SECTION("training plan ARN") {
    CHECK(one_problem("/ResourceConfig/TrainingPlanArn", "arn:aws:sagemaker:us-west-2:111122223333:plan/x") ==
          "ResourceConfig.TrainingPlanArn: value length 47 is below the minimum 50 of TrainingPlanArn");
    CHECK_THAT(one_problem("/ResourceConfig/TrainingPlanArn", "arn:aws:sagemaker:us-west-2:111122223333:reserved-plan/p6-b200-2x"),
               Catch::Contains("does not match the pattern arn:aws[a-z\\-]*:sagemaker:[a-z0-9\\-]*:[0-9]{12}:training-plan/.*"));
    CHECK(problems([] { json r = valid_request(); r["ResourceConfig"]["TrainingPlanArn"] = "arn:aws:sagemaker:us-west-2:111122223333:training-plan/p6-b200-2x"; return r; }()).empty());
  }
  SECTION("required and unknown members") {
    CHECK(one_problem_without("", "RoleArn") == "RoleArn: required member of CreateTrainingJobRequest is missing");
    CHECK(one_problem_without("/InputDataConfig/0", "DataSource") ==
          "InputDataConfig[0].DataSource: required member of Channel is missing");
    CHECK(one_problem("/ResourceConfig/InstancePreferences", json::array()) == "ResourceConfig.InstancePreferences: unknown member of ResourceConfig");
    CHECK(one_problem("/ResourceConfig/InstanceCont", 2) ==
          "ResourceConfig.InstanceCont: unknown member of ResourceConfig (did you mean 'InstanceCount'?)");
    CHECK(one_problem("/VpcConfig", json{{"Subnets", {"subnet-0123abcd"}}}) == "VpcConfig.SecurityGroupIds: required member of VpcConfig is missing");
  }
  SECTION("cross-field rules and the translated lookbehind of ArnOrName") {
    json r = valid_request();
    r["AlgorithmSpecification"]["AlgorithmName"] = "my-algorithm";
    CHECK(problems(r) == std::vector<std::string>{"AlgorithmSpecification: TrainingImage and AlgorithmName exclude each other"});
    r["AlgorithmSpecification"].erase("TrainingImage");
    CHECK(problems(r).empty());
    r["AlgorithmSpecification"]["AlgorithmName"] = "my-algorithm-";  // (?<!-): no trailing hyphen
    CHECK(problems(r) == std::vector<std::string>{"AlgorithmSpecification.AlgorithmName: value 'my-algorithm-' does not match the pattern "
                                                  "(arn:aws[a-z\\-]*:sagemaker:[a-z0-9\\-]*:[0-9]{12}:[a-z\\-]*\\/)?([a-zA-Z0-9]([a-zA-Z0-9-]){0,62})(?<!-) of ArnOrName"});
    json w = valid_request();
    w["StoppingCondition"]["MaxWaitTimeInSeconds"] = 3600;
    CHECK(problems(w) == std::vector<std::string>{"StoppingCondition.MaxWaitTimeInSeconds: applies only with EnableManagedSpotTraining"});
    w["EnableManagedSpotTraining"] = true;
    CHECK(problems(w) == std::vector<std::string>{"StoppingCondition.MaxWaitTimeInSeconds: must be >= MaxRuntimeInSeconds"});
  }
  SECTION("every problem is reported, in the walk's order (nlohmann::json sorts keys)") {
    json r = valid_request();
    r["TrainingJobName"] = "a_b";
    r["ResourceConfig"]["InstanceType"] = "ml.bogus";
    r["Tags"][0]["Value"] = "semi;colon";
    const auto p = problems(r);
    REQUIRE(p.size() == 3);
    CHECK_THAT(p[0], Catch::StartsWith("ResourceConfig.InstanceType:"));
    CHECK_THAT(p[1], Catch::StartsWith("Tags[0].Value:"));
    CHECK_THAT(p[2], Catch::StartsWith("TrainingJobName:"));
  }
}

TEST_CASE("sagemaker: AWS patterns are translated for std::regex", "[sagemaker]") {
  const auto t = io::detail::translate_aws_pattern("([a-zA-Z0-9]([a-zA-Z0-9-]){0,62})(?<!-)");
  CHECK(t.forbid_trailing_hyphen);
  CHECK(t.ecma == L"([a-zA-Z0-9]([a-zA-Z0-9-]){0,62})");
  CHECK(io::detail::translate_aws_pattern("[\\p{Alnum}\\-]+").ecma == L"[a-zA-Z0-9\\-]+");
  CHECK(io::detail::translate_aws_pattern("\\p{N}+").ecma == L"[0-9\u00B2\u00B3\u00B9\u00BC-\u00BE]+");
  CHECK_THROWS_AS(io::detail::translate_aws_pattern("\\p{Lu}"), std::invalid_argument);
  CHECK_THROWS_AS(io::detail::translate_aws_pattern("(?<=x)a"), std::invalid_argument);
}

TEST_CASE("sagemaker: hyperparameter values use the SDK v2 encoding, json.dumps", "[sagemaker]") {
  // Values as Python prints json.dumps(v) (checked with CPython 3.11).
  CHECK(sagemaker::sdk_json_encode(3) == "3");
  CHECK(sagemaker::sdk_json_encode(2e-4) == "0.0002");
  CHECK(sagemaker::sdk_json_encode(1e-5) == "1e-05");
  CHECK(sagemaker::sdk_json_encode(100.0) == "100.0");
  CHECK(sagemaker::sdk_json_encode(true) == "true");
  CHECK(sagemaker::sdk_json_encode("abc") == "\"abc\"");
  CHECK(sagemaker::sdk_json_encode("caf\u00e9 \"q\"\n") == "\"caf\\u00e9 \\\"q\\\"\\n\"");
  CHECK(sagemaker::sdk_json_encode(json::parse(R"({"a": 1, "b": [true, null]})")) == "{\"a\": 1, \"b\": [true, null]}");
}

TEST_CASE("sagemaker: job names, durations, images", "[sagemaker]") {
  const std::chrono::system_clock::time_point t{std::chrono::milliseconds(1787313600123)};  // 2026-08-21 12:00:00.123 UTC
  CHECK(sagemaker::timestamped_name("llama-3-1-8b-p6-b200-2n", t) == "llama-3-1-8b-p6-b200-2n-2026-08-21-12-00-00-123");
  const std::string longest = sagemaker::timestamped_name(std::string(60, 'x') + "-yy", t);
  CHECK(longest.size() == 63);
  CHECK(longest == std::string(39, 'x') + "-2026-08-21-12-00-00-123");
  CHECK(sagemaker::name_stem("Llama-3.1-8B (my copy)", 39) == "llama-3-1-8b-my-copy");
  CHECK(sagemaker::parse_duration("3600", "--max-runtime") == 3600);
  CHECK(sagemaker::parse_duration("90m", "--max-runtime") == 5400);
  CHECK(sagemaker::parse_duration("1.5h", "--max-runtime") == 5400);
  CHECK(sagemaker::parse_duration("2d", "--max-runtime") == 172800);
  CHECK(sagemaker::parse_duration("2w", "--max-runtime") == 1209600);
  CHECK_THROWS_WITH(sagemaker::parse_duration("2y", "--max-runtime"), Catch::Contains("unknown unit"));
  CHECK_THROWS_WITH(sagemaker::parse_duration("-5", "--max-runtime"), Catch::Contains("expected a positive duration"));
  CHECK(sagemaker::image_uri(sagemaker::find_image("2.10"), "us-west-2") ==
        "763104351884.dkr.ecr.us-west-2.amazonaws.com/pytorch-training:2.10.0-gpu-py313-cu130-ubuntu22.04-sagemaker");
  CHECK(sagemaker::image_uri(sagemaker::find_image("2.13.0"), "eu-south-2") ==
        "503227376785.dkr.ecr.eu-south-2.amazonaws.com/pytorch:2.13.0-cu133-amzn2023-sagemaker");
  CHECK(sagemaker::image_uri(sagemaker::find_image("2.8"), "cn-north-1") ==
        "727897471807.dkr.ecr.cn-north-1.amazonaws.com.cn/pytorch-training:2.8.0-gpu-py312-cu129-ubuntu22.04-sagemaker");
  CHECK(sagemaker::image_uri(sagemaker::smp_image(), "us-east-1", true) ==
        "658645717510.dkr.ecr.us-east-1.amazonaws.com/smdistributed-modelparallel:2.5.1-gpu-py311-cu124");
  CHECK_THROWS_WITH(sagemaker::find_image("2.5"), Catch::Contains("known: 2.6, 2.7, 2.8, 2.9, 2.10, 2.11, 2.12, 2.13"));
  CHECK_THROWS_WITH(sagemaker::registry("us-west-9"), Catch::Contains("did you mean 'us-west-1'"));
  CHECK_THROWS_WITH(sagemaker::registry("ap-east-2", true), Catch::Contains("not published in ap-east-2"));
}

TEST_CASE("sagemaker: the request carries the plan", "[sagemaker]") {
  const auto ctx = test_context();
  const hardware_catalog cat = ctx.catalog();
  const model_spec m = ctx.model("Llama-3.1-8B");
  const instance_spec& inst = cat.instance("ml.p6-b200.48xlarge");
  const gpu_spec& gpu = cat.gpu(inst.gpu);
  training_config c;
  c.micro_batch = 2;
  c.seq_len = 8192;
  c.grad_accum = 16;
  c.world_size = 16;
  c.gpus_per_node = 8;
  c.ac = checkpointing::full(2);
  c.shard = sharding::full;
  const throughput_estimate te = estimate_throughput(m, c, gpu, &inst);
  sagemaker::job_settings s;
  s.model_arg = "Llama-3.1-8B";
  s.role_arn = "arn:aws:iam::111122223333:role/SageMakerTrainingExecutionRole";
  s.output_s3 = "s3://amzn-s3-demo-bucket/out/";
  s.channels = {"s3://amzn-s3-demo-bucket/data/train/", "validation=s3://amzn-s3-demo-bucket/data/val/"};
  s.tags = {"team=ml"};
  s.training_plan_arn = "arn:aws:sagemaker:us-west-2:111122223333:training-plan/p6-b200-2x";
  s.max_steps = 500;
  const std::chrono::system_clock::time_point now{std::chrono::milliseconds(1787313600000)};
  const auto r = sagemaker::build_request({m, c, gpu, inst, te}, s, now);
  const auto& q = r.request;
  CHECK(problems(q).empty());
  CHECK(r.warnings.empty());
  CHECK(q["TrainingJobName"] == "llama-3-1-8b-p6-b200-2n-2026-08-21-12-00-00-000");
  CHECK(q["ResourceConfig"]["InstanceType"] == "ml.p6-b200.48xlarge");
  CHECK(q["ResourceConfig"]["InstanceCount"] == 2);
  CHECK(q["ResourceConfig"]["TrainingPlanArn"] == s.training_plan_arn);
  // volume: 2 B/param model + 2 checkpoints of half the 12 B/param state + 50 GB = 16.06 + 96.36 + 50 = 162.4 → 200 GB
  CHECK(q["ResourceConfig"]["VolumeSizeInGB"] == 200);
  // runtime: 500 steps × step time × 1.5 + 1800 s, rounded up to 900 s
  const double need = 500 * te.step.raw() * 1.5 + 1800;
  CHECK(q["StoppingCondition"]["MaxRuntimeInSeconds"] == static_cast<std::int64_t>(std::ceil(need / 900) * 900));
  const auto& hp = q["HyperParameters"];
  CHECK(hp["per_device_train_batch_size"] == "2");
  CHECK(hp["gradient_accumulation_steps"] == "16");
  CHECK(hp["max_seq_length"] == "8192");
  CHECK(hp["max_steps"] == "500");
  CHECK(hp["gradient_checkpointing"] == "true");
  CHECK(hp["activation_checkpointing"] == "every-2");
  CHECK(hp["fsdp"] == "\"full_shard auto_wrap\"");
  CHECK(hp["fsdp_transformer_layer_cls_to_wrap"] == "\"LlamaDecoderLayer\"");
  CHECK(hp["model_id"] == "\"meta-llama/Llama-3.1-8B\"");
  CHECK(hp["sagemaker_job_name"] == "\"" + q["TrainingJobName"].get<std::string>() + "\"");
  CHECK(hp["sagemaker_submit_directory"] == "\"s3://amzn-s3-demo-bucket/llama-3-1-8b-p6-b200-2n-2026-08-21-12-00-00-000/source/sourcedir.tar.gz\"");
  CHECK(hp["sagemaker_torch_distributed_enabled"] == "true");
  CHECK(hp["sagemaker_instance_type"] == "\"ml.p6-b200.48xlarge\"");
  CHECK(q["InputDataConfig"].size() == 2);
  CHECK(q["InputDataConfig"][0]["ChannelName"] == "train");
  CHECK(q["InputDataConfig"][1]["DataSource"]["S3DataSource"]["S3Uri"] == "s3://amzn-s3-demo-bucket/data/val/");
  CHECK(q["CheckpointConfig"]["S3Uri"] == "s3://amzn-s3-demo-bucket/out/llama-3-1-8b-p6-b200-2n-2026-08-21-12-00-00-000/checkpoints/");
  CHECK(q["Environment"]["FI_PROVIDER"] == "efa");
  CHECK(q["Environment"]["FI_EFA_USE_DEVICE_RDMA"] == "1");
  CHECK(q["Tags"][0] == json{{"Key", "team"}, {"Value", "ml"}});
  CHECK(q["AlgorithmSpecification"]["TrainingImage"] ==
        "763104351884.dkr.ecr.us-west-2.amazonaws.com/pytorch-training:2.10.0-gpu-py313-cu130-ubuntu22.04-sagemaker");

  SECTION("the estimator form json.dumps to the same hyperparameters") {
    const auto e = sagemaker::to_estimator(r);
    CHECK(e["estimator"]["instance_count"] == 2);
    CHECK(e["estimator"]["training_plan"] == s.training_plan_arn);
    CHECK(e["estimator"]["distribution"] == json::parse(R"({"torch_distributed": {"enabled": true}})"));
    CHECK(e["fit"]["inputs"]["validation"] == "s3://amzn-s3-demo-bucket/data/val/");
    for (const auto& [k, v] : e["estimator"]["hyperparameters"].items()) CHECK(sagemaker::sdk_json_encode(v) == hp[k]);
    CHECK(e["estimator"]["hyperparameters"]["per_device_train_batch_size"] == 2);
  }
  SECTION("the ModelTrainer form") {
    const auto t = sagemaker::to_modeltrainer(r);
    CHECK(t["model_trainer"]["compute"]["instance_count"] == 2);
    CHECK(t["model_trainer"]["compute"]["training_plan_arn"] == s.training_plan_arn);
    CHECK(t["model_trainer"]["base_job_name"] == "llama-3-1-8b-p6-b200-2n");
    CHECK(t["model_trainer"]["tags"][0] == json{{"key", "team"}, {"value", "ml"}});
  }
  SECTION("SMP v2 only where its image supports the instance") {
    s.distribution = "smp";
    CHECK_THROWS_WITH(sagemaker::build_request({m, c, gpu, inst, te}, s, now),
                      Catch::Contains("the newest SMP v2 image (2.5.1-gpu-py311-cu124, CUDA 12.4) cannot run on ml.p6-b200.48xlarge"));
    const instance_spec& p5 = cat.instance("ml.p5en.48xlarge");
    const gpu_spec& h200 = cat.gpu(p5.gpu);
    const auto rs = sagemaker::build_request({m, c, h200, p5, estimate_throughput(m, c, h200, &p5)}, s, now);
    CHECK(problems(rs.request).empty());
    CHECK(rs.request["AlgorithmSpecification"]["TrainingImage"] ==
          "658645717510.dkr.ecr.us-west-2.amazonaws.com/smdistributed-modelparallel:2.5.1-gpu-py311-cu124");
    CHECK(rs.request["HyperParameters"]["mp_parameters"] ==
          "{\"hybrid_shard_degree\": 16, \"sm_activation_offloading\": false, \"tensor_parallel_degree\": 1, "
          "\"context_parallel_degree\": 1, \"expert_parallel_degree\": 1}");
    CHECK(rs.request["HyperParameters"]["sagemaker_distributed_dataparallel_enabled"] == "false");
  }
  SECTION("an image whose CUDA predates the GPU is refused") {
    s.framework_version = "2.6";
    CHECK_THROWS_WITH(sagemaker::build_request({m, c, gpu, inst, te}, s, now),
                      Catch::Contains("image 2.6.0-gpu-py312-cu126-ubuntu22.04-sagemaker has CUDA 12.6, but b200 on ml.p6-b200.48xlarge needs CUDA >= 12.8"));
    s.framework_version = "2.7";
    const instance_spec& b300 = cat.instance("ml.p6-b300.48xlarge");
    const gpu_spec& g300 = cat.gpu(b300.gpu);
    CHECK_THROWS_WITH(sagemaker::build_request({m, c, g300, b300, te}, s, now), Catch::Contains("needs CUDA >= 12.9"));
    CHECK_NOTHROW(sagemaker::build_request({m, c, gpu, inst, te}, s, now));
  }
}

TEST_CASE("cli: bwplan sagemaker prints a valid request, and bad inputs exit 2 with the member and the rule", "[sagemaker][cli]") {
  const std::vector<std::string> base = with({"sagemaker", "Llama-3.1-8B", "--instance", "ml.p6-b200.48xlarge", "--nodes", "2"}, credentials);
  SECTION("valid") {
    const auto r = run_cli(base);
    REQUIRE(r.code == 0);
    CHECK(r.err.empty());
    const auto q = json::parse(r.out);
    CHECK(problems(q).empty());
    CHECK(q["ResourceConfig"]["InstanceCount"] == 2);
    CHECK(std::regex_match(q["TrainingJobName"].get<std::string>(),
                           std::regex("llama-3-1-8b-p6-b200-2n-20[0-9]{2}-[0-9]{2}-[0-9]{2}-[0-9]{2}-[0-9]{2}-[0-9]{2}-[0-9]{3}")));
  }
  SECTION("--image-uri replaces the DLC lookup") {
    const auto r = run_cli(with(base, {"--image-uri", "111122223333.dkr.ecr.us-west-2.amazonaws.com/my-train:1", "--framework-version", "9.9"}));
    REQUIRE(r.code == 0);
    CHECK(json::parse(r.out)["AlgorithmSpecification"]["TrainingImage"] == "111122223333.dkr.ecr.us-west-2.amazonaws.com/my-train:1");
  }
  SECTION("placeholders are announced on stderr") {
    const auto r = run_cli({"sagemaker", "Llama-3.1-8B"});
    REQUIRE(r.code == 0);
    CHECK(lines(r.err) == 2);
    CHECK_THAT(r.err, Catch::Contains("no --role-arn: RoleArn is the placeholder") && Catch::Contains("no --output-s3"));
  }
  auto fails = [&](const std::vector<std::string>& extra, const std::string& expected, bool creds = true) {
    const auto r = run_cli(with(with({"sagemaker", "Llama-3.1-8B", "--instance", "ml.p6-b200.48xlarge"}, extra),
                                creds ? credentials : std::vector<std::string>{"--output-s3", "s3://amzn-s3-demo-bucket/bwplan/"}));
    INFO(r.err);
    CHECK(r.code == 2);
    CHECK(r.out.empty());
    CHECK(lines(r.err) == 1);
    CHECK_THAT(r.err, Catch::StartsWith("bwplan: error: ") && Catch::Contains(expected));
  };
  SECTION("bad job name") {
    fails({"--job-name", "llama_8b"}, "SageMaker would reject the CreateTrainingJob request: TrainingJobName: value 'llama_8b' does not match "
                                      "the pattern [a-zA-Z0-9](-*[a-zA-Z0-9]){0,62} of TrainingJobName (from --job-name/--base-job-name)");
    fails({"--job-name", std::string(64, 'j')}, "TrainingJobName: value length 64 is above the maximum 63 of TrainingJobName");
  }
  SECTION("bad role ARN") {
    fails({"--role-arn", "SageMakerRole"}, "RoleArn: value length 13 is below the minimum 20 of RoleArn (from --role-arn)", false);
  }
  SECTION("bad S3 URI") {
    fails({"--train-s3", "train=amzn-s3-demo-bucket/data"},
          "InputDataConfig[0].DataSource.S3DataSource.S3Uri: value 'amzn-s3-demo-bucket/data' does not match the pattern (https|s3)://([^/]+)/?(.*) "
          "of S3Uri (from --train-s3)");
  }
  SECTION("instance type the API does not know") {
    std::ofstream(std::filesystem::temp_directory_path() / "bwplan_sm_hw.json")
        << R"({"instances": [{"id": "ml.p6-b200.96xlarge", "gpu": "b200", "gpus_per_node": 8, "efa_gbit_per_s": 3200, "price_per_hour_usd": 1}]})";
    const auto r = run_cli({"--hardware", (std::filesystem::temp_directory_path() / "bwplan_sm_hw.json").string(), "sagemaker", "Llama-3.1-8B",
                            "--instance", "ml.p6-b200.96xlarge"});
    CHECK(r.code == 2);
    CHECK_THAT(r.err, Catch::Contains("ResourceConfig.InstanceType: value 'ml.p6-b200.96xlarge' is not one of the 151 values of "
                                      "TrainingInstanceType (closest: 'ml.p6-b200.48xlarge') (from --instance)"));
  }
  SECTION("instance count below 1") { fails({"--nodes", "0"}, "--nodes: must be between 1 and 4096, got 0"); }
  SECTION("hyperparameter over the limits") {
    fails({"--hyperparameter", "notes=" + std::string(2600, 'n')}, "HyperParameters.notes: value length 2602 is above the maximum 2500");
  }
  SECTION("tag, retries, runtime, training plan") {
    fails({"--tag", "cost#center=42"}, "Tags[0].Key: value 'cost#center' does not match the pattern");
    fails({"--tag", "novalue"}, "--tag: expected KEY=VALUE, got 'novalue'");
    fails({"--retries", "31"}, "RetryStrategy.MaximumRetryAttempts: value 31 is above the maximum 30 of MaximumRetryAttempts (from --retries)");
    fails({"--max-runtime", "29d"}, "StoppingCondition.MaxRuntimeInSeconds: value 2505600 is above SageMaker's documented maximum of 28 days");
    fails({"--training-plan-arn", "arn:aws:sagemaker:us-west-2:111122223333:plan/x"},
          "ResourceConfig.TrainingPlanArn: value length 47 is below the minimum 50 of TrainingPlanArn (from --training-plan-arn)");
    fails({"--training-plan-arn", "arn:aws:sagemaker:us-west-2:1111:training-plan/p6-b200-two-nodes-plan"},
          "ResourceConfig.TrainingPlanArn: value 'arn:aws:sagemaker:us-west-2:1111:training-plan/p6-b200-two-nodes-plan' does not match");
  }
  SECTION("SMP v2 on Blackwell") { fails({"--distribution", "smp"}, "--distribution smp: the newest SMP v2 image"); }
  SECTION("a plan that does not fit exits 1 unless forced") {
    const auto r = run_cli(with({"sagemaker", "Llama-3.1-70B", "--instance", "ml.p5.48xlarge", "--sharding", "none"}, credentials));
    CHECK(r.code == 1);
    CHECK_THAT(r.err, Catch::Contains("does not fit on ml.p5.48xlarge"));
    CHECK(run_cli(with({"sagemaker", "Llama-3.1-70B", "--instance", "ml.p5.48xlarge", "--sharding", "none", "--force"}, credentials)).code == 0);
  }
}

TEST_CASE("cli: --format estimator and modeltrainer describe the same job", "[sagemaker][cli]") {
  const std::vector<std::string> base = with({"sagemaker", "Qwen3-8B", "--instance", "ml.p5en.48xlarge", "--nodes", "4", "--mbs", "2",
                                              "--job-name", "qwen3-8b-test", "--hyperparameter", "learning_rate=2e-4",
                                              "--hyperparameter", "run_name=exp 1"},
                                             credentials);
  const auto q = run_cli(base);
  const auto e = run_cli(with(base, {"--format", "estimator"}));
  const auto t = run_cli(with(base, {"--format", "modeltrainer"}));
  REQUIRE(q.code == 0);
  REQUIRE(e.code == 0);
  REQUIRE(t.code == 0);
  const auto req = json::parse(q.out), est = json::parse(e.out), mt = json::parse(t.out);
  CHECK(req["HyperParameters"]["learning_rate"] == "0.0002");
  CHECK(req["HyperParameters"]["run_name"] == "\"exp 1\"");
  CHECK(req["HyperParameters"]["model_id"] == "\"Qwen/Qwen3-8B\"");
  CHECK(req["HyperParameters"]["fsdp_transformer_layer_cls_to_wrap"] == "\"Qwen3DecoderLayer\"");
  CHECK(est["estimator"]["hyperparameters"]["learning_rate"] == 0.0002);
  for (const auto& [k, v] : est["estimator"]["hyperparameters"].items()) CHECK(sagemaker::sdk_json_encode(v) == req["HyperParameters"][k]);
  CHECK(est["estimator"]["instance_count"] == 4);
  CHECK(est["estimator"]["instance_type"] == "ml.p5en.48xlarge");
  CHECK(est["fit"]["job_name"] == "qwen3-8b-test");
  CHECK(mt["model_trainer"]["compute"]["instance_count"] == 4);
  CHECK(mt["model_trainer"]["stopping_condition"]["max_runtime_in_seconds"] == req["StoppingCondition"]["MaxRuntimeInSeconds"]);
}

TEST_CASE("cli: the README's recommend --emit sagemaker commands print valid requests", "[sagemaker][cli]") {
  const auto readme = std::filesystem::path(BWPLAN_SOURCE_DIR) / "README.md";
  std::ifstream in(readme);
  REQUIRE(in);
  std::vector<std::vector<std::string>> commands;
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("bwplan ", 0) != 0 || line.find("--emit sagemaker") == std::string::npos) continue;
    std::istringstream words(line.substr(0, line.find('>')));
    std::vector<std::string> argv;
    for (std::string w; words >> w;) argv.push_back(w);
    commands.push_back(std::vector<std::string>(argv.begin() + 1, argv.end()));
  }
  REQUIRE(commands.size() >= 2);
  std::set<std::int64_t> node_counts;
  for (const auto& argv : commands) {
    const auto r = run_cli(argv);
    INFO(r.err);
    REQUIRE(r.code == 0);
    const auto q = json::parse(r.out);
    CHECK(problems(q).empty());
    CHECK(q["ResourceConfig"]["InstanceType"] == "ml.p6-b200.48xlarge");
    node_counts.insert(q["ResourceConfig"]["InstanceCount"].get<std::int64_t>());
  }
  CHECK(node_counts == std::set<std::int64_t>{1, 2});
}

TEST_CASE("cli: recommend --emit sends the best plan", "[sagemaker][cli]") {
  // the SageMaker launchers set up FSDP or DDP: --emit searches what --parallel dp does
  const auto plans = run_cli({"recommend", "Llama-3.1-8B", "--instance", "ml.p6-b200.48xlarge", "--nodes", "2", "--parallel", "dp", "--format", "json"});
  const auto emitted = run_cli(with({"recommend", "Llama-3.1-8B", "--instance", "ml.p6-b200.48xlarge", "--nodes", "2", "--emit", "sagemaker"}, credentials));
  REQUIRE(plans.code == 0);
  REQUIRE(emitted.code == 0);
  const auto best = json::parse(plans.out)["plans"][0]["config"];
  const auto hp = json::parse(emitted.out)["HyperParameters"];
  CHECK(hp["per_device_train_batch_size"] == best["micro_batch_size"].dump());
  CHECK(hp["gradient_accumulation_steps"] == best["grad_accum"].dump());
  CHECK(hp["max_seq_length"] == best["seq_len"].dump());
  CHECK(hp["sharding"] == sagemaker::sdk_json_encode(best["sharding"]));
  const auto est = run_cli(with({"recommend", "Llama-3.1-8B", "--nodes", "2", "--emit", "estimator"}, credentials));
  REQUIRE(est.code == 0);
  CHECK(json::parse(est.out)["estimator"]["instance_count"] == 2);
  const auto none = run_cli(with({"recommend", "Llama-3.1-405B", "--instance", "ml.p5.48xlarge", "--emit", "sagemaker"}, credentials));
  CHECK(none.code == 1);
  CHECK(none.out.empty());
  CHECK_THAT(none.err, Catch::Contains("no configuration of Llama-3.1-405B fits"));
}
