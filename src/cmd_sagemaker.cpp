// SPDX-License-Identifier: Apache-2.0
// `bwplan sagemaker MODEL`: the CreateTrainingJob request (or SDK arguments) that launches one plan.
#include "cmd_sagemaker.hpp"
#include "input.hpp"

#include <bwplan/io/file.hpp>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <fstream>
#include <optional>
#include <ostream>
#include <utility>

namespace bwplan::cli {

namespace {

struct sagemaker_options : plan_options {
  sagemaker::job_settings job;
  std::string format = "request";
  bool force = false;
  bool probe = false;
};

/// The flag a request member comes from, for the error line.
std::string flag_for(const std::string& path) {
  static const std::pair<const char*, const char*> flags[] = {
      {"TrainingJobName", "--job-name/--base-job-name"},
      {"RoleArn", "--role-arn"},
      {"AlgorithmSpecification.TrainingImage", "--image-uri/--framework-version/--region"},
      {"AlgorithmSpecification.TrainingInputMode", "--input-mode"},
      {"HyperParameters", "--hyperparameter/--model-id/--entry-point/--source-s3"},
      {"InputDataConfig", "--train-s3"},
      {"OutputDataConfig", "--output-s3"},
      {"ResourceConfig.InstanceType", "--instance"},
      {"ResourceConfig.InstanceCount", "--nodes"},
      {"ResourceConfig.VolumeSizeInGB", "--volume-gb"},
      {"ResourceConfig.KeepAlivePeriodInSeconds", "--keep-alive"},
      {"ResourceConfig.TrainingPlanArn", "--training-plan-arn"},
      {"VpcConfig.Subnets", "--subnet"},
      {"VpcConfig.SecurityGroupIds", "--security-group"},
      {"VpcConfig", "--subnet/--security-group"},
      {"StoppingCondition.MaxRuntimeInSeconds", "--max-runtime"},
      {"StoppingCondition.MaxPendingTimeInSeconds", "--max-pending"},
      {"Tags", "--tag"},
      {"CheckpointConfig", "--checkpoint-s3"},
      {"Environment", "--env"},
      {"RetryStrategy", "--retries"},
  };
  for (const auto& [prefix, flag] : flags) {
    const std::string p = prefix;
    if (path == p || path.rfind(p + ".", 0) == 0 || path.rfind(p + "[", 0) == 0) return flag;
  }
  return {};
}

/// Copies `from` to `to`, replacing it. Throws invalid_request naming --source-dir.
void copy_into(const std::filesystem::path& from, const std::filesystem::path& to) {
  std::error_code ec;
  std::filesystem::copy_file(from, to, std::filesystem::copy_options::overwrite_existing, ec);
  if (ec) throw invalid_request(fmt::format("--source-dir: cannot copy {} to {}: {}", from.string(), to.string(), ec.message()));
}

void write_text(const std::filesystem::path& to, const std::string& text) {
  std::ofstream f(to, std::ios::binary);
  if (!(f << text) || !f.flush()) throw invalid_request("--source-dir: cannot write " + to.string());
}

}  // namespace

std::vector<std::string> write_source_dir(const context& ctx, const std::filesystem::path& dir, const sagemaker::job_request& r,
                                          const plan& p) {
  namespace fs = std::filesystem;
  const fs::path from = ctx.trainer_dir();
  std::error_code ec;
  if (fs::exists(dir) && !fs::is_directory(dir)) throw invalid_request("--source-dir " + dir.string() + ": exists and is not a directory");
  fs::create_directories(dir / "bwtrain", ec);
  if (ec) throw invalid_request(fmt::format("--source-dir: cannot create {}: {}", dir.string(), ec.message()));
  std::vector<std::string> written;
  for (const char* f : {"train.py", "contract.py", "training-contract.json", "requirements.txt"}) {
    fs::path src = from / f;
    if (std::string(f) == "training-contract.json" && !fs::exists(src)) src = ctx.configs() / f;
    copy_into(src, dir / f);
    written.emplace_back(f);
  }
  for (const auto& e : fs::directory_iterator(from / "bwtrain"))
    if (e.is_regular_file() && e.path().extension() == ".py") copy_into(e.path(), dir / "bwtrain" / e.path().filename());
  written.emplace_back("bwtrain/");
  // the bundled presets' config.json files: the trainer builds a preset from them with model_init random
  fs::create_directories(dir / "models", ec);
  if (fs::exists(ctx.configs() / "models"))
    for (const auto& e : fs::directory_iterator(ctx.configs() / "models"))
      if (e.is_regular_file() && e.path().extension() == ".json") copy_into(e.path(), dir / "models" / e.path().filename());
  if (!r.model_file.empty()) copy_into(r.model_file, dir / r.model_in_source_dir);
  written.emplace_back("models/");
  // the plan the job runs, as a plan file (bwplan check DIR/plan.json)
  plan sent = p;
  if (!r.model_in_source_dir.empty()) sent.model = r.model_in_source_dir;
  sent.target.power_limit_w = 0;  // as the job: planning only, not carried (warned, emit_sagemaker)
  sent.target.attention_kernel.clear();
  write_text(dir / "plan.json", io::plan_to_json(sent).dump(2) + "\n");
  written.emplace_back("plan.json");
  return written;
}

probe_job probe_plans(const plan& base, const model_spec& m, const resolved_target& t, const calibration_constants& k) {
  probe_job job;
  auto add = [&](plan p, const std::string& label) {
    if (job.plans.size() >= 4) return;
    p.training.grad_accum = 1;
    p.global_batch.reset();
    for (const auto& v : plan_violations(m, p))
      if (!v.message.empty()) return;  // a variant the rules refuse (a sequence the layout cannot split, ...)
    const memory_estimate me = estimate_memory(m, p.training, t.gpu, k.overheads);
    if (!me.fits) return;
    nlohmann::ordered_json j = io::plan_to_json(p);
    for (const char* drop : {"$schema", "schema_version", "name", "check", "headroom", "instance", "nodes", "global_batch_size",
                             "power_limit_w", "attention_kernel"})  // (planning only, as the job: not the trainer's)
      j.erase(drop);
    for (const auto& have : job.plans)
      if (have == j) return;
    job.plans.push_back(j);
    job.labels.push_back(label);
    job.step_s.push_back(estimate_throughput(m, p.training, t.gpu, t.instance_ptr(), k.throughput).step.raw());
  };
  add(base, "the plan");
  // (every-K recomputes some blocks only: whole-model checkpointing is a variant of it too; a helper's sweep found every-K
  // plans probed without it)
  if (base.training.ac.mode != ac_mode::full || base.training.ac.every > 1) {
    plan p = base;
    p.training.ac = checkpointing::full(1);
    add(p, "full activation checkpointing");
  }
  {
    plan p = base;
    p.training.micro_batch *= 2;
    const std::size_t before = job.plans.size();
    add(p, "twice the micro-batch");
    if (job.plans.size() == before && base.training.micro_batch >= 2) {
      p.training.micro_batch = base.training.micro_batch / 2;
      add(p, "half the micro-batch");
    }
  }
  if (base.training.seq_len >= 1024) {
    plan p = base;
    p.training.seq_len = base.training.seq_len / 2;
    add(p, "half the sequence");
  }
  return job;
}

std::int64_t probe_runtime_s(const probe_job& p) {
  double s = 900;
  for (double t : p.step_s) s += 180 + 3.0 * p.steps * t;
  return static_cast<std::int64_t>(std::ceil(s / 300.0)) * 300;
}

std::filesystem::path sagemaker_shapes_path(const context& ctx) {
  return ctx.configs() / "sagemaker" / "createtrainingjob-shapes.json";
}

void add_sagemaker_options(CLI::App* g, const std::shared_ptr<sagemaker::job_settings>& s) {
  g->add_option("--role-arn", s->role_arn, "IAM execution role ARN (RoleArn)");
  g->add_option("--output-s3", s->output_s3, "S3 prefix for the model artifacts (OutputDataConfig.S3OutputPath)");
  g->add_option("--train-s3", s->channels, "input channel [NAME=]S3URI, repeatable (InputDataConfig; NAME defaults to train)");
  g->add_option("--checkpoint-s3", s->checkpoint_s3, "S3 prefix synced with /opt/ml/checkpoints (default <output>/<job>/checkpoints/)");
  g->add_option("--source-s3", s->source_s3, "S3 URI of sourcedir.tar.gz with the entry point (default s3://<output bucket>/<job>/source/sourcedir.tar.gz)");
  g->add_option("--source-dir", s->source_dir,
                "write the job's source dir here: the reference trainer (train.py, bwtrain/, contract.py, training-contract.json, "
                "requirements.txt), the preset configs (models/) and the plan (plan.json); pack it with tar czf and upload it to --source-s3");
  g->add_option("--entry-point", s->entry_point, "training script inside sourcedir.tar.gz")->capture_default_str();
  g->add_option("--region", s->region, "AWS region of the job and the image (default: the training plan's region, else us-west-2)");
  g->add_option("--framework-version", s->framework_version, "PyTorch version of the training image (2.11 ... 2.13: the trainer needs >= 2.11)")
      ->capture_default_str();
  g->add_option("--image-uri", s->image_uri, "training image URI, overriding the DLC lookup");
  g->add_option("--distribution", s->distribution, "torch_distributed (torchrun; the trainer shards with FSDP2/DTensor)")
      ->capture_default_str()
      ->check(CLI::IsMember({"torch_distributed", "smp"}));
  g->add_option("--training-plan-arn", s->training_plan_arn, "Flexible Training Plan ARN (ResourceConfig.TrainingPlanArn)");
  g->add_option("--job-name", s->job_name, "TrainingJobName, used as given")->check(non_empty());
  g->add_option("--base-job-name", s->base_job_name, "job name stem; a -YYYY-MM-DD-HH-MM-SS-mmm timestamp is appended")
      ->check(non_empty());
  g->add_option("--model-id", s->model_id, "the model the trainer loads (hyperparameter model): a Hugging Face id, an s3:// prefix or a preset (default: MODEL)");
  g->add_option("--max-steps", s->max_steps, "optimizer steps to run (default: from --train-tokens, else 1000)")
      ->check(int_range(1, sagemaker::max_steps_limit));
  g->add_option("--train-tokens", s->train_tokens, "tokens to train on (suffixes K, M, B, T: 10B); steps = ceil(tokens / tokens per step)")
      ->transform(CLI::Validator(
          [](std::string& v) -> std::string {  // "10B" -> 10000000000, as --tokens reads it (bwplan/quantity.hpp)
            try {
              v = std::to_string(std::llround(parse_token_count(v, "--train-tokens")));
            } catch (const invalid_request& e) {
              return std::string(e.what()).substr(std::string("--train-tokens: ").size());
            }
            return {};
          },
          "TOKENS"))
      ->check(int_range(1, sagemaker::max_train_tokens));
  g->add_option("--max-runtime", s->max_runtime, "MaxRuntimeInSeconds: seconds or 90m, 36h, 2d (default: estimate x margin + 30 min)")
      ->check(non_empty());
  g->add_option("--runtime-margin", s->runtime_margin, "factor on the estimated training time")->capture_default_str()
      ->check(finite_range(1, sagemaker::max_runtime_margin));
  g->add_option("--max-pending", s->max_pending_s, "MaxPendingTimeInSeconds for training-plan jobs (7200-2419200)")
      ->check(int_range(0, 1'000'000'000));  // 0 omits it; the service model's range checks the rest
  g->add_option("--volume-gb", s->volume_gb, "ML storage volume per instance, GB (default: from the model size)")
      ->check(int_range(1, 1'000'000));
  // 0 omits the field; a negative value was accepted and dropped silently (the service model's range 0-21600 checks the top)
  g->add_option("--keep-alive", s->keep_alive_s, "warm-pool keep-alive, seconds (KeepAlivePeriodInSeconds, 0-21600)")
      ->check(int_range(0, 1'000'000'000));
  g->add_option("--input-mode", s->input_mode, "TrainingInputMode: File | FastFile | Pipe")->capture_default_str();
  g->add_option("--tag", s->tags, "KEY=VALUE tag, repeatable");
  g->add_option("--env", s->env, "KEY=VALUE container environment variable, repeatable (e.g. HF_TOKEN for gated models)");
  g->add_option("--hyperparameter", s->hyperparameters,
                "KEY=VALUE trainer setting outside the plan, repeatable: learning_rate, warmup_steps, seed, data, model_init, "
                "checkpoint_dir, checkpoint_every, measure, measure_warmup, measure_steps (docs/training-contract.md)");
  g->add_option("--subnet", s->subnets, "VPC subnet id, repeatable (VpcConfig)");
  g->add_option("--security-group", s->security_groups, "VPC security group id, repeatable (VpcConfig)");
  g->add_option("--retries", s->retries, "MaximumRetryAttempts (RetryStrategy, 1-30; 0 = none)");
}

namespace {

/// The members of `job` (a CreateTrainingJob request) that `now` gives another value or leaves out, as "path (old → new)"
/// items: the leaves of both objects compared by JSON pointer; the job name (new for every job) is not compared.
std::vector<std::string> regenerated_members(const nlohmann::json& job, const nlohmann::ordered_json& now) {
  std::vector<std::string> out;
  const nlohmann::json flat_old = job.flatten();
  const nlohmann::json flat_new = nlohmann::json(now).flatten();
  // The job name is new for every job, and so are the hyperparameters the SDK makes from it (sagemaker_job_name, and
  // sagemaker_submit_directory under the job's prefix): those two are compared with the old name replaced by the new
  // one where it stands as a path segment or the whole value (a review: every --plan job.json warned of them; a
  // job named "x" must not match the "x" of "s3://bucket/x/"). CheckpointConfig.S3Uri is left to emit_sagemaker's own
  // warning: a new job resumes only from its own prefix.
  const std::string old_name = job.contains("TrainingJobName") && job["TrainingJobName"].is_string() ? job["TrainingJobName"].get<std::string>() : "";
  const std::string new_name = now.contains("TrainingJobName") && now["TrainingJobName"].is_string() ? now["TrainingJobName"].get<std::string>() : "";
  auto renamed = [&](const nlohmann::json& v) {
    if (!v.is_string() || old_name.empty() || old_name == new_name) return v;
    std::string t = v.get<std::string>();
    auto bound = [](char c) { return c == '/' || c == '"'; };
    for (std::size_t at = t.find(old_name); at != std::string::npos;) {
      const std::size_t end = at + old_name.size();
      if ((at == 0 || bound(t[at - 1])) && (end == t.size() || bound(t[end]))) {
        t.replace(at, old_name.size(), new_name);
        at = t.find(old_name, at + new_name.size());
      } else {
        at = t.find(old_name, at + 1);
      }
    }
    return nlohmann::json(t);
  };
  auto from_name = [](const std::string& key) {
    return key == "/HyperParameters/sagemaker_job_name" || key == "/HyperParameters/sagemaker_submit_directory";
  };
  // a value as shown in the warning: long strings from a little before where the two differ, cut on UTF-8 character
  // boundaries ("...-1b/x/ckpt" -> "...-1b/y/ckpt")
  auto shown = [](const nlohmann::json& v, const nlohmann::json& other) {
    std::string t = v.is_string() ? v.get<std::string>() : v.dump();
    if (t.size() <= 40) return t;
    auto continuation = [&t](std::size_t i) { return i < t.size() && (static_cast<unsigned char>(t[i]) & 0xC0) == 0x80; };
    std::size_t from = 0;
    if (other.is_string()) {
      const std::string o = other.get<std::string>();
      while (from < t.size() && from < o.size() && t[from] == o[from]) ++from;
      from = from > 12 ? from - 12 : 0;
      while (from > 0 && continuation(from)) --from;
    }
    std::size_t to = std::min(t.size(), from + 37);
    while (to > from && continuation(to)) --to;
    return (from > 0 ? "..." : "") + t.substr(from, to - from) + (to < t.size() ? "..." : "");
  };
  for (auto it = flat_old.begin(); it != flat_old.end(); ++it) {
    if (it.key() == "/TrainingJobName" || it.key() == "/CheckpointConfig/S3Uri") continue;
    const auto n = flat_new.find(it.key());
    std::string path = it.key().substr(1);
    std::replace(path.begin(), path.end(), '/', '.');
    if (n == flat_new.end()) out.push_back(path + " (" + shown(it.value(), nlohmann::json()) + ", left out)");
    else if (*n != it.value() && !(from_name(it.key()) && *n == renamed(it.value())))
      out.push_back(path + " (" + shown(it.value(), *n) + " -> " + shown(*n, it.value()) + ")");
  }
  return out;
}

}  // namespace

int emit_sagemaker(const context& ctx, const sagemaker::job_settings& s, const std::string& format, const sagemaker::plan_view& plan,
                   const probe_job* probe, const nlohmann::json* source_job) {
  sagemaker::job_request r;
  try {
    r = sagemaker::build_request(plan, s);
  } catch (const plan_error& e) {
    throw flag_error(e.violation());  // what the trainer cannot run: the plan field's flag and the reason
  }
  ctx.warn_unrecorded("the SageMaker job", false, &plan.p.target);
  if (probe) {  // the trainer's probe mode: `train.py --probe probe.json` (the file in the source dir), small runtime
    r.hyperparameters["probe"] = "probe.json";
    r.request["HyperParameters"]["probe"] = sagemaker::sdk_json_encode(nlohmann::ordered_json("probe.json"));
    if (s.max_runtime.empty()) r.request["StoppingCondition"]["MaxRuntimeInSeconds"] = probe_runtime_s(*probe);
    double steps_s = 0;
    for (double t : probe->step_s) steps_s += probe->steps * t;
    r.estimated_s = steps_s;
    r.steps = probe->steps * static_cast<std::int64_t>(probe->plans.size());
    std::string list;
    for (std::size_t i = 0; i < probe->labels.size(); ++i) list += (i ? "; " : "") + probe->labels[i];
    r.notes.erase(std::remove_if(r.notes.begin(), r.notes.end(), [](const std::string& n) { return n.rfind("price:", 0) == 0; }),
                  r.notes.end());
    const auto runtime = r.request["StoppingCondition"]["MaxRuntimeInSeconds"].get<std::int64_t>();
    if (r.price_per_hour > 0)
      r.notes.push_back(fmt::format("price: {:.2f} USD per instance-hour ({}): at most {:.0f} USD for the probe at "
                                    "MaxRuntimeInSeconds {} s",
                                    r.price_per_hour, r.price_label, static_cast<double>(runtime) / 3600 * r.price_per_hour, runtime));
    std::string out = r.request["OutputDataConfig"]["S3OutputPath"].get<std::string>();
    while (!out.empty() && out.back() == '/') out.pop_back();
    r.notes.push_back(fmt::format("probe: {} plan(s) ({}), {} steps each, on one {}; the records land in "
                                  "{}/{}/output/output.tar.gz (measurements.jsonl): bwplan calibrate measurements.jsonl -o profile.json",
                                  probe->plans.size(), list, probe->steps, plan.instance.id, out, r.job_name));
    if (s.source_dir.empty())
      r.warnings.push_back("--probe without --source-dir: the job reads probe.json from its source dir; pass --source-dir DIR to write it "
                           "(with the trainer) and upload DIR as sourcedir.tar.gz");
  }
  const auto path = sagemaker_shapes_path(ctx);
  spdlog::debug("validating the request against {}", path.string());
  const io::service_model model = io::service_model::load(path);
  const auto violations = sagemaker::request_violations(model, r.request);
  if (!violations.empty()) {
    const auto& v = violations.front();
    std::string msg = "SageMaker would reject the CreateTrainingJob request: " + v.to_string();
    if (auto f = flag_for(v.path); !f.empty()) msg += " (from " + f + ")";
    if (violations.size() > 1) msg += fmt::format(" [{} more; -v lists them]", violations.size() - 1);
    for (std::size_t i = 1; i < violations.size(); ++i) spdlog::debug("also: {}", violations[i].to_string());
    throw invalid_request(msg);
  }
  if (!s.source_dir.empty()) {
    auto written = write_source_dir(ctx, s.source_dir, r, plan.p);
    if (probe) {
      write_text(std::filesystem::path(s.source_dir) / "probe.json", probe->plans.dump(2) + "\n");
      written.emplace_back("probe.json");
    }
    std::string list;
    for (const auto& w : written) list += (list.empty() ? "" : ", ") + w;
    r.warnings.push_back(fmt::format("wrote the source dir {} ({}); upload it before submitting: tar czf sourcedir.tar.gz -C {} . && "
                                     "aws s3 cp sourcedir.tar.gz {}",
                                     s.source_dir, list, shell_quote(s.source_dir), r.source_s3));
  }
  if (source_job) {
    if (const auto changed = regenerated_members(*source_job, r.request); !changed.empty()) {
      std::string list;
      for (std::size_t i = 0; i < changed.size(); ++i) list += (i ? "; " : "") + changed[i];
      r.warnings.push_back(fmt::format("--plan read the plan of a SageMaker job; the job's other settings come from the flags, so the new "
                                       "request differs in {} member(s): {} (give --role-arn, --output-s3, --max-steps, --max-runtime, "
                                       "--hyperparameter KEY=VALUE, ... to keep them)",
                                       changed.size(), list));
    }
    // the checkpoint prefix: made from the job name by default, so a new job does not resume from the job's checkpoints
    const nlohmann::json::json_pointer ckpt("/CheckpointConfig/S3Uri");
    const std::string before = source_job->contains(ckpt) && source_job->at(ckpt).is_string() ? source_job->at(ckpt).get<std::string>() : "";
    const std::string after = r.request.contains("CheckpointConfig") ? r.request["CheckpointConfig"].value("S3Uri", "") : "";
    if (!before.empty() && before != after)
      r.warnings.push_back(fmt::format("the new job checkpoints to {}, not to the job's {}, so it does not resume from the job's checkpoints "
                                       "(give --checkpoint-s3 {} to resume)", after.empty() ? "nothing" : after, before, before));
  }
  for (const auto& w : r.warnings) spdlog::warn("{}", w);
  spdlog::info("{}: {} steps, estimated {:.0f} s of training, MaxRuntimeInSeconds {}", r.job_name, r.steps, r.estimated_s,
               r.request["StoppingCondition"]["MaxRuntimeInSeconds"].get<std::int64_t>());
  for (const auto& n : r.notes) spdlog::info("{}", n);
  if (format == "estimator") ctx.out << sagemaker::to_estimator(r).dump(2) << "\n";
  else if (format == "modeltrainer") ctx.out << sagemaker::to_modeltrainer(r).dump(2) << "\n";
  else ctx.out << r.request.dump(2) << "\n";
  return success;
}

runner register_sagemaker(CLI::App& app, context& ctx) {
  auto o = std::make_shared<sagemaker_options>();
  auto* sub = app.add_subcommand("sagemaker", "SageMaker CreateTrainingJob request (or SDK arguments) for one training configuration");
  add_plan_options(sub, o);
  sub->add_option("--format", o->format, "request (CreateTrainingJob JSON) | estimator (SDK v2 PyTorch) | modeltrainer (SDK v3)")
      ->capture_default_str()
      ->check(CLI::IsMember({"request", "estimator", "modeltrainer"}));
  sub->add_flag("--force", o->force, "emit the request even when the plan does not fit in GPU memory");
  sub->add_flag("--probe", o->probe,
                "a short calibration job instead of the training run: the reference trainer runs the plan and up to three variants "
                "(full checkpointing, micro-batch x2 or /2, half the sequence) on one node, 5 steps each, and writes measurement "
                "records (output.tar.gz: measurements.jsonl) for bwplan calibrate; probe.json goes into --source-dir (docs/calibration.md#probe)");
  add_sagemaker_options(sub->add_option_group("SageMaker"), std::shared_ptr<sagemaker::job_settings>(o, &o->job));

  return [o, &ctx]() -> int {
    const hardware_catalog cat = ctx.catalog();
    const resolved_plan rp = resolve_plan(ctx, cat, *o);
    if (!rp.target.instance)
      throw invalid_request("sagemaker: a job runs on instances; give --instance (e.g. ml.p6-b200.48xlarge) instead of a bare --gpu");
    // the node count as resolved: --nodes, else the plan file's `nodes` (a 2-node plan read with --nodes left out was
    // checked against the flag's default of 1: "--gpus 16: ... 1 x 8 = 8", a flag nobody gave)
    const int nodes = rp.p.target.nodes;
    if (o->probe && nodes != 1)
      throw invalid_request(fmt::format("nodes {}: a probe runs on one node (it measures the constants of one GPU and its node); give "
                                        "--nodes 1", nodes));
    const int per_node = rp.target.instance->gpus_per_node;
    if (rp.config.world_size != nodes * per_node)
      throw invalid_request(fmt::format("{} {}: a SageMaker job uses every GPU of its {} instance(s), {} x {} = {}",
                                        o->plan_file.empty() ? "--gpus" : o->plan_file + ": gpus", rp.config.world_size, nodes, nodes,
                                        per_node, nodes * per_node));
    const calibration_constants k = ctx.constants(rp.target.gpu.id, rp.config.stack);  // --calibration
    const memory_estimate me = estimate_memory(rp.model, rp.config, rp.target.gpu, k.overheads);
    if (!me.fits && !o->force) {
      ctx.err << fmt::format("bwplan: {} ({}) does not fit on {}: device peak {} of {}; run `bwplan recommend` or pass --force\n",
                             rp.model.name, describe(rp.config), rp.target.instance->id, human(me.device_peak()), human(me.capacity));
      return failure;
    }
    // CPU offload: the node's RAM must hold what every rank of it offloads (BWP011)
    if (const bytes host = host_memory_per_node(me, rp.config);
        host.raw() > 0 && rp.target.instance->host_memory.raw() > 0 && host > rp.target.instance->host_memory && !o->force) {
      ctx.err << fmt::format("bwplan: {} ({}) does not fit in the host memory of {}: offload {} needs {} per node of its {}; run "
                             "`bwplan recommend` or pass --force\n",
                             rp.model.name, describe(rp.config), rp.target.instance->id, offload_to_string(rp.config.offload), human(host),
                             human(rp.target.instance->host_memory));
      return failure;
    }
    const throughput_estimate te = estimate_throughput(rp.model, rp.config, rp.target.gpu, rp.target.instance_ptr(), k.throughput);
    const io::training_contract contract = ctx.contract();
    // what the reference trainer refuses, named by its plan-file member or its flag (build_request would name the flag)
    if (const auto v = sagemaker::launch_violations({rp.p, rp.model, rp.target.gpu, *rp.target.instance, te, contract}); !v.empty())
      throw_plan_violation(ctx, *o, v.front());
    if (o->probe) {
      // the probe's window is its own (probe_job::steps: the trainer's probe plans run 2 warm-up + 3 measured steps);
      // the request carried measure_warmup 5 / measure_steps 10 beside max_steps 5 and the trainer ran 5 (a review)
      if (o->job.max_steps > 0 || o->job.train_tokens > 0)  // (the request's max_steps ran every probe plan that long)
        throw invalid_request(fmt::format("{}: a probe runs each plan for its own {} steps (2 warm-up, 3 measured); drop it, or drop --probe",
                                          o->job.max_steps > 0 ? "--max-steps" : "--train-tokens", probe_job{}.steps));
      for (const std::string& kv : o->job.hyperparameters) {
        const std::string key = kv.substr(0, kv.find('='));
        if (key == "max_steps" || key == "measure" || key == "measure_warmup" || key == "measure_steps")
          throw invalid_request(fmt::format("--hyperparameter {}: a probe runs each plan for its own {} steps (2 warm-up, 3 measured); "
                                            "leave the measurement window to it, or drop --probe", key, probe_job{}.steps));
      }
      const probe_job pj = probe_plans(rp.p, rp.model, rp.target, k);
      if (pj.plans.empty()) throw invalid_request("--probe: no variant of the plan fits on one " + rp.target.instance->id);
      sagemaker::job_settings js = o->job;
      if (js.job_name.empty() && js.base_job_name.empty())
        js.base_job_name = sagemaker::name_stem("probe-" + rp.model.name + "-" + rp.target.instance->id.substr(rp.target.instance->id.rfind("ml.", 0) == 0 ? 3 : 0), 39);
      if (js.max_steps == 0 && js.train_tokens == 0) js.max_steps = pj.steps;
      return emit_sagemaker(ctx, js, o->format, {rp.p, rp.model, rp.target.gpu, *rp.target.instance, te, contract}, &pj);
    }
    // a job given as --plan: its members the new request does not keep are named (emit_sagemaker)
    std::optional<nlohmann::json> source_job;
    if (!o->plan_file.empty()) {
      nlohmann::json j = nlohmann::json::parse(io::read_text_file(o->plan_file), nullptr, false);
      if (!j.is_discarded() && io::detect_document_kind(j) == document_kind::request) source_job = std::move(j);
      else if (!j.is_discarded() && io::detect_document_kind(j) != document_kind::plan)
        spdlog::warn("--plan {}: only the plan of the SDK arguments is read; their job settings come from the flags", o->plan_file);
    }
    return emit_sagemaker(ctx, o->job, o->format, {rp.p, rp.model, rp.target.gpu, *rp.target.instance, te, contract}, nullptr,
                          source_job ? &*source_job : nullptr);
  };
}

}  // namespace bwplan::cli
