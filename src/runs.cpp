// SPDX-License-Identifier: Apache-2.0
#include "runs.hpp"

#include <bwplan/io/calibration.hpp>
#include <bwplan/io/file.hpp>
#include <bwplan/io/json.hpp>
#include <bwplan/io/plan.hpp>

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <filesystem>
#include <sstream>

namespace bwplan::cli {

const nlohmann::json& run_line::field(const char* k) const {
  auto it = r.find(k);
  if (it == r.end() || it->is_null()) throw config_error(where, std::string("/") + k, "missing required field");
  return *it;
}
std::int64_t run_line::integer(const char* k) const {
  const auto& v = field(k);
  if (!v.is_number_integer() || v.get<std::int64_t>() < 1 || v.get<std::int64_t>() > (std::int64_t{1} << 24))
    throw config_error(where, std::string("/") + k, "expected an integer between 1 and 16777216, got " + dump(v));
  return v.get<std::int64_t>();
}
double run_line::number(const char* k) const {
  // measured tokens/s and bytes: at least 0.001 (a subnormal 1e-308 passed "positive" and made every relative error
  // against it infinite: validate printed "inf%")
  const auto& v = field(k);
  if (!v.is_number() || !(v.get<double>() >= 1e-3) || !std::isfinite(v.get<double>()))
    throw config_error(where, std::string("/") + k, "expected a positive number of at least 0.001, got " + dump(v));
  return v.get<double>();
}
std::string run_line::text(const char* k) const {
  const auto& v = field(k);
  if (!v.is_string()) throw config_error(where, std::string("/") + k, std::string("expected a string, got ") + v.type_name());
  return v.get<std::string>();
}
std::string run_line::text_or(const char* k, const std::string& fallback) const {
  auto it = r.find(k);
  if (it == r.end() || it->is_null()) return fallback;
  return text(k);
}
bool run_line::boolean_or(const char* k, bool fallback) const {
  auto it = r.find(k);
  if (it == r.end() || it->is_null()) return fallback;
  if (!it->is_boolean()) throw config_error(where, std::string("/") + k, std::string("expected true or false, got ") + it->type_name());
  return it->get<bool>();
}
std::string run_line::dump(const nlohmann::json& v) {
  std::string d = v.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  return d.size() > 40 ? d.substr(0, 40) + "..." : d;
}

/// The run's micro-batches per step, `grad_accum` (absent or null: 1); an integer in [1, 1048576] (a review: 0 or −5
/// was taken as 1, 2.5 or "4" ignored, silently; a ground-truth row's was not read at all: an audit).
static void read_grad_accum(const run_line& rl, training_config& c) {
  if (auto it = rl.r.find("grad_accum"); it != rl.r.end() && !it->is_null()) {
    if (!it->is_number_integer() || it->get<std::int64_t>() < 1 || it->get<std::int64_t>() > 1'048'576)
      throw config_error(rl.where, "/grad_accum", "expected an integer between 1 and 1048576, got " + run_line::dump(*it));
    c.grad_accum = it->get<std::int64_t>();
  }
}

training_config ground_truth_config(const run_line& rl) {
  training_config c;
  read_grad_accum(rl, c);
  c.micro_batch = rl.integer("mbs");
  c.seq_len = rl.integer("seq");
  const std::string recipe = rl.text("recipe");
  const std::string ac = rl.text("ac");
  if (recipe == "amp") { c.shard = sharding::none; c.master = master_weights::fp32; }
  else if (recipe == "fsdp2") { c.shard = sharding::full; c.master = master_weights::fp32; }
  else if (recipe == "bf16") { c.shard = sharding::none; c.master = master_weights::bf16; }
  else throw config_error(rl.where, "/recipe", "unknown recipe '" + recipe + "'");
  if (ac != "none" && ac != "full" && ac != "half") throw config_error(rl.where, "/ac", "unknown ac '" + ac + "' (none, full, half)");
  c.ac = ac == "none" ? checkpointing::none() : checkpointing::full(ac == "half" ? 2 : 1);
  const std::string optim = rl.text_or("optim", "fused");
  if (optim != "fused" && optim != "foreach") throw config_error(rl.where, "/optim", "unknown optim '" + optim + "' (fused, foreach)");
  if (optim == "foreach") c.optimizer = optimizer_impl::foreach;
  if (const std::string st = rl.text_or("stack", "hf"); auto s = parse_stack(st)) c.stack = *s;
  else throw config_error(rl.where, "/stack", "unknown stack '" + st + "' (hf, torchtitan, torchtune, megatron)");
  // the ground truth's `impl: hf` rows ran transformers' LlamaForCausalLM (its RMSNorm and rotary tables as published)
  if (rl.text_or("impl", "") == "hf") c.modules = module_kernels::transformers;
  if (const std::string mk = rl.text_or("modules", ""); !mk.empty()) {
    const auto k = parse_module_kernels(mk);
    if (!k) throw config_error(rl.where, "/modules", "unknown modules '" + mk + "' (fused, transformers)");
    c.modules = *k;
  }
  return c;
}

void check_run_config(const model_spec& m, const training_config& c, const std::string& where, const std::string& prefix) {
  plan p;
  p.training = c;
  for (const auto& v : plan_violations(m, p)) throw config_error(where, prefix + v.pointer, v.message);
}

std::string gpu_id_from_device(const hardware_catalog& cat, const std::string& device) {
  std::string d = device;
  std::transform(d.begin(), d.end(), d.begin(), [](unsigned char ch) { return static_cast<char>(std::tolower(ch)); });
  // the longest id or alias the name contains: "NVIDIA A100-SXM4-40GB" is the alias a100-sxm4-40gb of a100-40gb
  std::string best, best_id;
  for (const auto& g : cat.gpus())
    if (d.find(g.id) != std::string::npos && g.id.size() > best.size()) best = best_id = g.id;
  for (const auto& [alias, id] : cat.aliases())
    if (d.find(alias) != std::string::npos && alias.size() > best.size()) { best = alias; best_id = id; }
  return best_id;
}

void fill_from_record(const context& ctx, const hardware_catalog& cat, const run_line& rl, const std::string& models_dir,
                      measured_run& m) {
  namespace fs = std::filesystem;
  const nlohmann::json& r = rl.r;
  const std::string& where = rl.where;
  const fs::path models(models_dir);
  auto pl = r.find("plan");
  if (pl == r.end() || !pl->is_object()) throw config_error(where, "/plan", "missing required field");
  nlohmann::json pj = nlohmann::json::object();
  for (const char* k : {"power_limit_w", "attention_kernel"})  // planning only: a trainer record never has them (a review:
    if (auto it = pl->find(k); it != pl->end() && !it->is_null())  // they were read and then ignored)
      throw config_error(where, std::string("/plan/") + k,
                         "not read from a measured run (the trainer does not record it); give the global --power-limit or "
                         "--attention-kernel for the runs instead");
  for (const auto& k : io::plan_keys())
    if (auto it = pl->find(k); it != pl->end() && !it->is_null() && k != "check" && k != "headroom") pj[k] = *it;
  const plan_document d = io::plan_from_json(pj, where + " /plan");
  m.config = d.value.training;
  if (!d.has("sharding")) m.config.shard = sharding::full;
  int gpus = 1;
  if (auto g = pl->find("gpus"); g != pl->end() && !g->is_null()) {  // (a count below 1 was taken as 1, silently)
    if (!g->is_number_integer() || g->get<std::int64_t>() < 1 || g->get<std::int64_t>() > 1'048'576)
      throw config_error(where, "/plan/gpus", "expected a GPU count between 1 and 1048576, got " + run_line::dump(*g));
    gpus = static_cast<int>(g->get<std::int64_t>());
  }
  m.config.world_size = gpus;
  m.config.gpus_per_node = std::min(m.config.world_size, 8);
  // the instances the plan ran on: its nodes and their network (a 2-node record was priced as 16 GPUs on one NVLink
  // node, and an unknown instance was read without a word)
  if (!d.value.target.instance.empty()) {
    try {
      m.instance = cat.instance(d.value.target.instance);
    } catch (const invalid_request& e) {
      throw config_error(where, "/plan/instance", e.what());
    }
    const int per_node = m.instance->gpus_per_node, nodes = d.value.target.nodes;
    if (!pl->contains("gpus") || !(*pl)["gpus"].is_number_integer()) m.config.world_size = nodes * per_node;
    else if (m.config.world_size != nodes * per_node)
      throw config_error(where, "/plan/gpus", fmt::format("{} GPUs on {} x {} ({} GPUs each): a SageMaker job uses every GPU of its "
                                                          "instances", m.config.world_size, nodes, m.instance->id, per_node));
    m.config.gpus_per_node = per_node;
    m.gpu = m.instance->gpu;
  }
  read_grad_accum(rl, m.config);  // the micro-batches the run took per step
  if (auto it = r.find("gpu"); it != r.end() && !it->is_null() && !it->is_string())
    throw config_error(where, "/gpu", std::string("expected the device name (a string), got ") + it->type_name());
  if (auto it = r.find("gpu"); it != r.end() && it->is_string()) {  // the device the record ran on
    const std::string id = gpu_id_from_device(cat, it->get<std::string>());
    if (!id.empty()) m.gpu = id;
    else if (!m.instance)  // (with an instance: its GPU)
      throw config_error(where, "/gpu", "no GPU of the catalog matches '" + it->get<std::string>().substr(0, 60) +
                                            "' (bwplan hardware lists them; the plan names no instance to take it from)");
  }
  const std::string model = d.value.model;
  const fs::path local = models / (model + ".json");
  try {
    m.model = fs::exists(local) ? io::load_model(local, model) : ctx.model(model);
  } catch (const config_error&) {
    throw;  // (names its own file)
  } catch (const error& e) {
    throw config_error(where, "/plan/model", e.what());
  }
  m.label = fmt::format("{} {} mbs={} seq={} ac={} gpus={}", model, rl.text_or("recipe", "?"), m.config.micro_batch, m.config.seq_len,
                        to_string(m.config.ac), m.config.world_size);
}

void read_env_line(const hardware_catalog& cat, const run_line& rl, std::string& gpu, double& context_used, double& context_dist) {
  if (const std::string name = rl.text_or("gpu", ""); !name.empty()) {
    gpu = gpu_id_from_device(cat, name);
    if (gpu.empty()) throw config_error(rl.where, "/gpu", "no GPU of the catalog matches '" + name.substr(0, 60) + "' (bwplan hardware lists them)");
  }
  // the CUDA context (and NCCL's buffers after it), bytes: what a profile may carry (cuda_context, nccl: 0-8 GiB)
  for (auto [key, dst] : {std::pair{"context_used", &context_used}, std::pair{"context_used_after_dist", &context_dist}}) {
    auto it = rl.r.find(key);
    if (it == rl.r.end() || it->is_null()) continue;
    if (!it->is_number() || !(it->get<double>() >= 0) || !(it->get<double>() <= 8.0 * 1024 * 1024 * 1024))
      throw config_error(rl.where, std::string("/") + key, "expected bytes between 0 and 8589934592 (8 GiB), got " + run_line::dump(*it));
    *dst = it->get<double>();
  }
}

std::string ground_truth_gpu(const hardware_catalog& cat, const run_line& rl, const std::string& fallback) {
  // a row may name its own device (a review: "gpu": "bogus-gpu" on every row was evaluated on the env line's H200)
  auto g = rl.r.find("gpu");
  if (g == rl.r.end() || g->is_null()) return fallback;
  if (!g->is_string()) throw config_error(rl.where, "/gpu", std::string("expected the device name (a string), got ") + g->type_name());
  const std::string id = gpu_id_from_device(cat, g->get<std::string>());
  if (id.empty())
    throw config_error(rl.where, "/gpu", "no GPU of the catalog matches '" + g->get<std::string>().substr(0, 60) + "' (bwplan hardware lists them)");
  return id;
}

void check_measured_rate(const std::string& where, double tokens_per_s, const throughput_estimate& te) {
  // (a review: 20 x the measured rate, about 500 % MFU, was fitted without a word)
  if (te.tokens_per_s > 0 && te.mfu_format > 0) {
    const double mfu = te.mfu_format * tokens_per_s / te.tokens_per_s;
    if (mfu > 1)
      throw config_error(where, "/tokens_per_s", fmt::format("{:.6g} tokens/s runs the model's FLOPs at {}% of the GPUs' dense "
                                                            "peak in the plan's format: not a measurement", tokens_per_s,
                                                            100 * mfu < 1e6 ? fmt::format("{:.0f}", 100 * mfu) : fmt::format("{:.3g}", 100 * mfu)));
  }
}

void check_measured_peaks(const std::string& where, double peak_allocated, double peak_reserved, const gpu_spec& gpu) {
  // what no run can measure (a review: 931,322 GiB "fits" on a 140 GiB H200; reserved below allocated)
  if (peak_reserved < peak_allocated)
    throw config_error(where, "/peak_reserved", fmt::format("{:.0f} bytes is below peak_allocated, {:.0f}: the caching allocator "
                                                           "reserves every byte it allocates", peak_reserved, peak_allocated));
  const double total = gpu.hbm_total.raw();
  if (total > 0 && peak_reserved > total)
    throw config_error(where, "/peak_reserved", fmt::format("{:.0f} bytes is above the {:.0f} bytes of one {} (the catalog's HBM)",
                                                           peak_reserved, total, gpu.id));
}

run_file read_runs(const context& ctx, const hardware_catalog& cat, const std::string& path, const std::string& models_dir) {
  namespace fs = std::filesystem;
  run_file f;
  f.path = path;
  f.shown = io::display_path(path);
  const std::string text = io::read_text_file(path);
  f.sha256 = io::sha256_hex(text);
  const fs::path models = models_dir.empty() ? fs::path(path).parent_path() / "models" : fs::path(models_dir);
  std::istringstream in(text);
  std::string line, gpu = "h200";
  double context_used = 0, context_dist = 0;
  std::size_t lineno = 0;
  while (std::getline(in, line)) {
    ++lineno;
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    const std::string where = fmt::format("{}:{}", f.shown, lineno);
    const auto r = io::parse_json(line, where);
    if (!r.is_object()) throw config_error(where, "", std::string("expected a JSON object (one run per line), got ") + r.type_name());
    const run_line rl{r, where};
    if (rl.text_or("kind", "") == "env") {
      ++f.env_lines;
      read_env_line(cat, rl, gpu, context_used, context_dist);
      if (auto it = r.find("torch"); it != r.end() && it->is_string()) f.software = "torch " + it->get<std::string>();
      continue;
    }
    measured_run m;
    m.source = where;
    m.gpu = gpu;
    m.ok = rl.boolean_or("ok", false);
    auto pl = r.find("plan");
    if (pl != r.end() && !pl->is_object() && !pl->is_null())  // (an array was read as a ground-truth row)
      throw config_error(where, "/plan", std::string("expected the plan the run ran (an object), got ") + pl->type_name());
    if (pl != r.end() && pl->is_object()) {  // a trainer record: the plan it ran
      fill_from_record(ctx, cat, rl, models.string(), m);
    } else {
      m.config = ground_truth_config(rl);
      m.gpu = ground_truth_gpu(cat, rl, gpu);
      const std::string model = rl.text("model");
      m.model = io::load_model(models / (model + ".json"), model);
      m.variant = rl.text_or("impl", "");
      m.label = fmt::format("{} {} mbs={} seq={} ac={}{}{}", model, rl.text("recipe"), m.config.micro_batch, m.config.seq_len,
                            rl.text("ac"), rl.text_or("optim", "") == "foreach" ? " foreach" : "",
                            m.variant.empty() ? "" : " impl=" + m.variant);
    }
    if (m.ok) {
      m.tokens_per_s = rl.number("tokens_per_s");
      m.peak_allocated = rl.number("peak_allocated");
      m.peak_reserved = rl.number("peak_reserved");
      check_measured_peaks(where, m.peak_allocated, m.peak_reserved, cat.gpu(m.gpu));
    }
    // the rules every plan obeys, named by the line and member of the record (not by a flag the user never gave)
    check_run_config(m.model, m.config, where, pl != r.end() && pl->is_object() ? "/plan" : "");
    require_power_within_rating(cat.gpu(m.gpu));  // (--power-limit above it was capped silently in calibrate: a review)
    if (m.ok) {
      const gpu_spec& g = cat.gpu(m.gpu);
      check_measured_rate(where, m.tokens_per_s,
                          estimate_throughput(m.model, m.config, g, m.instance ? &*m.instance : nullptr,
                                              ctx.constants(g.id, m.config.stack).throughput));
    }
    const bool dist = m.config.world_size > 1 || m.config.sharded();
    m.non_pytorch = dist && context_dist > 0 ? context_dist : context_used;
    m.cuda_context = context_used;
    m.nccl = context_dist > context_used ? context_dist - context_used : 0;
    f.runs.push_back(std::move(m));
  }
  if (f.runs.empty())
    throw config_error(f.shown, "", "no runs in the file (expected JSON lines with model, recipe, mbs, seq and ac, as "
                                    "../shared/groundtruth/measure.py writes them, or the trainer's records with plan)");
  return f;
}

}  // namespace bwplan::cli
