// SageMaker payloads: the service-model validator on mutated requests, the request builder, the SDK forms,
// and the CLI (bwplan sagemaker, bwplan recommend --emit, the README commands).
#include "cmd_sagemaker.hpp"
#include "test_util.hpp"

#include <bwplan/io/service_model.hpp>

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include <fstream>
#include <optional>
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

/// A role, a bucket, a training channel and a Hugging Face token: a job bwplan has nothing to warn about.
const std::vector<std::string> credentials{"--role-arn", "arn:aws:iam::111122223333:role/SageMakerTrainingExecutionRole",
                                           "--output-s3", "s3://amzn-s3-demo-bucket/bwplan/",
                                           "--train-s3", "s3://amzn-s3-demo-bucket/data/train/", "--env", "HF_TOKEN=hf_example"};

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
  const io::training_contract contract = ctx.contract();
  const model_spec m = ctx.model("Llama-3.1-8B");
  const instance_spec& inst = cat.instance("ml.p6-b200.48xlarge");
  const gpu_spec& gpu = cat.gpu(inst.gpu);
  plan p;
  p.model = "Llama-3.1-8B";
  p.target.instance = inst.id;
  p.target.nodes = 2;
  training_config& c = p.training;
  c.micro_batch = 2;
  c.seq_len = 8192;
  c.grad_accum = 16;
  c.world_size = 16;
  c.gpus_per_node = 8;
  c.ac = checkpointing::full(2);
  c.shard = sharding::full;
  c.format = compute_format::fp8;
  const throughput_estimate te = estimate_throughput(m, c, gpu, &inst);
  sagemaker::job_settings s;
  s.role_arn = "arn:aws:iam::111122223333:role/SageMakerTrainingExecutionRole";
  s.output_s3 = "s3://amzn-s3-demo-bucket/out/";
  s.channels = {"s3://amzn-s3-demo-bucket/data/train/", "validation=s3://amzn-s3-demo-bucket/data/val/"};
  s.tags = {"team=ml"};
  s.training_plan_arn = "arn:aws:sagemaker:us-west-2:111122223333:training-plan/p6-b200-2x";
  s.max_steps = 500;
  s.env = {"HF_TOKEN=hf_example"};
  const std::chrono::system_clock::time_point now{std::chrono::milliseconds(1787313600000)};
  const auto r = sagemaker::build_request({p, m, gpu, inst, te, contract}, s, now);
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
  // the whole plan, by the training contract's names, json.dumps-encoded as SDK v2 sends them
  CHECK(hp["contract_version"] == "1");
  CHECK(hp["model"] == "\"Llama-3.1-8B\"");
  CHECK(hp["gpu"] == "\"b200\"");
  CHECK(hp["gpus"] == "16");
  CHECK(hp["precision"] == "\"fp8\"");
  CHECK(hp["master_weights"] == "\"fp32\"");
  CHECK(hp["micro_batch_size"] == "2");
  CHECK(hp["seq_len"] == "8192");
  CHECK(hp["grad_accum"] == "16");
  CHECK(hp["global_batch_size"] == "512");
  CHECK(hp["activation_checkpointing"] == "\"every-2\"");
  CHECK(hp["sharding"] == "\"full\"");
  CHECK(!hp.contains("shard_group"));
  CHECK(hp["tp"] == "1");
  CHECK(hp["cp"] == "1");
  CHECK(hp["ep"] == "1");
  CHECK(hp["pp"] == "1");
  CHECK(hp["optimizer"] == "\"adamw\"");
  CHECK(hp["optimizer_impl"] == "\"fused\"");
  CHECK(hp["loss"] == "\"standard\"");
  CHECK(hp["bf16_layers"] == "\"none\"");
  CHECK(hp["fp8_all_gather"] == "false");
  CHECK(hp["max_steps"] == "500");
  CHECK(hp["data"] == "\"train\"");
  for (const char* gone : {"model_id", "per_device_train_batch_size", "gradient_accumulation_steps", "max_seq_length", "bf16",
                           "gradient_checkpointing", "fsdp", "fsdp_transformer_layer_cls_to_wrap", "optim", "use_liger_kernel"})
    CHECK(!hp.contains(gone));
  CHECK(hp["sagemaker_program"] == "\"train.py\"");
  CHECK(hp["sagemaker_job_name"] == "\"" + q["TrainingJobName"].get<std::string>() + "\"");
  CHECK(hp["sagemaker_submit_directory"] == "\"s3://amzn-s3-demo-bucket/llama-3-1-8b-p6-b200-2n-2026-08-21-12-00-00-000/source/sourcedir.tar.gz\"");
  CHECK(hp["sagemaker_torch_distributed_enabled"] == "true");
  CHECK(hp["sagemaker_instance_type"] == "\"ml.p6-b200.48xlarge\"");
  CHECK(hp["sagemaker_region"] == "\"us-west-2\"");
  CHECK(q["InputDataConfig"].size() == 2);
  CHECK(q["InputDataConfig"][0]["ChannelName"] == "train");
  CHECK(q["InputDataConfig"][1]["DataSource"]["S3DataSource"]["S3Uri"] == "s3://amzn-s3-demo-bucket/data/val/");
  CHECK(q["CheckpointConfig"]["S3Uri"] == "s3://amzn-s3-demo-bucket/out/llama-3-1-8b-p6-b200-2n-2026-08-21-12-00-00-000/checkpoints/");
  CHECK(q["Environment"]["FI_PROVIDER"] == "efa");
  CHECK(q["Environment"]["FI_EFA_USE_DEVICE_RDMA"] == "1");
  CHECK(q["Environment"]["HF_TOKEN"] == "hf_example");
  CHECK(q["Tags"][0] == json{{"Key", "team"}, {"Value", "ml"}});
  CHECK(q["AlgorithmSpecification"]["TrainingImage"] ==
        "763104351884.dkr.ecr.us-west-2.amazonaws.com/pytorch:2.11.0-cu130-amzn2023-sagemaker");
  // the metrics match the trainer's log line (apps/train/bwtrain/engine.py)
  const std::regex loss(q["AlgorithmSpecification"]["MetricDefinitions"][0]["Regex"].get<std::string>());
  std::smatch mt;
  const std::string log = "step 10/500 loss 2.3456 (1.234 s)";
  REQUIRE(std::regex_search(log, mt, loss));
  CHECK(mt[1] == "2.3456");
  const std::regex step(q["AlgorithmSpecification"]["MetricDefinitions"][1]["Regex"].get<std::string>());
  REQUIRE(std::regex_search(log, mt, step));
  CHECK(mt[1] == "1.234");
  // the reserved-capacity checkpoint and the price are said (spdlog info)
  REQUIRE(r.notes.size() == 2);
  CHECK_THAT(r.notes[0], Catch::Contains("SAGEMAKER_CURRENT_CAPACITY_BLOCK_EXPIRATION_TIMESTAMP"));
  CHECK_THAT(r.notes[1], Catch::Contains("(EC2 on-demand p6-b200.48xlarge, us-east-1)"));

  SECTION("the estimator form json.dumps to the same hyperparameters") {
    const auto e = sagemaker::to_estimator(r);
    CHECK(e["estimator"]["instance_count"] == 2);
    CHECK(e["estimator"]["training_plan"] == s.training_plan_arn);
    CHECK(e["estimator"]["distribution"] == json::parse(R"({"torch_distributed": {"enabled": true}})"));
    CHECK(e["fit"]["inputs"]["validation"] == "s3://amzn-s3-demo-bucket/data/val/");
    for (const auto& [k, v] : e["estimator"]["hyperparameters"].items()) CHECK(sagemaker::sdk_json_encode(v) == hp[k]);
    CHECK(e["estimator"]["hyperparameters"]["micro_batch_size"] == 2);
    CHECK(e["estimator"]["hyperparameters"]["fp8_all_gather"] == false);
  }
  SECTION("the ModelTrainer form installs the requirements") {
    const auto t = sagemaker::to_modeltrainer(r);
    CHECK(t["model_trainer"]["compute"]["instance_count"] == 2);
    CHECK(t["model_trainer"]["compute"]["training_plan_arn"] == s.training_plan_arn);
    CHECK(t["model_trainer"]["base_job_name"] == "llama-3-1-8b-p6-b200-2n");
    CHECK(t["model_trainer"]["source_code"]["requirements"] == "requirements.txt");
    CHECK(t["model_trainer"]["source_code"]["entry_script"] == "train.py");
    CHECK(t["model_trainer"]["tags"][0] == json{{"key", "team"}, {"value", "ml"}});
  }
  SECTION("the region comes from the training plan's ARN; --region must agree") {
    s.training_plan_arn = "arn:aws:sagemaker:us-east-1:111122223333:training-plan/p6-b200-2x";
    const auto e1 = sagemaker::build_request({p, m, gpu, inst, te, contract}, s, now);
    CHECK(e1.region == "us-east-1");
    CHECK(e1.request["HyperParameters"]["sagemaker_region"] == "\"us-east-1\"");
    CHECK_THAT(e1.request["AlgorithmSpecification"]["TrainingImage"].get<std::string>(), Catch::Contains(".us-east-1.amazonaws.com/"));
    s.region = "us-east-1";
    CHECK_NOTHROW(sagemaker::build_request({p, m, gpu, inst, te, contract}, s, now));
    s.region = "us-west-2";
    CHECK_THROWS_WITH(sagemaker::build_request({p, m, gpu, inst, te, contract}, s, now),
                      "--region us-west-2: the training plan arn:aws:sagemaker:us-east-1:111122223333:training-plan/p6-b200-2x is in "
                      "us-east-1, and a job runs in its plan's region; give --region us-east-1 or leave --region out");
    CHECK(sagemaker::arn_region("arn:aws:sagemaker:eu-west-1:111122223333:training-plan/x") == "eu-west-1");
    CHECK(sagemaker::arn_region("not-an-arn").empty());
  }
  SECTION("no input channel: synthetic tokens, said") {
    s.channels.clear();
    const auto e = sagemaker::build_request({p, m, gpu, inst, te, contract}, s, now);
    CHECK(e.request["HyperParameters"]["data"] == "\"synthetic\"");
    REQUIRE(e.warnings.size() == 1);
    CHECK_THAT(e.warnings[0], Catch::StartsWith("no --train-s3: the job has no input channel, so the trainer trains on synthetic random tokens"));
  }
  SECTION("a gated model without HF_TOKEN is warned about") {
    s.env.clear();
    const auto e = sagemaker::build_request({p, m, gpu, inst, te, contract}, s, now);
    REQUIRE(e.warnings.size() == 1);
    CHECK_THAT(e.warnings[0], Catch::StartsWith("meta-llama/Llama-3.1-8B is gated on the Hugging Face Hub: pass --env HF_TOKEN="));
  }
  SECTION("--hyperparameter takes the contract's own keys, typed by the contract") {
    s.hyperparameters = {"learning_rate=2e-4", "seed=7", "measure=False", "checkpoint_every=100"};
    const auto e = sagemaker::build_request({p, m, gpu, inst, te, contract}, s, now);
    CHECK(e.request["HyperParameters"]["learning_rate"] == "0.0002");
    CHECK(e.request["HyperParameters"]["seed"] == "7");
    CHECK(e.request["HyperParameters"]["measure"] == "false");
    CHECK(e.request["HyperParameters"]["checkpoint_every"] == "100");
    CHECK(e.request["HyperParameters"]["compile"] == "false");  // a plan field now (--compile), sent with the plan
    s.hyperparameters = {"compile=True"};
    CHECK_THROWS_WITH(sagemaker::build_request({p, m, gpu, inst, te, contract}, s, now),
                      Catch::StartsWith("--hyperparameter compile: set by the plan"));
    s.hyperparameters = {"run_name=exp"};
    CHECK_THROWS_WITH(sagemaker::build_request({p, m, gpu, inst, te, contract}, s, now),
                      Catch::StartsWith("--hyperparameter run_name: unknown to the reference trainer (training contract version 1)"));
    s.hyperparameters = {"micro_batch_size=4"};
    CHECK_THROWS_WITH(sagemaker::build_request({p, m, gpu, inst, te, contract}, s, now),
                      Catch::StartsWith("--hyperparameter micro_batch_size: set by the plan"));
    s.hyperparameters = {"seed=-1"};
    CHECK_THROWS_WITH(sagemaker::build_request({p, m, gpu, inst, te, contract}, s, now),
                      "--hyperparameter 'seed': -1 is below the minimum 0");
  }
  SECTION("SMP v2 is refused: the trainer runs FSDP2 under torchrun") {
    s.distribution = "smp";
    CHECK_THROWS_WITH(sagemaker::build_request({p, m, gpu, inst, te, contract}, s, now),
                      Catch::StartsWith("--distribution smp: the reference trainer (train.py, training contract v1) shards with PyTorch FSDP2"));
  }
  SECTION("images older than the trainer's PyTorch 2.11 are refused") {
    s.framework_version = "2.10";
    CHECK_THROWS_WITH(sagemaker::build_request({p, m, gpu, inst, te, contract}, s, now),
                      Catch::StartsWith("--framework-version 2.10: the reference trainer needs the PyTorch 2.11 image or newer"));
    s.framework_version = "2.13";
    const auto e = sagemaker::build_request({p, m, gpu, inst, te, contract}, s, now);
    CHECK(e.request["AlgorithmSpecification"]["TrainingImage"] == "763104351884.dkr.ecr.us-west-2.amazonaws.com/pytorch:2.13.0-cu133-amzn2023-sagemaker");
    REQUIRE(e.warnings.size() == 1);
    CHECK_THAT(e.warnings[0], Catch::Contains("were checked against torch 2.11.0"));
  }
  SECTION("what the trainer cannot run is not emitted") {
    plan bad = p;
    bad.training.format = compute_format::mxfp8;
    CHECK_THROWS_WITH(sagemaker::build_request({bad, m, gpu, inst, te, contract}, s, now),
                      Catch::StartsWith("precision: precision mxfp8: the reference trainer cannot run it (T-mxfp8-torch)"));
    bad = p;
    bad.training.tp = 2;
    bad.training.loss = loss_impl::chunked;
    CHECK_THROWS_WITH(sagemaker::build_request({bad, m, gpu, inst, te, contract}, s, now),
                      Catch::StartsWith("loss: loss chunked, tp 2: the reference trainer cannot run it (T-chunked-tp)"));
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
  SECTION("placeholders, synthetic data and a gated model are announced on stderr") {
    const auto r = run_cli({"sagemaker", "Llama-3.1-8B"});
    REQUIRE(r.code == 0);
    CHECK(lines(r.err) == 4);
    CHECK_THAT(r.err, Catch::Contains("no --role-arn: RoleArn is the placeholder") && Catch::Contains("no --output-s3") &&
                          Catch::Contains("no --train-s3: the job has no input channel, so the trainer trains on synthetic random tokens") &&
                          Catch::Contains("meta-llama/Llama-3.1-8B is gated on the Hugging Face Hub: pass --env HF_TOKEN="));
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
    fails({"--train-s3", "validation=amzn-s3-demo-bucket/data"},
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
  SECTION("instance count below 1") { fails({"--nodes", "0"}, "--nodes: out of range: must be between 1 and 4096, got 0"); }
  SECTION("hyperparameter over the limits") {
    fails({"--hyperparameter", "data=" + std::string(2600, 'n')}, "HyperParameters.data: value length 2602 is above the maximum 2500");
    fails({"--hyperparameter", "notes=x"}, "--hyperparameter notes: unknown to the reference trainer (training contract version 1); it takes "
                                           "max_steps, data, model_init, checkpoint_dir");
    fails({"--hyperparameter", "micro_batch_size=8"}, "--hyperparameter micro_batch_size: set by the plan");
    fails({"--hyperparameter", "measure=maybe"}, "--hyperparameter 'measure': expected true or false (True/False), got 'maybe'");
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
  SECTION("SMP v2 is not what the trainer runs") { fails({"--distribution", "smp"}, "--distribution smp: the reference trainer (train.py"); }
  SECTION("what the reference trainer cannot run: exit 2, one line naming the flag and the reason") {
    fails({"--precision", "mxfp8"}, "--precision: precision mxfp8: the reference trainer cannot run it (T-mxfp8-torch): torchao 0.18.0's MXFP8");
    fails({"--precision", "nvfp4", "--tp", "2"}, "--precision: precision nvfp4, tp 2: the reference trainer cannot run it (T-nvfp4-tp)");
    fails({"--sharding", "none", "--tp", "2"},
          "--sharding: 4 data- x context-parallel ranks, sharding none, tp 2: the reference trainer cannot run it (T-ddp-tp)");
    fails({"--loss", "chunked", "--tp", "2"}, "--loss: loss chunked, tp 2: the reference trainer cannot run it (T-chunked-tp)");
    fails({"--pp", "2"}, "--pp: pp 2: the reference trainer cannot run it (T-pp)");
    fails({"--sharding", "optimizer"}, "--sharding: sharding optimizer: the reference trainer cannot run it (T-zero1)");
    fails({"--framework-version", "2.10"}, "--framework-version 2.10: the reference trainer needs the PyTorch 2.11 image or newer");
    fails({"--training-plan-arn", "arn:aws:sagemaker:us-east-1:111122223333:training-plan/p6-b200-two-nodes", "--region", "us-west-2"},
          "--region us-west-2: the training plan arn:aws:sagemaker:us-east-1:111122223333:training-plan/p6-b200-two-nodes is in us-east-1");
    const std::string moe = (std::filesystem::path(BWPLAN_SOURCE_DIR) / "tests" / "data" / "qwen3-30b-a3b.json").string();
    for (const auto& [extra, expected] : {std::pair<std::vector<std::string>, std::string>{{"--ep", "2"}, "--ep: ep 2: the reference trainer cannot run it (T-ep)"},
                                          {{}, "is a mixture-of-experts model: the reference trainer runs dense decoder models only (T-model)"}}) {
      const auto r = run_cli(with(with({"sagemaker", moe, "--instance", "ml.p6-b200.48xlarge", "--force"}, extra), credentials));
      INFO(r.err);
      CHECK(r.code == 2);
      CHECK(lines(r.err) == 1);
      CHECK_THAT(r.err, Catch::Contains(expected));
    }
  }
  SECTION("tensor and context parallelism, hybrid and grad-op sharding are launched") {
    for (const std::vector<std::string>& extra : {std::vector<std::string>{"--tp", "2", "--cp", "2", "--seq", "8192"},
                                                  {"--nodes", "2", "--sharding", "hybrid"}, {"--sharding", "grad-op", "--tp", "4"}}) {
      const auto r = run_cli(with(with({"sagemaker", "Llama-3.1-8B", "--instance", "ml.p6-b200.48xlarge"}, extra), credentials));
      INFO(r.err);
      REQUIRE(r.code == 0);
      const auto hp = json::parse(r.out)["HyperParameters"];
      for (std::size_t i = 0; i + 1 < extra.size(); i += 2) {
        const std::string key = extra[i] == "--seq" ? "seq_len" : extra[i].substr(2);
        if (key == "nodes") continue;
        const std::string v = extra[i + 1];
        CHECK(hp[key] == (std::isdigit(static_cast<unsigned char>(v[0])) ? v : "\"" + v + "\""));
      }
    }
  }
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
                                              "--hyperparameter", "seed=3"},
                                             credentials);
  const auto q = run_cli(base);
  const auto e = run_cli(with(base, {"--format", "estimator"}));
  const auto t = run_cli(with(base, {"--format", "modeltrainer"}));
  REQUIRE(q.code == 0);
  REQUIRE(e.code == 0);
  REQUIRE(t.code == 0);
  const auto req = json::parse(q.out), est = json::parse(e.out), mt = json::parse(t.out);
  CHECK(req["HyperParameters"]["learning_rate"] == "0.0002");
  CHECK(req["HyperParameters"]["seed"] == "3");
  CHECK(req["HyperParameters"]["model"] == "\"Qwen3-8B\"");
  CHECK(req["HyperParameters"]["micro_batch_size"] == "2");
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

namespace {

/// The plan of an estimate JSON's "config" (config_to_json), enough to ask the contract about it.
plan plan_of_config(const json& c) {
  plan p;
  training_config& t = p.training;
  t.micro_batch = c["micro_batch_size"];
  t.seq_len = c["seq_len"];
  t.grad_accum = c["grad_accum"];
  t.world_size = c["world_size"];
  t.gpus_per_node = c["gpus_per_node"];
  t.ac = *parse_checkpointing(c["activation_checkpointing"].get<std::string>());
  const std::string sh = c["sharding"];
  t.shard = sh == "full" ? sharding::full : sh == "hybrid" ? sharding::hybrid : sh == "grad-op" ? sharding::grad_op
          : sh == "optimizer" ? sharding::optimizer : sharding::none;  // (it read the distributed optimizer as none)
  t.tp = c["tp"];
  t.cp = c["cp"];
  t.ep = c["ep"];
  t.pp = c["pp"];
  t.master = c["master_weights"] == "bf16" ? master_weights::bf16 : master_weights::fp32;
  t.format = *parse_format(c["precision"].get<std::string>());
  t.fp8_all_gather = c["fp8_all_gather"];
  t.optimizer = c["optimizer_impl"] == "foreach" ? optimizer_impl::foreach : optimizer_impl::fused;
  t.loss = c["loss"] == "chunked" ? loss_impl::chunked : c["loss"] == "liger" ? loss_impl::liger : loss_impl::standard;
  return p;
}

}  // namespace

TEST_CASE("cli: recommend --emit searches only plans the reference trainer runs and sends the best of them", "[sagemaker][cli]") {
  const io::training_contract k = test_context().contract();
  const std::vector<std::string> search{"recommend", "Llama-3.1-8B", "--instance", "ml.p6-b200.48xlarge", "--nodes", "2", "--numerics", "aggressive"};
  const auto plans = run_cli(with(search, {"--format", "json", "--top", "60"}));
  const auto emitted = run_cli(with(with(search, {"--emit", "sagemaker"}), credentials));
  REQUIRE(plans.code == 0);
  INFO(emitted.err);
  REQUIRE(emitted.code == 0);
  // the table ranks every plan; the emitted one is the best the trainer runs
  std::optional<json> best;
  int refused = 0;
  const auto doc = json::parse(plans.out);  // named: a subobject of a temporary would dangle in the loop
  for (const auto& p : doc["plans"]) {
    if (!io::trainer_runs(k, plan_of_config(p["config"]))) { ++refused; continue; }
    if (!best) best = p["config"];
  }
  CHECK(refused > 0);  // the search space holds plans the trainer cannot run (mxfp8, nvfp4 with tp, chunked loss with tp)
  REQUIRE(best);
  const auto hp = json::parse(emitted.out)["HyperParameters"];
  for (const char* key : {"micro_batch_size", "grad_accum", "seq_len", "tp", "cp", "ep"}) CHECK(hp[key] == (*best)[key].dump());
  for (const char* key : {"sharding", "activation_checkpointing", "precision", "loss", "master_weights"})
    CHECK(hp[key] == sagemaker::sdk_json_encode((*best)[key]));
  SECTION("naming a format the trainer cannot run is an error") {
    const auto r = run_cli(with(with(search, {"--precisions", "mxfp8", "--emit", "sagemaker"}), credentials));
    CHECK(r.code == 2);
    CHECK(lines(r.err) == 1);
    CHECK_THAT(r.err, Catch::Contains("--precisions: precision mxfp8: the reference trainer cannot run it (T-mxfp8-torch)"));
  }
  SECTION("the SDK forms") {
    const auto est = run_cli(with({"recommend", "Llama-3.1-8B", "--nodes", "2", "--emit", "estimator"}, credentials));
    REQUIRE(est.code == 0);
    CHECK(json::parse(est.out)["estimator"]["instance_count"] == 2);
  }
  SECTION("nothing fits: exit 1, nothing emitted") {
    const auto none = run_cli(with({"recommend", "Llama-3.1-405B", "--instance", "ml.p5.48xlarge", "--emit", "sagemaker"}, credentials));
    CHECK(none.code == 1);
    CHECK(none.out.empty());
    CHECK_THAT(none.err, Catch::Contains("no configuration of Llama-3.1-405B fits"));
  }
  SECTION("the issue's 70B job on two P5en runs the plan that was estimated") {
    const auto r = run_cli(with({"recommend", "Llama-3.1-70B", "--instance", "ml.p5en.48xlarge", "--nodes", "2", "--emit", "sagemaker"}, credentials));
    INFO(r.err);
    REQUIRE(r.code == 0);
    const auto file = std::filesystem::path(BWPLAN_TEST_OUTPUT_DIR) / "recommend-70b-p5en.json";
    std::ofstream(file) << r.out;
    const auto e = run_cli({"estimate", "--plan", file.string(), "--format", "json"});
    INFO(e.err);
    REQUIRE(e.code == 0);
    const auto j = json::parse(e.out);
    CHECK(j["fits"] == true);
    CHECK(sagemaker::sdk_json_encode(j["config"]["activation_checkpointing"]) == json::parse(r.out)["HyperParameters"]["activation_checkpointing"]);
  }
}

TEST_CASE("bug: sagemaker --plan takes the plan's nodes, and its own two-node request reads back", "[sagemaker]") {
  // found by a helper's sweep: "--gpus 16: a SageMaker job uses every GPU of its 1 instance(s), 1 x 8 = 8" for a 2-node
  // plan file (the check compared with --nodes' default, not the plan's nodes), exit 2
  const std::string plan = std::string(BWPLAN_SOURCE_DIR) + "/configs/examples/qwen3-8b-p5en-2nodes.json";
  const auto r = run_cli({"sagemaker", "--plan", plan});
  INFO(r.err);
  REQUIRE(r.code == 0);
  const json q = json::parse(r.out);
  CHECK(q["ResourceConfig"]["InstanceCount"] == 2);
  const auto job = std::filesystem::temp_directory_path() / "bwplan_sm_two_nodes.json";
  std::ofstream(job) << r.out;
  const auto back = run_cli({"sagemaker", "--plan", job.string()});
  INFO(back.err);
  REQUIRE(back.code == 0);
  CHECK(json::parse(back.out)["ResourceConfig"]["InstanceCount"] == 2);
  // a probe runs on one node: the plan's two are refused by name, not by a flag nobody gave
  const auto probe = run_cli({"sagemaker", "--plan", plan, "--probe"});
  CHECK(probe.code == 2);
  CHECK_THAT(probe.err, Catch::Contains("nodes 2") && Catch::Contains("one node"));
}

TEST_CASE("bug: a job whose required hyperparameter is empty or null is refused as the trainer refuses it", "[sagemaker][check]") {
  // found by a helper's sweep: "gpus": "" (or "null", "None") passed `check job.json` (exit 0) and the trainer's
  // contract.py refuses it at start ("hyperparameter 'gpus': required")
  const auto r = run_cli({"sagemaker", "Llama-3.2-1B", "--instance", "ml.p5.48xlarge"});
  REQUIRE(r.code == 0);
  for (const char* empty : {"", "null", "None"}) {
    json q = json::parse(r.out);
    q["HyperParameters"]["gpus"] = empty;
    const auto job = std::filesystem::temp_directory_path() / "bwplan_sm_gpus_empty.json";
    std::ofstream(job) << q.dump(2);
    const auto c = run_cli({"check", job.string()});
    INFO(empty);
    CHECK(c.code == 2);
    CHECK_THAT(c.err, Catch::Contains("/HyperParameters/gpus") && Catch::Contains("required"));
  }
}

TEST_CASE("bug: the hyperparameter decoder reads numbers as the trainer does: no hex, alpha above 0", "[sagemaker][contract]") {
  // found by a helper's sweep: bwplan read lora_alpha "0x4" as 4 (strtod) where contract.py refuses it; lora_alpha 0
  // passed the contract (minimum 0) and the trainer then ran alpha 32 (`or 32`)
  const auto k = io::load_contract(std::string(BWPLAN_SOURCE_DIR) + "/configs/training-contract.json");
  const io::contract_field* alpha = k.field("lora_alpha");
  REQUIRE(alpha != nullptr);
  CHECK(io::decode_hyperparameter(*alpha, "16").get<double>() == 16);
  CHECK(io::decode_hyperparameter(*alpha, "\"0.5\"").get<double>() == 0.5);
  CHECK(io::decode_hyperparameter(*alpha, "1e-3").get<double>() == Approx(1e-3));
  for (const char* bad : {"0x4", "0X1p3", "1_0", "0", "-1", "inf", "nan", " ", "4."}) {
    INFO(bad);
    if (std::string(bad) == "4.") {  // (a trailing point is decimal on both sides: Python's float("4.") is 4.0)
      CHECK(io::decode_hyperparameter(*alpha, bad).get<double>() == 4);
      continue;
    }
    CHECK_THROWS_AS(io::decode_hyperparameter(*alpha, bad), plan_error);
  }
}

// The reference trainer's model path needs the Llama layout (model.layers, embed_tokens, norm: check_structure) and
// fuses only the Llama RMSNorm formula (apply_module_kernels); bwplan emitted GPT-2 and Falcon jobs (blocks under
// transformer.h) with a warning and StarCoder2 jobs (LayerNorm) under modules fused, which the trainer refuses when
// the container starts (a helper's audit of the plan loop). Both are refused before a job is written now, and
// recommend's JSON rows say the trainer does not run them.
TEST_CASE("bug: jobs for models the reference trainer refuses at start are refused when emitted", "[sagemaker][cli][bugs]") {
  for (const std::string model : {"gpt2", "falcon-7b"}) {
    INFO(model);
    const auto s = run_cli(with({"sagemaker", model, "--instance", "ml.p6-b200.48xlarge", "--seq", "1024", "--modules", "transformers"},
                                credentials));
    CHECK(s.code == 2);
    CHECK(lines(s.err) == 1);
    CHECK_THAT(s.err, Catch::Contains("keeps its blocks under transformer.h, not model.layers") && Catch::Contains("(T-model"));
    const auto e = run_cli({"recommend", model, "--instance", "ml.p6-b200.48xlarge", "--seq", "1024", "--emit", "sagemaker"});
    CHECK(e.code == 2);
    CHECK_THAT(e.err, Catch::Contains("--emit sagemaker: ") && Catch::Contains("(T-model"));
    const auto j = run_cli({"recommend", model, "--instance", "ml.p6-b200.48xlarge", "--seq", "1024", "--format", "json"});
    REQUIRE(j.code == 0);
    const auto doc = json::parse(j.out);
    REQUIRE_FALSE(doc["plans"].empty());
    for (const auto& p : doc["plans"]) {
      CHECK(p["reference_trainer"]["runs"] == false);
      CHECK(p["reference_trainer"]["refusals"] == json::array({"T-model"}));
    }
  }
  // a LayerNorm model in the Llama layout: modules fused is refused (T-modules), modules transformers is launched
  // (Megatron's GPT-3 7B case entered as a starcoder2 config: LayerNorm, GELU MLP, biases)
  const std::string starcoder = (std::filesystem::path(BWPLAN_SOURCE_DIR) / "tests" / "data" / "megatron-gpt3-7b.json").string();
  const auto fused = run_cli(with({"sagemaker", starcoder, "--instance", "ml.p6-b200.48xlarge", "--modules", "fused", "--force"}, credentials));
  CHECK(fused.code == 2);
  CHECK_THAT(fused.err, Catch::Contains("norms are LayerNorm (mean, weight and bias)") && Catch::Contains("T-modules"));
  const auto eager = run_cli(with({"sagemaker", starcoder, "--instance", "ml.p6-b200.48xlarge", "--modules", "transformers", "--force"}, credentials));
  INFO(eager.err);
  CHECK(eager.code == 0);
}
