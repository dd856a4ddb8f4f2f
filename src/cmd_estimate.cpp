// SPDX-License-Identifier: Apache-2.0
// `bwplan estimate MODEL`: memory and throughput of one configuration.
#include "cli.hpp"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <map>
#include <ostream>

namespace bwplan::cli {

namespace {

struct estimate_options {
  std::string model;
  target_options target;
  int gpus = 0;  // 0: all GPUs of the instances, or 1 for a bare GPU
  std::int64_t mbs = 1;
  std::int64_t seq = 4096;
  std::int64_t grad_accum = 1;
  std::string ac = "none";
  int ac_every = 1;
  master_weights master = master_weights::fp32;
  sharding shard = sharding::full;
  bool shard_given = false;
  optimizer_impl optimizer = optimizer_impl::fused;
  loss_impl loss = loss_impl::standard;
  std::string format = "table";
  bool check = false;
};

void print_table(std::ostream& out, const model_spec& m, const resolved_target& t, const training_config& c,
                 const memory_estimate& me, const throughput_estimate& te) {
  const parameter_count pc = count_parameters(m);
  out << fmt::format("model      {} ({}), {:.3f} B parameters\n", m.name, m.family, static_cast<double>(pc.total()) / 1e9);
  out << fmt::format("hardware   {} x {}{}\n", c.world_size, t.gpu.id,
                     t.instance ? fmt::format(" ({} x {})", c.world_size / std::max(1, c.gpus_per_node), t.instance->id) : "");
  out << fmt::format("config     {}\n\n", describe(c));
  const auto& b = me.at_peak;
  const std::pair<const char*, bytes> rows[] = {
      {"parameters", b.parameters},   {"optimizer states", b.optimizer_states}, {"gradients", b.gradients},
      {"compute weights", b.compute_weights}, {"activations", b.activations}, {"logits / loss", b.logits},
      {"transient", b.transient},     {"workspace", b.workspace},   {"DDP buckets", b.ddp_buckets}};
  out << fmt::format("memory per GPU at the peak ({} phase)\n", to_string(me.peak_phase));
  for (const auto& [name, v] : rows)
    if (v.raw() > 0) out << fmt::format("  {:<18} {:>10.2f} GiB\n", name, v.in(gib));
  out << fmt::format("  {:<18} {:>10.2f} GiB\n", "peak allocated", me.peak_allocated.in(gib));
  out << fmt::format("  {:<18} {:>10.2f} GiB\n", "peak reserved", me.peak_reserved.in(gib));
  out << fmt::format("  {:<18} {:>10.2f} GiB\n", "context + NCCL", me.non_pytorch.in(gib));
  out << fmt::format("  {:<18} {:>10.2f} GiB of {:.2f} GiB ({:.1f}% headroom) -> {}\n\n", "device peak",
                     me.device_peak().in(gib), me.capacity.in(gib), 100 * me.headroom(), me.fits ? "fits" : "DOES NOT FIT");
  out << fmt::format("throughput {:.0f} tokens/s ({:.0f} per GPU), step {:.3f} s, MFU {:.1f}%\n", te.tokens_per_s,
                     te.tokens_per_s_per_gpu, te.step.raw(), 100 * te.mfu);
  out << fmt::format("  compute {:.3f} s (GEMM {:.3f}, attention {:.3f}, memory-bound {:.3f}); communication {:.3f} s, exposed {:.3f} s\n",
                     te.compute.raw(), te.gemm.raw(), te.attention.raw(), te.memory_bound.raw(), te.communication.raw(),
                     te.exposed_communication.raw());
}

}  // namespace

runner register_estimate(CLI::App& app, context& ctx) {
  auto o = std::make_shared<estimate_options>();
  auto* sub = app.add_subcommand("estimate", "peak GPU memory and throughput of one training configuration");
  sub->add_option("MODEL", o->model, "Hugging Face config.json path or bundled preset (e.g. Llama-3.1-8B)")->required();
  sub->add_option("--gpu", o->target.gpu, "GPU id from the catalog (h100, h200, b200, b300, ...)");
  sub->add_option("--instance", o->target.instance, "instance type (e.g. ml.p6-b200.48xlarge); default when no --gpu");
  sub->add_option("--nodes", o->target.nodes, "instances (with --instance)");
  sub->add_option("--gpus", o->gpus, "world size: GPUs in the job (default: all GPUs of the instances, or 1)");
  sub->add_option("--mbs,--micro-batch-size", o->mbs, "micro-batch size per GPU (sequences)");
  sub->add_option("--seq,--seq-len", o->seq, "sequence length (tokens)");
  sub->add_option("--grad-accum", o->grad_accum, "gradient accumulation steps");
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
  sub->add_option("--format", o->format, "table | json")->check(CLI::IsMember({"table", "json"}));
  sub->add_flag("--check", o->check, "exit 1 when the configuration does not fit");

  return [o, &ctx]() -> int {
    const hardware_catalog cat = ctx.catalog();
    const model_spec m = ctx.model(o->model);
    const resolved_target t = resolve_target(cat, o->target, "ml.p6-b200.48xlarge");
    if (o->target.nodes < 1) throw invalid_request("--nodes: must be >= 1, got " + std::to_string(o->target.nodes));
    if (o->gpus < 0) throw invalid_request("--gpus: world size must be >= 1, got " + std::to_string(o->gpus));
    training_config c;
    c.micro_batch = o->mbs;
    c.seq_len = o->seq;
    c.grad_accum = o->grad_accum;
    c.gpus_per_node = t.instance ? t.instance->gpus_per_node : std::max(1, o->gpus);
    c.world_size = o->gpus > 0 ? o->gpus : (t.instance ? t.instance->gpus_per_node * o->target.nodes : 1);
    if (t.instance && c.world_size > t.instance->gpus_per_node * o->target.nodes)
      throw invalid_request(fmt::format("--gpus {} exceeds the {} GPUs of {} x {}", c.world_size,
                                        t.instance->gpus_per_node * o->target.nodes, o->target.nodes, t.instance->id));
    c.ac_enabled = o->ac == "full";
    c.ac_every = o->ac_every;
    c.master = o->master;
    c.shard = o->shard_given ? o->shard : (c.world_size > 1 ? sharding::full : sharding::none);
    c.optimizer = o->optimizer;
    c.loss = o->loss;
    validate(c);
    if (o->ac_every != 1 && !c.ac_enabled) throw invalid_request("--ac-every needs --ac full");
    spdlog::debug("model {}: {} layers, hidden {}, {} parameters", m.name, m.layers, m.hidden, count_parameters(m).total());
    const memory_estimate me = estimate_memory(m, c, t.gpu);
    const throughput_estimate te = estimate_throughput(m, c, t.gpu, t.instance ? &*t.instance : nullptr);
    if (o->format == "json") {
      auto j = to_json(m, c, me, te);
      j["hardware"] = {{"gpu", t.gpu.id}, {"instance", t.instance ? t.instance->id : ""}};
      ctx.out << j.dump(2) << "\n";
    } else {
      print_table(ctx.out, m, t, c, me, te);
    }
    if (o->seq > m.max_context)
      spdlog::warn("--seq {} is longer than the model's context ({} tokens)", o->seq, m.max_context);
    return (o->check && !me.fits) ? failure : success;
  };
}

}  // namespace bwplan::cli
