// SPDX-License-Identifier: Apache-2.0
// Configuration flags shared by the subcommands that evaluate one plan.
#include "cli.hpp"

#include <fmt/format.h>

#include <map>

namespace bwplan::cli {

void add_plan_options(CLI::App* sub, const std::shared_ptr<plan_options>& o) {
  sub->add_option("MODEL", o->model, "Hugging Face config.json path or bundled preset (e.g. Llama-3.1-8B)")->required();
  sub->add_option("--gpu", o->target.gpu, "GPU id from the catalog (h100, h200, b200, b300, ...)");
  sub->add_option("--instance", o->target.instance, "instance type (e.g. ml.p6-b200.48xlarge); default when no --gpu");
  sub->add_option("--nodes", o->target.nodes, "instances (with --instance)");
  sub->add_option("--gpus", o->gpus, "world size: GPUs in the job (default: all GPUs of the instances, or 1)");
  sub->add_option("--mbs,--micro-batch-size", o->mbs, "micro-batch size per GPU (sequences)");
  sub->add_option("--seq,--seq-len", o->seq, "sequence length (tokens)");
  sub->add_option("--grad-accum", o->grad_accum, "gradient accumulation steps (micro-batches per optimizer step)");
  sub->add_option("--ac", o->ac, "activation checkpointing: none | full | selective-op (torchtitan per-op) | selective-attn (Megatron)")
      ->check(CLI::IsMember({"none", "full", "selective-op", "selective-attn"}));
  sub->add_option("--ac-every", o->ac_every, "with --ac full: recompute every K-th block (1 = all)");
  sub->add_option("--master", o->master, "master weights: fp32 | bf16")
      ->transform(CLI::CheckedTransformer(std::map<std::string, master_weights>{{"fp32", master_weights::fp32}, {"bf16", master_weights::bf16}}, CLI::ignore_case));
  sub->add_option("--sharding", o->shard, "none (one GPU / DDP) | full (FSDP2 full shard); default full for >1 GPU")
      ->transform(CLI::CheckedTransformer(std::map<std::string, sharding>{{"none", sharding::none}, {"full", sharding::full}}, CLI::ignore_case))
      ->each([o](const std::string&) { o->shard_given = true; });
  sub->add_option("--optimizer-impl", o->optimizer, "AdamW implementation: fused | foreach")
      ->transform(CLI::CheckedTransformer(std::map<std::string, optimizer_impl>{{"fused", optimizer_impl::fused}, {"foreach", optimizer_impl::foreach}}, CLI::ignore_case));
  sub->add_option("--loss", o->loss, "loss: standard (fp32 logits) | chunked (fused linear cross-entropy)")
      ->transform(CLI::CheckedTransformer(std::map<std::string, loss_impl>{{"standard", loss_impl::standard}, {"chunked", loss_impl::chunked}}, CLI::ignore_case));
  sub->add_option("--precision", o->precision, "linear-layer GEMM format: bf16 | fp8 | fp8-rowwise | mxfp8 | nvfp4")
      ->check(CLI::IsMember({"bf16", "fp8", "fp8-rowwise", "mxfp8", "nvfp4"}));
  sub->add_option("--bf16-layers", o->bf16_layers,
                  "blocks kept bf16 with a low-precision format: last:N, first:N, first:N,last:M, a fraction (trailing), or none "
                  "(default: none; nvfp4: 0.15 as torchtitan)");
  sub->add_flag("--fp8-all-gather", o->fp8_all_gather, "FSDP2 all-gathers FP8 weights (with --precision fp8)");
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

resolved_plan resolve_plan(const context& ctx, const hardware_catalog& cat, const plan_options& o) {
  resolved_plan rp{ctx.model(o.model), resolve_target(cat, o.target, "ml.p6-b200.48xlarge"), {}};
  const resolved_target& t = rp.target;
  if (o.target.nodes < 1) throw invalid_request("--nodes: must be >= 1, got " + std::to_string(o.target.nodes));
  if (o.gpus < 0) throw invalid_request("--gpus: world size must be >= 1, got " + std::to_string(o.gpus));
  training_config& c = rp.config;
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
  require_support(cat, t.gpu, c.format);
  if (!o.bf16_layers.empty()) c.bf16_layers = parse_bf16_blocks(o.bf16_layers);
  c.fp8_all_gather = o.fp8_all_gather;
  c.ac_every = o.ac_every;
  c.master = o.master;
  c.shard = o.shard_given ? o.shard : (c.world_size > 1 ? sharding::full : sharding::none);
  c.optimizer = o.optimizer;
  c.loss = o.loss;
  validate(c);
  if (o.ac_every != 1 && !c.ac_enabled) throw invalid_request("--ac-every needs --ac full");
  return rp;
}

}  // namespace bwplan::cli
