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
  sub->add_option("--ac", o->ac, "activation checkpointing: none | full")->check(CLI::IsMember({"none", "full"}));
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
