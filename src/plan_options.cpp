// SPDX-License-Identifier: Apache-2.0
// Configuration flags shared by the subcommands that evaluate one plan.
#include "cli.hpp"
#include "input.hpp"

#include <fmt/format.h>

#include <map>
#include <string_view>

namespace bwplan::cli {

void add_plan_options(CLI::App* sub, const std::shared_ptr<plan_options>& o) {
  o->app = sub;
  sub->add_option("MODEL", o->model, "Hugging Face config.json path or bundled preset (e.g. Llama-3.1-8B); optional with --plan");
  sub->add_option("--plan", o->plan_file, "plan file (JSON, docs/plan.schema.json); flags given as well override it")
      ->check(CLI::ExistingFile);
  sub->add_option("--gpu", o->target.gpu, "GPU id from the catalog (h100, h200, b200, b300, ...)")->check(non_empty());
  sub->add_option("--instance", o->target.instance, "instance type (e.g. ml.p6-b200.48xlarge); default when no --gpu")
      ->check(non_empty());
  sub->add_option("--nodes", o->target.nodes, "instances (with --instance)");
  sub->add_option("--gpus", o->gpus, "world size: GPUs in the job (default: all GPUs of the instances, or 1)")
      ->check(int_range(1, plan_limits::max_gpus));
  sub->add_option("--mbs,--micro-batch-size", o->mbs, "micro-batch size per GPU (sequences)");
  sub->add_option("--seq,--seq-len", o->seq, "sequence length (tokens)");
  sub->add_option("--grad-accum", o->grad_accum, "gradient accumulation steps (micro-batches per optimizer step)");
  sub->add_option("--ac", o->ac, "activation checkpointing: none | full | selective-op (torchtitan per-op) | selective-attn (Megatron)")
      ->check(CLI::IsMember({"none", "full", "selective-op", "selective-attn"}));
  sub->add_option("--ac-every", o->ac_every, "with --ac full: recompute every K-th block (1 = all)");
  choice<master_weights>(sub->add_option("--master", o->master, "master weights: fp32 | bf16"),
                         {{"fp32", master_weights::fp32}, {"bf16", master_weights::bf16}});
  choice<sharding>(sub->add_option("--sharding", o->shard,
                                   "none (one GPU / DDP) | full (FSDP2 full shard) | hybrid (shard within --shard-group, replicate "
                                   "across) | grad-op (ZeRO-2-like); default full for >1 GPU"),
                   {{"none", sharding::none}, {"full", sharding::full}, {"hybrid", sharding::hybrid}, {"grad-op", sharding::grad_op}})
      ->each([o](const std::string&) { o->shard_given = true; });
  sub->add_option("--shard-group", o->shard_group, "with --sharding hybrid: GPUs per shard group (default: one node / tp)");
  sub->add_option("--tp", o->tp, "tensor-parallel degree (within a node, with sequence parallel)");
  sub->add_option("--cp", o->cp, "context-parallel degree (ring attention; model states sharded over FSDP x CP)");
  choice<optimizer_impl>(sub->add_option("--optimizer-impl", o->optimizer, "AdamW implementation: fused | foreach"),
                         {{"fused", optimizer_impl::fused}, {"foreach", optimizer_impl::foreach}});
  choice<loss_impl>(sub->add_option("--loss", o->loss, "loss: standard (fp32 logits) | chunked (fused linear cross-entropy)"),
                    {{"standard", loss_impl::standard}, {"chunked", loss_impl::chunked}});
  sub->add_option("--precision", o->precision, "linear-layer GEMM format: bf16 | fp8 | fp8-rowwise | mxfp8 | nvfp4")
      ->check(CLI::IsMember({"bf16", "fp8", "fp8-rowwise", "mxfp8", "nvfp4"}));
  sub->add_option("--bf16-layers", o->bf16_layers,
                  "blocks kept bf16 with a low-precision format: last:N, first:N, first:N,last:M, a fraction (trailing), or none "
                  "(default: none; nvfp4: 0.15 as torchtitan)");
  sub->add_flag("--fp8-all-gather", o->fp8_all_gather, "FSDP2 all-gathers FP8 weights (with --precision fp8)");
  sub->add_option("--ep", o->ep, "expert parallelism (MoE models): routed experts split over ep GPUs (divides experts and GPUs)");
}

void require_support(const hardware_catalog& cat, const gpu_spec& gpu, compute_format f) {
  if (supports(gpu, f)) return;
  std::string ok;
  for (const auto& g : cat.gpus())
    if (supports(g, f)) ok += (ok.empty() ? "" : ", ") + g.id;
  const char* why = f == compute_format::mxfp8 || f == compute_format::nvfp4 ? "needs Blackwell tensor cores"
                                                                              : "needs Hopper or newer tensor cores";
  throw invalid_request(fmt::format("--precision {} is not supported on {} ({}): {}; GPUs that support it: {}", to_string(f),
                                    gpu.id, gpu.architecture, why, ok.empty() ? "none in the catalog" : ok));
}

namespace {

bool given(const plan_options& o, const char* flag) {
  if (o.app == nullptr) return false;
  const CLI::Option* opt = o.app->get_option_no_throw(flag);
  return opt != nullptr && opt->count() > 0;
}

}  // namespace

void apply_plan(plan_options& o, const plan_spec& p) {
  namespace fs = std::filesystem;
  if (!given(o, "MODEL") && o.model.empty() && p.model) {
    o.model = *p.model;
    // A path in a plan is relative to the plan file's folder; a preset name stays as it is.
    const fs::path rel = fs::path(p.file).parent_path() / *p.model;
    if (!p.file.empty() && fs::path(*p.model).is_relative() && fs::exists(rel)) o.model = rel.string();
  }
  if (!given(o, "--instance") && !given(o, "--gpu")) {
    if (p.instance) o.target.instance = *p.instance;
    if (p.gpu) o.target.gpu = *p.gpu;
  }
  if (!given(o, "--nodes") && p.nodes) o.target.nodes = static_cast<int>(*p.nodes);
  if (!given(o, "--gpus") && p.gpus) o.gpus = static_cast<int>(*p.gpus);
  if (!given(o, "--mbs") && p.micro_batch) o.mbs = *p.micro_batch;
  if (!given(o, "--seq") && p.seq_len) o.seq = *p.seq_len;
  if (given(o, "--grad-accum")) o.grad_accum_given = true;
  else if (p.grad_accum) { o.grad_accum = *p.grad_accum; o.grad_accum_given = true; }
  if (!given(o, "--ac") && p.ac) o.ac = *p.ac;
  if (!given(o, "--ac-every") && p.ac_every) o.ac_every = static_cast<int>(*p.ac_every);
  if (!given(o, "--master") && p.master) o.master = *p.master;
  if (!given(o, "--sharding") && p.shard) { o.shard = *p.shard; o.shard_given = true; }
  if (!given(o, "--optimizer-impl") && p.optimizer) o.optimizer = *p.optimizer;
  if (!given(o, "--loss") && p.loss) o.loss = *p.loss;
  if (!given(o, "--precision") && p.precision) o.precision = *p.precision;
  if (!given(o, "--shard-group") && p.shard_group) o.shard_group = static_cast<int>(*p.shard_group);
  if (!given(o, "--tp") && p.tp) o.tp = *p.tp;
  if (!given(o, "--cp") && p.cp) o.cp = *p.cp;
  if (!given(o, "--ep") && p.ep) o.ep = *p.ep;
  if (!given(o, "--pp") && p.pp) o.pp = *p.pp;
  if (!given(o, "--global-batch-size") && p.global_batch) o.global_batch = *p.global_batch;
}

void apply_plan_file(plan_options& o) {
  if (o.plan_file.empty() || o.plan) return;
  o.plan = io::load_plan(o.plan_file);
  apply_plan(o, *o.plan);
}

void check_ranges(const plan_options& o) {
  using L = plan_limits;
  auto range = [](const char* flag, std::int64_t v, std::int64_t lo, std::int64_t hi) {
    if (v < lo || v > hi)
      throw invalid_request(fmt::format("{}: out of range: must be between {} and {}, got {}", flag, lo, hi, v));
  };
  range("--nodes", o.target.nodes, 1, L::max_nodes);
  if (o.gpus != 0) range("--gpus", o.gpus, 1, L::max_gpus);
  range("--mbs", o.mbs, 1, L::max_micro_batch);
  range("--seq", o.seq, 1, L::max_seq_len);
  range("--grad-accum", o.grad_accum, 1, L::max_grad_accum);
  range("--ac-every", o.ac_every, 1, L::max_ac_every);
  if (o.global_batch != 0) range("global_batch_size", o.global_batch, 1, L::max_global_batch);
  for (auto [name, v] : {std::pair{"tp", o.tp}, std::pair{"cp", o.cp}, std::pair{"ep", o.ep}, std::pair{"pp", o.pp}})
    range(name, v, 1, L::max_degree);
}

training_config build_config(const plan_options& o, const resolved_target& t) {
  if (o.target.nodes < 1) throw invalid_request("--nodes: must be >= 1, got " + std::to_string(o.target.nodes));
  if (o.gpus < 0) throw invalid_request("--gpus: world size must be >= 1, got " + std::to_string(o.gpus));
  check_ranges(o);
  training_config c;
  c.micro_batch = o.mbs;
  c.seq_len = o.seq;
  c.grad_accum = o.grad_accum;
  c.gpus_per_node = t.instance ? t.instance->gpus_per_node : std::max(1, o.gpus);
  c.world_size = o.gpus > 0 ? o.gpus : (t.instance ? t.instance->gpus_per_node * o.target.nodes : 1);
  if (t.instance && c.world_size > t.instance->gpus_per_node * o.target.nodes)
    throw invalid_request(fmt::format("--gpus {} exceeds the {} GPUs of {} x {}", c.world_size,
                                      t.instance->gpus_per_node * o.target.nodes, o.target.nodes, t.instance->id));
  c.ac_enabled = o.ac == "full";
  c.selective = o.ac == "selective-op" ? selective_ac::op : o.ac == "selective-attn" ? selective_ac::attn : selective_ac::none;
  c.format = parse_format(o.precision).value_or(compute_format::bf16);
  if (!o.bf16_layers.empty()) c.bf16_layers = parse_bf16_blocks(o.bf16_layers);
  c.fp8_all_gather = o.fp8_all_gather;
  c.ac_every = o.ac_every;
  c.master = o.master;
  c.shard = o.shard_given ? o.shard : (c.world_size > 1 ? sharding::full : sharding::none);
  c.optimizer = o.optimizer;
  c.loss = o.loss;
  c.shard_group = o.shard_group;  // tp, cp, ep: set by resolve_plan (bwplan check reports bad degrees as BWP005)
  if (o.shard_group < 0) throw invalid_request("--shard-group: must be >= 1, got " + std::to_string(o.shard_group));
  validate(c);
  if (static_cast<double>(c.micro_batch) * static_cast<double>(c.seq_len) * static_cast<double>(c.grad_accum) *
          static_cast<double>(c.world_size) > 0x1p60)
    throw invalid_request("--mbs x --seq x --grad-accum x --gpus: out of range: more than 2^60 tokens per optimizer step");
  if (o.ac_every != 1 && !c.ac_enabled) throw invalid_request("--ac-every needs --ac full");
  return c;
}

resolved_plan resolve_plan(const context& ctx, const hardware_catalog& cat, const plan_options& opts) {
  plan_options o = opts;
  apply_plan_file(o);
  if (o.model.empty()) throw invalid_request("MODEL: a model is required (a preset, a config.json path, or --plan FILE)");
  resolved_plan rp{ctx.model(o.model), resolve_target(cat, o.target, "ml.p6-b200.48xlarge"), {}};
  rp.config = build_config(o, rp.target);
  training_config& c = rp.config;
  // What this release can evaluate: the one table of io/plan.hpp (bwplan check reports the same as BWP009).
  const precision_info* prec = find_precision(o.precision);
  if (prec == nullptr || !prec->modelled) {
    std::string ok;
    for (const auto& p : precisions())
      if (p.modelled) ok += (ok.empty() ? "" : ", ") + std::string(p.name);
    throw invalid_request("precision '" + o.precision + "' is not modelled by this release (modelled: " + ok + ")");
  }
  require_support(cat, rp.target.gpu, c.format);
  for (auto [name, v] : {std::pair{"tp", o.tp}, std::pair{"cp", o.cp}, std::pair{"ep", o.ep}, std::pair{"pp", o.pp}})
    if (v > modelled_degree(name) && !(std::string_view(name) == "ep" && rp.model.is_moe()))
      throw invalid_request(fmt::format("{}={}: this release models data, tensor and context parallelism (and expert parallelism for MoE models) only; set {} to 1", name, v, name));
  c.tp = static_cast<int>(o.tp);
  c.cp = static_cast<int>(o.cp);
  c.ep = static_cast<int>(o.ep);
  validate(c);
  if (rp.model.heads % c.tp != 0 || rp.model.kv_heads % c.tp != 0)
    throw invalid_request(fmt::format("--tp {} does not divide the {} attention heads and {} KV heads of {}", c.tp, rp.model.heads,
                                      rp.model.kv_heads, rp.model.name));
  if (rp.model.positions > 0 && c.seq_len > rp.model.positions)
    throw invalid_request(fmt::format("--seq {} exceeds the {} learned position embeddings of {} (n_positions)", c.seq_len,
                                      rp.model.positions, rp.model.name));
  if (rp.model.is_moe()) detail::validate_moe(rp.model, c);  // expert parallelism (issue 7): experts / ep
  if (o.global_batch > 0) {
    const std::int64_t per = c.micro_batch * c.dp();
    if (o.global_batch % per != 0)
      throw invalid_request(fmt::format("global_batch_size {} is not divisible by micro-batch {} x data-parallel size {} = {}",
                                        o.global_batch, c.micro_batch, c.world_size, per));
    if (o.grad_accum_given && per * c.grad_accum != o.global_batch)
      throw invalid_request(fmt::format("global_batch_size {} != micro-batch {} x data-parallel size {} x grad_accum {}",
                                        o.global_batch, c.micro_batch, c.world_size, c.grad_accum));
    c.grad_accum = o.global_batch / per;
  }
  return rp;
}

}  // namespace bwplan::cli
