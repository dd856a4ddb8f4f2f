// SPDX-License-Identifier: Apache-2.0
// The plan flags shared by the subcommands that evaluate one plan, and their resolution into a bwplan::plan.
#include "cli.hpp"
#include "input.hpp"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <map>
#include <string_view>

namespace bwplan::cli {

void add_plan_options(CLI::App* sub, const std::shared_ptr<plan_options>& o) {
  o->app = sub;
  sub->add_option("MODEL", o->model, "Hugging Face config.json path or bundled preset (e.g. Llama-3.1-8B); optional with --plan");
  sub->add_option("--plan", o->plan_file, "plan file (JSON, docs/plan.schema.json); flags given as well override it")
      ->check(CLI::ExistingFile);
  sub->add_option("--gpu", o->target.gpu, "GPU id from the catalog (h100, h200, b200, b300, ...): a bare GPU, --gpus of them on one node of its interconnect (NVLink or PCIe), no network")->check(non_empty());
  sub->add_option("--instance", o->target.instance, "instance type (e.g. ml.p6-b200.48xlarge); default when no --gpu")
      ->check(non_empty());
  sub->add_option("--nodes", o->target.nodes, "instances (with --instance; with --gpu: GPUs = nodes unless --gpus)")
      ->check(int_range(1, plan_limits::max_nodes));
  sub->add_option("--gpus", o->gpus, "world size: GPUs in the job (default: all GPUs of the instances, or 1)")
      ->check(int_range(1, plan_limits::max_gpus));
  sub->add_option("--mbs,--micro-batch-size", o->mbs, "micro-batch size per GPU (sequences)");
  sub->add_option("--seq,--seq-len", o->seq, "sequence length (tokens; default 4096, or the model's context when shorter)");
  sub->add_option("--grad-accum", o->grad_accum, "gradient accumulation steps (micro-batches per optimizer step)");
  sub->add_option("--ac", o->ac,
                  "activation checkpointing: none | full | every-K (every K-th block) | selective-op (torchtitan per-op) | "
                  "selective-attn (Megatron)")
      ->option_text("none|full|every-K|selective-op|selective-attn");
  sub->add_option("--ac-every", o->ac_every, "with --ac full: recompute every K-th block (1 = all; same as --ac every-K)");
  choice<master_weights>(sub->add_option("--master", o->master, "master weights: fp32 | bf16"),
                         {{"fp32", master_weights::fp32}, {"bf16", master_weights::bf16}});
  choice<sharding>(sub->add_option("--sharding", o->shard,
                                   "none (one GPU / DDP) | full (FSDP2 full shard) | hybrid (shard within --shard-group, replicate "
                                   "across) | grad-op (ZeRO-2-like) | optimizer (ZeRO-1 / Megatron distributed optimizer: optimizer "
                                   "states and fp32 masters sharded); default full for >1 GPU, none on stack megatron"),
                   {{"none", sharding::none}, {"full", sharding::full}, {"hybrid", sharding::hybrid}, {"grad-op", sharding::grad_op},
                    {"optimizer", sharding::optimizer}});
  sub->add_option("--shard-group", o->shard_group,
                  "with --sharding hybrid: GPUs per shard group (default: one node / tp); with --sharding optimizer: GPUs one "
                  "optimizer instance shards the states over (default: every data-parallel rank; Megatron's "
                  "--num-distributed-optimizer-instances = data-parallel size / this)")
      ->check(int_range(1, 1048576));
  sub->add_option("--tp", o->tp, "tensor-parallel degree (within a node, or an NVLink domain spanning instances; with sequence parallel unless --no-sequence-parallel)");
  sub->add_option("--cp", o->cp, "context-parallel degree (ring attention; model states sharded over FSDP x CP)");
  sub->add_option("--ep", o->ep, "expert parallelism (MoE models): routed experts split over ep GPUs (divides experts and GPUs)");
  sub->add_option("--pp", o->pp, "pipeline-parallel degree: stages the layers are split over (uneven splits as torchtitan)");
  sub->add_option("--pp-schedule", o->pp_schedule, "pipeline schedule with --pp > 1: 1f1b | interleaved (with --vpp virtual stages)")
      ->option_text("1f1b|interleaved");
  sub->add_option("--vpp", o->vpp, "virtual pipeline stages per rank (--pp-schedule interleaved; >= 2)");
  choice<optimizer_impl>(sub->add_option("--optimizer-impl", o->optimizer, "AdamW implementation: fused | foreach"),
                         {{"fused", optimizer_impl::fused}, {"foreach", optimizer_impl::foreach}});
  choice<loss_impl>(sub->add_option("--loss", o->loss, "loss: standard (fp32 logits) | chunked (the stack's chunked loss; hf: the "
                                                      "reference trainer's 8 checkpointed chunks) | liger (Liger-Kernel's fused "
                                                      "linear cross-entropy, stack hf)"),
                    {{"standard", loss_impl::standard}, {"chunked", loss_impl::chunked}, {"liger", loss_impl::liger}});
  sub->add_option("--precision", o->precision, "linear-layer GEMM format: " + precision_names(" | "))
      ->option_text("bf16|fp8|fp8-rowwise|mxfp8|nvfp4");
  sub->add_option("--bf16-layers", o->bf16_layers,
                  "blocks kept bf16 with a low-precision format: last:N, first:N, first:N,last:M, a fraction (trailing), or none "
                  "(default: none; nvfp4: 0.15 as torchtitan)");
  sub->add_flag("--fp8-all-gather", o->fp8_all_gather, "FSDP2 all-gathers FP8 weights (with --precision fp8)");
  sub->add_option("--finetune", o->finetune,
                  "full (every parameter) | lora (frozen bf16 base + LoRA adapters, PEFT) | qlora (LoRA over an NF4 base, bitsandbytes)")
      ->option_text("full|lora|qlora");
  sub->add_option("--optimizer", o->optimizer_name,
                  "adamw | adamw-8bit | paged-adamw-8bit (bitsandbytes) | adafactor | sgd (momentum) | lion")
      ->option_text("adamw|adamw-8bit|paged-adamw-8bit|adafactor|sgd|lion");
  sub->add_option("--lora-rank", o->lora_rank, "LoRA rank r (with --finetune lora|qlora; default 16)")->check(int_range(1, 65536));
  sub->add_option("--lora-alpha", o->lora_alpha, "LoRA alpha: updates scaled by alpha / r (default 32)");
  sub->add_option("--lora-targets", o->lora_targets,
                  "adapted block linears: attention | mlp | all-linear | a list such as q_proj,v_proj (default all-linear)");
  sub->add_option("--lora-dropout", o->lora_dropout, "LoRA dropout probability in [0, 1) (default 0)");
  sub->add_option("--stack", o->stack,
                  "training stack whose memory inventory applies: hf (the reference trainer, default) | torchtitan | torchtune | "
                  "megatron (docs/stacks.md)")
      ->option_text("hf|torchtitan|torchtune|megatron");
  sub->add_flag("--compile", o->compile,
                "torch.compile as the stack applies it (hf: each block; torchtitan, torchtune: blocks and loss; not megatron)");
  sub->add_option("--modules", o->modules,
                  "RMSNorm and RoPE kernels of the hf stack's blocks: fused (F.rms_norm, RoPE in the activations' dtype; the "
                  "reference trainer installs them; default) | transformers (transformers' LlamaRMSNorm and rotary tables as "
                  "published: more saved bytes and element-wise traffic; docs/stacks.md#modules)")
      ->option_text("fused|transformers");
  sub->add_flag("--expandable-segments", o->expandable_segments,
                "run with PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True (the caching allocator's setting; the SageMaker job sets it)");
  sub->add_option("--offload", o->offload,
                  "CPU offload: none, or a list of optimizer (states, masters, gradients and the step on the host), params (the "
                  "FSDP-sharded parameters: FSDP2 CPUOffloadPolicy; with optimizer and --sharding full), activations (the "
                  "checkpoints of --ac full)")
      ->option_text("none|optimizer[,params][,activations]");
  sub->add_flag("--optimizer-in-backward", o->optimizer_in_backward,
                "step each parameter as soon as its gradient is complete and free the gradient (torchtune's optimizer_in_bwd; "
                "--stack torchtune, one GPU, no accumulation)");
  sub->add_flag("--no-sequence-parallel", o->no_sequence_parallel,
                "tensor parallelism without sequence parallel: norms and dropout run on the whole sequence on every tp rank "
                "(Megatron-LM without --sequence-parallel; --stack megatron)");
  sub->add_flag("--fsdp-embedding-units", o->fsdp_embedding_units,
                "FSDP2 shards the token embedding and the LM head as units of their own, gathered only while they run "
                "(torchtune custom_sharded_layers ['tok_embeddings', 'output']; torchtitan since 2025-07; --sharding full or hybrid)");
  sub->add_flag("--tp-comm-overlap", o->tp_comm_overlap,
                "overlap the tensor-parallel all-gathers and reduce-scatters with the GEMMs (Megatron-LM --tp-comm-overlap, "
                "Transformer Engine userbuffers, as Megatron-Bridge's performance presets; --stack megatron)");
  sub->add_flag("--moe-a2a-overlap", o->moe_a2a_overlap,
                "overlap each micro-batch's MoE all-to-all with another micro-batch's compute (Megatron-Core "
                "overlap_moe_expert_parallel_comm, as Megatron-Bridge's H100 MoE presets set it); without it the "
                "all-to-all is waited for where it is issued");
}

std::string plan_flag(std::string_view field) {
  static const std::map<std::string_view, std::string_view> flags{
      {"micro_batch_size", "--mbs"},     {"seq_len", "--seq"},         {"grad_accum", "--grad-accum"},
      {"gpus", "--gpus"},                {"nodes", "--nodes"},         {"gpus_per_node", "--instance"},
      {"activation_checkpointing", "--ac"}, {"fp8_all_gather", "--fp8-all-gather"}, {"tp", "--tp"},
      {"cp", "--cp"},                    {"ep", "--ep"},               {"pp", "--pp"},
      {"pp_schedule", "--pp-schedule"},  {"vpp", "--vpp"},
      {"shard_group", "--shard-group"},  {"sharding", "--sharding"},   {"precision", "--precision"},
      {"bf16_layers", "--bf16-layers"},  {"headroom", "--headroom"},   {"global_batch_tokens", "--global-batch-tokens"},
      {"master_weights", "--master"},    {"loss", "--loss"},           {"optimizer_impl", "--optimizer-impl"},
      {"optimizer", "--optimizer"},      {"finetune", "--finetune"},   {"lora_rank", "--lora-rank"},
      {"lora_alpha", "--lora-alpha"},    {"lora_targets", "--lora-targets"}, {"lora_dropout", "--lora-dropout"},
      {"stack", "--stack"},              {"compile", "--compile"},     {"modules", "--modules"},     {"expandable_segments", "--expandable-segments"},
      {"offload", "--offload"},          {"optimizer_in_backward", "--optimizer-in-backward"},
      {"sequence_parallel", "--no-sequence-parallel"}, {"fsdp_embedding_units", "--fsdp-embedding-units"},
      {"tp_comm_overlap", "--tp-comm-overlap"}, {"moe_a2a_overlap", "--moe-a2a-overlap"}};
  const auto it = flags.find(field);
  return std::string(it == flags.end() ? field : it->second);
}

invalid_request flag_error(const plan_violation& v) { return invalid_request(plan_flag(v.field) + ": " + v.message); }

void require_support(const hardware_catalog& cat, const gpu_spec& gpu, compute_format f) {
  if (supports(gpu, f)) return;
  std::string ok;
  for (const auto& g : cat.gpus())
    if (supports(g, f)) ok += (ok.empty() ? "" : ", ") + g.id;
  const char* why = info(f).blackwell_only ? "needs Blackwell tensor cores" : "needs FP8 tensor cores (Ada, Hopper or Blackwell)";
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

namespace {

/// Throws the error of rule `v` broken by the plan of `o` (`doc`: its --plan file, if any). A plan file's value, or one
/// the file leaves to its default or derives (gpus from instance and nodes): the file's member, with its line when the
/// file holds it; a flag's value: the flag. The world size is broken by the parallel degrees and the target as much as
/// by gpus: a flag given for one of them is named.
[[noreturn]] void fail_with(const plan_options& o, const std::optional<plan_document>& doc, const plan_violation& v) {
  const std::string key = v.pointer.size() > 1 ? v.pointer.substr(1) : v.field;
  if (doc && v.field == "gpus")
    for (const char* f : {"--gpus", "--tp", "--cp", "--pp", "--ep", "--nodes", "--instance", "--gpu"})
      if (given(o, f)) throw invalid_request(std::string(f) + ": " + v.message);
  if (doc && !given(o, plan_flag(v.field).c_str())) {
    const std::string ptr = doc->pointer(v.pointer);  // a SageMaker job: the member in the job
    const bool in_file = doc->has(key) || (key == "activation_checkpointing" && doc->has("ac_every"));
    if (auto l = in_file ? doc->where(v.pointer) : std::nullopt) throw config_error(doc->file, ptr, v.message, l->line, l->column, l->byte);
    throw config_error(doc->file, ptr, v.message);
  }
  throw flag_error(v);
}

}  // namespace

void throw_plan_violation(const context& ctx, const plan_options& o, const plan_violation& v) {
  std::optional<plan_document> doc;
  if (!o.plan_file.empty()) doc = io::load_plan(o.plan_file, [&ctx] { return ctx.contract(); });
  fail_with(o, doc, v);
}

resolved_plan resolve_plan(const context& ctx, const hardware_catalog& cat, const plan_options& o) {
  namespace fs = std::filesystem;
  std::optional<plan_document> doc;
  if (!o.plan_file.empty()) doc = io::load_plan(o.plan_file, [&ctx] { return ctx.contract(); });
  plan p = doc ? doc->value : plan{};
  if (const auto u = doc ? unknown_disabled_rule(p.check) : std::nullopt) {  // as check refuses it (estimate --plan took it)
    const std::string ptr = "/check/disable/" + std::to_string(u->first);
    if (auto l = doc->where(ptr)) throw config_error(doc->file, doc->pointer(ptr), u->second, l->line, l->column, l->byte);
    throw config_error(doc->file, doc->pointer(ptr), u->second);
  }
  training_config& c = p.training;
  // A setting comes from its flag when the flag was given or the file does not set it (the flag's default).
  auto from_flag = [&](const char* flag, const char* key) { return given(o, flag) || !doc || !doc->has(key); };
  // Where a broken rule came from: the flag, or the plan file's member.
  auto fail = [&](const plan_violation& v) { fail_with(o, doc, v); };

  // ---- model
  if (given(o, "MODEL") || !doc) p.model = o.model;
  else if (doc && fs::path(p.model).is_relative()) {
    // A path in a plan is relative to the plan file's folder; a preset name stays as it is.
    const fs::path rel = fs::path(doc->file).parent_path() / p.model;
    if (fs::exists(rel)) p.model = rel.string();
  }
  if (p.model.empty()) throw invalid_request("MODEL: a model is required (a preset, a config.json path, or --plan FILE)");

  // ---- target
  if (given(o, "--instance") || given(o, "--gpu") || !doc) {
    p.target.instance = o.target.instance;
    p.target.gpu = o.target.gpu;
  }
  if (given(o, "--gpus") && o.gpus < 1)
    throw invalid_request(fmt::format("--gpus: world size must be >= 1, got {}", o.gpus));
  if (from_flag("--nodes", "nodes")) p.target.nodes = o.target.nodes;
  if (from_flag("--gpus", "gpus")) p.target.gpus = o.gpus;
  if (given(o, "--instance") && o.target.instance.empty()) throw invalid_request("--instance: must not be empty");
  if (given(o, "--gpu") && o.target.gpu.empty()) throw invalid_request("--gpu: must not be empty");
  const bool target_from_file = doc && !given(o, "--instance") && !given(o, "--gpu");
  resolved_target t = [&] {
    try {
      return resolve_target(cat, {p.target.gpu, p.target.instance, p.target.nodes}, "ml.p6-b200.48xlarge");
    } catch (const invalid_request& e) {
      if (!target_from_file) throw;
      // the plan file's instance or GPU: name the file and the member (with its line)
      const std::string ptr = doc->has("instance") && !p.target.instance.empty() ? "/instance" : "/gpu";
      if (auto l = doc->where(ptr)) throw config_error(doc->file, doc->pointer(ptr), e.what(), l->line, l->column, l->byte);
      throw config_error(doc->file, doc->pointer(ptr), e.what());
    }
  }();
  if (t.instance) p.target.instance = t.instance->id;
  else p.target.gpu = t.gpu.id;
  if (doc && doc->has("power_limit_w") && ctx.power_limit_w <= 0 && !target_from_file) {
    // --gpu / --instance over a plan: the file's limit is its hosts' (a review: an h100 plan's 500 W ran a b200 at half
    // its rating without a word); kept for the same GPU, else dropped with a warning
    std::string file_gpu;
    try {
      file_gpu = resolve_target(cat, {doc->value.target.gpu, doc->value.target.instance, doc->value.target.nodes}, "ml.p6-b200.48xlarge").gpu.id;
    } catch (const error&) {
    }
    if (file_gpu != t.gpu.id) {
      spdlog::warn("{}: power_limit_w {:g} is the plan's limit for {}; {} runs at the catalog's limit (give --power-limit to set one)",
                   doc->file, p.target.power_limit_w, file_gpu.empty() ? std::string("its GPU") : file_gpu, t.gpu.id);
      p.target.power_limit_w = 0;
    }
  }
  try {  // the plan file's power limit and attention kernel where the global flags do not set them; recorded in p
    ctx.apply_gpu_settings(p.target, t.gpu);
  } catch (const invalid_request& e) {
    if (!doc || ctx.power_limit_w > 0 || !doc->has("power_limit_w")) throw;  // (the flag's: named by the message)
    if (auto l = doc->where("/power_limit_w")) throw config_error(doc->file, doc->pointer("/power_limit_w"), e.what(), l->line, l->column, l->byte);
    throw config_error(doc->file, doc->pointer("/power_limit_w"), e.what());
  }
  if (!t.instance && p.target.gpus == 0 && p.target.nodes > 1) p.target.gpus = p.target.nodes;  // --gpu b200 --nodes 2
  if (!t.instance)  // a bare GPU's nodes count GPUs: gpus that contradict them are refused (resolve_world), then one node
    for (const auto& v : resolve_world(p, 0)) fail(v);
  if (!t.instance) p.target.nodes = 1;
  for (const auto& v : resolve_world(p, t.instance ? t.instance->gpus_per_node : 0, t.instance ? t.instance->nvlink_domain_gpus : 0)) fail(v);

  // ---- training settings
  if (from_flag("--mbs", "micro_batch_size")) c.micro_batch = o.mbs;
  if (from_flag("--seq", "seq_len")) c.seq_len = o.seq;
  const bool accum_given = given(o, "--grad-accum") || (doc && doc->has("grad_accum"));
  if (from_flag("--grad-accum", "grad_accum")) c.grad_accum = o.grad_accum;
  if (given(o, "--ac") || given(o, "--ac-every") || !doc || !(doc->has("activation_checkpointing") || doc->has("ac_every"))) {
    std::string name = o.ac;
    if (!given(o, "--ac") && doc && given(o, "--ac-every")) name = to_string(c.ac);  // --ac-every over a file's "full"
    const auto a = parse_checkpointing(name);
    if (!a) throw invalid_request("--ac: unknown value '" + o.ac + "' (none, full, every-K, selective-op, selective-attn)");
    c.ac = *a;
    if (given(o, "--ac-every")) {
      if (c.ac.mode != ac_mode::full) throw invalid_request("--ac-every: needs --ac full");
      // --ac every-2 --ac-every 4 ran every-4 without a word (an audit): --ac every-K already names the interval
      if (given(o, "--ac") && o.ac.rfind("every-", 0) == 0 && o.ac_every != c.ac.every)
        throw invalid_request(fmt::format("--ac-every {}: contradicts --ac {}; give the interval once", o.ac_every, o.ac));
      if (o.ac_every < 1 || o.ac_every > plan_limits::max_ac_every)
        throw invalid_request(fmt::format("--ac-every: must be between 1 and {}, got {}", plan_limits::max_ac_every, o.ac_every));
      c.ac.every = o.ac_every;
    }
  }
  if (from_flag("--master", "master_weights")) c.master = o.master;
  if (from_flag("--optimizer-impl", "optimizer_impl")) c.optimizer = o.optimizer;
  if (from_flag("--loss", "loss")) c.loss = o.loss;
  if (from_flag("--finetune", "finetune")) {
    const auto f = parse_finetune(o.finetune);
    if (!f) throw invalid_request("--finetune: unknown value '" + o.finetune + "' (full, lora, qlora)");
    c.finetune = *f;
  }
  if (from_flag("--optimizer", "optimizer")) {
    const auto f = parse_optimizer(o.optimizer_name);
    if (!f) throw invalid_request("--optimizer: unknown value '" + o.optimizer_name + "' (adamw, adamw-8bit, paged-adamw-8bit, adafactor, sgd, lion)");
    c.optim = *f;
  }
  if (from_flag("--lora-rank", "lora_rank")) c.lora.rank = o.lora_rank;
  if (from_flag("--lora-alpha", "lora_alpha")) c.lora.alpha = o.lora_alpha;
  if (from_flag("--lora-dropout", "lora_dropout")) c.lora.dropout = o.lora_dropout;
  if (from_flag("--lora-targets", "lora_targets")) {
    const auto targets = parse_lora_targets(o.lora_targets);
    if (!targets)
      throw invalid_request("--lora-targets: unknown value '" + o.lora_targets +
                            "' (attention, mlp, all-linear, or a list of q_proj, k_proj, v_proj, o_proj, gate_proj, up_proj, down_proj)");
    c.lora.targets = *targets;
  }
  if (from_flag("--stack", "stack")) {
    const auto s = parse_stack(o.stack);
    if (!s) {
      std::string msg = "--stack: unknown value '" + o.stack + "'";
      if (auto m = closest_match(o.stack, {"hf", "torchtitan", "torchtune", "megatron"})) msg += " (did you mean '" + *m + "'?)";
      throw invalid_request(msg + "; allowed: hf, torchtitan, torchtune, megatron");
    }
    c.stack = *s;
  }
  if (from_flag("--compile", "compile")) c.compile = o.compile;
  if (from_flag("--modules", "modules")) {
    const auto k = parse_module_kernels(o.modules);
    if (!k) throw invalid_request("--modules: unknown value '" + o.modules + "'; allowed: fused, transformers");
    c.modules = *k;
  }
  if (from_flag("--expandable-segments", "expandable_segments")) c.expandable_segments = o.expandable_segments;
  if (from_flag("--optimizer-in-backward", "optimizer_in_backward")) c.optimizer_in_backward = o.optimizer_in_backward;
  if (from_flag("--no-sequence-parallel", "sequence_parallel")) c.sequence_parallel = !o.no_sequence_parallel;
  if (from_flag("--fsdp-embedding-units", "fsdp_embedding_units")) c.fsdp_embedding_units = o.fsdp_embedding_units;
  if (from_flag("--tp-comm-overlap", "tp_comm_overlap")) c.tp_comm_overlap = o.tp_comm_overlap;
  if (from_flag("--moe-a2a-overlap", "moe_a2a_overlap")) c.moe_a2a_overlap = o.moe_a2a_overlap;
  if (from_flag("--offload", "offload")) {
    const auto off = parse_offload(o.offload);
    if (!off)
      throw invalid_request("--offload: unknown value '" + o.offload + "' (none, or a list of optimizer, params, activations, e.g. optimizer,params)");
    c.offload = *off;
  }
  if (!c.adapters() && (given(o, "--lora-rank") || given(o, "--lora-alpha") || given(o, "--lora-targets") || given(o, "--lora-dropout")))
    throw invalid_request("--lora-rank/--lora-alpha/--lora-targets/--lora-dropout: need --finetune lora or qlora");
  if (from_flag("--precision", "precision")) {
    const auto f = parse_format(o.precision);
    if (!f) throw invalid_request("--precision: unknown format '" + o.precision + "' (" + precision_names() + ")");
    c.format = *f;
  }
  if (from_flag("--bf16-layers", "bf16_layers")) {
    c.bf16_layers.reset();
    if (!o.bf16_layers.empty()) {
      try { c.bf16_layers = parse_bf16_blocks(o.bf16_layers); }
      catch (const plan_error& e) { throw flag_error(e.violation()); }
    }
  }
  if (from_flag("--fp8-all-gather", "fp8_all_gather")) c.fp8_all_gather = o.fp8_all_gather;
  if (given(o, "--sharding")) c.shard = o.shard;
  else if (!doc || !doc->has("sharding")) c.shard = default_sharding(c.world_size, c.stack);
  if (from_flag("--shard-group", "shard_group")) c.shard_group = o.shard_group;
  if (given(o, "--shard-group") && o.shard_group < 1)
    throw invalid_request(fmt::format("--shard-group: must be >= 1, got {}", o.shard_group));
  for (auto [flag, key, src, dst] : {std::tuple{"--tp", "tp", o.tp, &c.tp}, std::tuple{"--cp", "cp", o.cp, &c.cp},
                                     std::tuple{"--ep", "ep", o.ep, &c.ep}, std::tuple{"--pp", "pp", o.pp, &c.pp},
                                     std::tuple{"--vpp", "vpp", o.vpp, &c.vpp}}) {
    if (!from_flag(flag, key)) continue;
    if (src < 1 || src > plan_limits::max_degree)
      throw invalid_request(fmt::format("{}: out of range: must be between 1 and {}, got {}", flag, plan_limits::max_degree, src));
    *dst = static_cast<int>(src);
  }
  if (from_flag("--pp-schedule", "pp_schedule")) {
    const auto s = parse_pp_schedule(o.pp_schedule);
    if (!s) throw invalid_request("--pp-schedule: unknown value '" + o.pp_schedule + "' (1f1b, interleaved)");
    c.schedule = *s;
  }
  // ranges of the integer flags (a plan file's were checked by its reader)
  auto range = [](const char* flag, std::int64_t v, std::int64_t lo, std::int64_t hi) {
    if (v < lo || v > hi) throw invalid_request(fmt::format("{}: out of range: must be between {} and {}, got {}", flag, lo, hi, v));
  };
  using L = plan_limits;
  range("--mbs", c.micro_batch, 1, L::max_micro_batch);
  range("--seq", c.seq_len, 1, L::max_seq_len);
  range("--grad-accum", c.grad_accum, 1, L::max_grad_accum);

  // ---- model, precision support, accumulation from the global batch, and every rule
  resolved_plan rp{p, {}, t, {}};
  try {
    rp.model = ctx.model(p.model);
  } catch (const invalid_request& e) {
    if (doc && !given(o, "MODEL")) throw config_error(doc->file, doc->pointer("/model"), e.what());
    throw;
  }
  try {
    require_support(cat, t.gpu, c.format);
  } catch (const invalid_request& e) {
    if (doc && doc->has("precision") && !given(o, "--precision")) throw config_error(doc->file, doc->pointer("/precision"), e.what());
    throw;
  }
  plan& rpp = rp.p;
  // The default length (4,096) is capped at the model's context when neither --seq nor the plan file sets one: gpt2's
  // 1,024 learned positions cannot run longer sequences, and TinyLlama was trained at 2,048.
  if (const std::int64_t asked = rpp.training.seq_len;
      cap_default_seq_len(rpp.training.seq_len, rp.model.max_context, given(o, "--seq") || (doc && doc->has("seq_len"))))
    spdlog::info("--seq: {} tokens, {}'s context (the default {} is longer)", rp.model.max_context, rp.model.name, asked);
  // The accumulation follows from the global batch unless --grad-accum was given. A plan file that sets both (as
  // every written plan does) is taken at its word unless a flag changed what the accumulation depends on.
  const bool reshaped = given(o, "--mbs") || given(o, "--gpus") || given(o, "--nodes") || given(o, "--tp") || given(o, "--cp") ||
                        given(o, "--pp") || given(o, "--instance") || given(o, "--gpu");
  if (rpp.global_batch && !given(o, "--grad-accum") && (!accum_given || reshaped)) {
    for (const auto& v : apply_global_batch(rpp)) fail(v);
  }
  for (const auto& v : plan_violations(rp.model, rpp)) fail(v);
  if (doc)
    for (const auto& v : io::job_violations(*doc, rpp)) fail(v);
  rp.config = rpp.training;
  return rp;
}

}  // namespace bwplan::cli
