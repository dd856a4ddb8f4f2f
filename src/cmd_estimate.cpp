// SPDX-License-Identifier: Apache-2.0
// `bwplan estimate MODEL`: memory and throughput of one configuration.
#include "cli.hpp"
#include "input.hpp"
#include "markdown.hpp"
#include "term.hpp"

#include <bwplan/check.hpp>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <fstream>
#include <map>
#include <optional>
#include <ostream>

namespace bwplan::cli {

namespace {

struct estimate_options : plan_options {
  std::string format = "table";
  bool check = false;
  bool ascii = false;
  std::string tokens;          ///< --tokens: token budget (K/M/B/T suffixes)
  double price_per_hour = -1;  ///< --price-per-hour override, USD per instance-hour
  std::string emit;            ///< --emit plan: the plan file of the estimated configuration
  std::string output;          ///< -o FILE with --emit plan
};

/// Nodes the configuration occupies (a bare GPU counts as one "node" per GPU).
int nodes_of(const training_config& c, const resolved_target& t) {
  return t.instance ? (c.world_size + c.gpus_per_node - 1) / std::max(1, c.gpus_per_node) : c.world_size;
}

/// "8 x b200 (1 x ml.p6-b200.48xlarge)", "4 x h100 (4 of the 8 GPUs of 1 x ml.p5.48xlarge)", or for a bare GPU
/// "4 x h100 (one node on NVLink, no network: ...)"; with "; at 500 W of its rated 700 W, FlashAttention-2" where the
/// GPU's power limit or attention kernel is not the default (gpu_settings_note).
std::string hardware_line(const training_config& c, const resolved_target& t, int nodes) {
  std::string line;
  if (!t.instance) {  // a bare GPU: one node of its interconnect (resolve_world), no network
    line = c.world_size <= 1 ? fmt::format("{} x {}", c.world_size, t.gpu.id)
                             : fmt::format("{} x {} (one node on {}, no network: a bare GPU; --instance for nodes)", c.world_size,
                                           t.gpu.id, t.gpu.has_nvlink() ? "NVLink" : "PCIe");
  } else if (c.world_size == nodes * c.gpus_per_node) {
    line = fmt::format("{} x {} ({} x {})", c.world_size, t.gpu.id, nodes, t.instance->id);
  } else {
    line = fmt::format("{} x {} ({} of the {} GPUs of {} x {})", c.world_size, t.gpu.id, c.world_size, nodes * c.gpus_per_node, nodes,
                       t.instance->id);
  }
  // the GPU's power limit and attention kernel where they are not the defaults (a review: a plan's 500 W gave 20 % less
  // throughput with nothing in the output to say why)
  if (const std::string note = gpu_settings_note(t.gpu); !note.empty()) line += "; " + note;
  return line;
}

void print_table(std::ostream& out, const model_spec& m, const resolved_target& t, const training_config& c, int nodes,
                 const memory_estimate& me, const throughput_estimate& te, term_style st, const std::optional<error_band>& band,
                 const std::string& modules_note) {
  const parameter_count pc = count_parameters(m);
  out << fmt::format("model      {} ({}), {:.3f} B parameters", m.name, m.family, static_cast<double>(pc.total()) / 1e9);
  if (m.is_moe()) out << fmt::format(" ({:.3f} B active: top-{} of {} experts)", static_cast<double>(pc.active()) / 1e9, m.top_k, m.experts);
  if (pc.mtp > 0) out << fmt::format(", + {:.3f} B multi-token prediction", static_cast<double>(pc.mtp) / 1e9);
  out << "\n";
  out << fmt::format("hardware   {}\n", hardware_line(c, t, nodes));
  out << fmt::format("config     {}; data-parallel {}, global batch {} sequences ({} tokens)\n\n", describe(c), c.dp(),
                     c.micro_batch * c.grad_accum * c.dp(), global_batch_tokens(c));
  const auto& b = me.at_peak;
  const std::pair<const char*, bytes> rows[] = {
      {"parameters", b.parameters},   {"optimizer states", b.optimizer_states}, {"gradients", b.gradients},
      {"compute weights", b.compute_weights}, {"activations", b.activations}, {"logits / loss", b.logits},
      {"transient", b.transient},     {"workspace", b.workspace},   {"DDP buckets", b.ddp_buckets}};
  out << fmt::format("memory per GPU at the peak ({} phase)\n", to_string(me.peak_phase));
  const auto segs = peak_segments(me);
  out << "  " << memory_bar(segs, me.capacity, 0.0, 50, st)
      << fmt::format(" {:.1f}% of {:.2f} GiB\n", 100 * (me.device_peak() / me.capacity), me.capacity.in(gib));
  out << memory_legend(segs, st, "  ", 100, false);
  for (const auto& [name, v] : rows)
    if (v.raw() > 0) out << fmt::format("  {:<18} {:>10.2f} GiB\n", name, v.in(gib));
  out << fmt::format("  {:<18} {:>10.2f} GiB\n", "peak allocated", me.peak_allocated.in(gib));
  out << fmt::format("  {:<18} {:>10.2f} GiB\n", "peak reserved", me.peak_reserved.in(gib));
  out << fmt::format("  {:<18} {:>10.2f} GiB\n", "context + NCCL", me.non_pytorch.in(gib));
  // over capacity: the bytes missing, not a negative share ("-1258.1% headroom")
  const std::string margin = me.device_peak() <= me.capacity
                                 ? fmt::format("{:.1f}% headroom", 100 * me.headroom())
                                 : fmt::format("{:.2f} GiB over", (me.device_peak() - me.capacity).in(gib));
  out << fmt::format("  {:<18} {:>10.2f} GiB of {:.2f} GiB ({}) -> {}\n\n", "device peak", me.device_peak().in(gib),
                     me.capacity.in(gib), margin, me.fits ? "fits" : "DOES NOT FIT");
  out << "  reserved: " << reserved_source_note(m, c, me) << "\n\n";
  if (!modules_note.empty()) out << "  modules: " << modules_note << "\n\n";
  if (const std::string note = allocator_setting_note(me); !note.empty()) out << "  allocator: " << note << "\n\n";
  if (me.paged_states.raw() > 0)
    out << "  paged optimizer: " << paged_states_note(me) << "\n\n";
  if (band) out << "  error band: " << band_line(me, te, *band) << "\n\n";
  out << fmt::format("throughput {:.0f} tokens/s ({:.0f} per GPU), step {:.3f} s, MFU {:.1f}%{}\n", te.tokens_per_s,
                     te.tokens_per_s_per_gpu, te.step.raw(), 100 * te.mfu,
                     c.format == compute_format::bf16 ? std::string("")
                                                      : fmt::format(" of the bf16 peak, {:.1f}% of the {} peak", 100 * te.mfu_format, to_string(c.format)));
  out << fmt::format("  compute {:.3f} s (GEMM {:.3f}, attention {:.3f}, memory-bound {:.3f}); communication {:.3f} s, exposed {:.3f} s\n",
                     te.compute.raw(), te.gemm.raw(), te.attention.raw(), te.memory_bound.raw(), te.communication.raw(),
                     te.exposed_communication.raw());
}

}  // namespace

runner register_estimate(CLI::App& app, context& ctx) {
  auto o = std::make_shared<estimate_options>();
  auto* sub = app.add_subcommand("estimate", "peak GPU memory and throughput of one training configuration");
  add_plan_options(sub, o);
  sub->add_option("--format", o->format, "table | json | markdown")->check(CLI::IsMember({"table", "json", "markdown"}));
  sub->add_flag("--ascii", o->ascii, "plain ASCII memory bar (the default when stdout is not a terminal)");
  sub->add_flag("--check", o->check, "exit 1 when the configuration does not fit");
  sub->add_option("--tokens", o->tokens, "token budget to train (e.g. 100B, 1T; suffixes K, M, B, T): prints time and cost");
  sub->add_option("--price-per-hour", o->price_per_hour, "USD per instance-hour (default: the catalog's price of the instance); with a bare --gpu, USD per GPU-hour (needs --tokens)")
      ->check(finite_range(0, max_price_per_hour));
  sub->add_option("--emit", o->emit, "plan: print the plan file (docs/plan.schema.json) of this configuration instead of the estimate")
      ->check(CLI::IsMember({"plan"}));
  sub->add_option("-o,--output", o->output, "with --emit plan: write to FILE instead of stdout");

  return [o, &ctx]() -> int {
    const hardware_catalog cat = ctx.catalog();
    const resolved_plan rp = resolve_plan(ctx, cat, *o);
    const model_spec& m = rp.model;
    const resolved_target& t = rp.target;
    const training_config& c = rp.config;
    if (!o->output.empty() && o->emit.empty()) throw invalid_request("--output needs --emit plan");
    if (o->emit == "plan") {  // the plan file of exactly what would be estimated
      plan written = rp.p;  // its model config, where a reader of the file looks for it (a review: `-o p/x.json`
      written.model = model_path_for_plan(rp.p.model, o->output);  // kept "m/l1b.json", relative to the working directory)
      const std::string text = io::plan_to_json(written).dump(2) + "\n";
      if (o->output.empty() || o->output == "-") {  // ("-": stdout, as report takes it; it wrote a file named "-")
        ctx.out << text;
      } else {
        // (the model config became a plan; also the one a --plan file names: a review)
        refuse_output_over_input(o->output, {o->plan_file, o->model, rp.p.model}, "--output");
        write_output_file(o->output, text, "--output");
      }
      ctx.warn_unrecorded("the plan file", true);
      // --check still answers whether it fits (a review found exit 0 on a plan that does not fit with --emit plan)
      if (o->check && !estimate_memory(m, c, t.gpu, ctx.constants(t.gpu.id, c.stack).overheads).fits) return failure;
      return success;
    }
    spdlog::debug("model {}: {} layers, hidden {}, {} parameters", m.name, m.layers, m.hidden, count_parameters(m).total());
    const calibration_constants k = ctx.constants(t.gpu.id, c.stack);
    const memory_estimate me = estimate_memory(m, c, t.gpu, k.overheads);
    const throughput_estimate te = estimate_throughput(m, c, t.gpu, t.instance_ptr(), k.throughput);
    const std::optional<error_band> band = ctx.band(t.gpu.id, c);
    const std::string modules_note = module_kernels_note(m, c, t.gpu, t.instance_ptr(), k.throughput);
    std::optional<training_cost> cost;
    const int nodes = nodes_of(c, t);
    if (!(o->price_per_hour >= 0 && o->price_per_hour <= 1e6) && o->price_per_hour != -1)
      throw invalid_request(fmt::format("--price-per-hour: must be between 0 and 1000000 USD, got {}", o->price_per_hour));
    double price = o->price_per_hour >= 0 ? o->price_per_hour : (t.instance ? t.instance->price_per_hour() : 0);  // SageMaker's when known
    const bool priced = o->price_per_hour >= 0 || t.instance;  // a bare --gpu: the catalog prices instances, not GPUs
    if (o->price_per_hour >= 0 && o->tokens.empty())
      throw invalid_request("--price-per-hour: prices the training of a token budget: give --tokens too");
    if (!o->tokens.empty()) cost = cost_to_train(te, parse_token_count(o->tokens, "--tokens"), nodes, price);
    // "10B tokens in 6.8 d on 2 node(s): ..." (text and markdown; JSON has the same figures under "training")
    auto training_line = [&]() -> std::string {
      const char* not_runnable = me.fits ? "" : " -- NOT RUNNABLE: the plan does not fit in GPU memory, this is what it would take if it did";
      if (t.instance)
        return fmt::format("{} tokens in {} on {} node(s): {:.0f} instance-hours, ${:.0f} at ${:.2f}/h per instance{}{}", human_tokens(cost->tokens),
                           human_duration(cost->seconds), nodes, cost->instance_hours, cost->usd, price,
                           // a SageMaker price from a --hardware file says so (the bundled prices are EC2's: docs/hardware.md)
                           o->price_per_hour < 0 && t.instance->sagemaker_price_per_hour_usd ? " (" + t.instance->price_label() + ")" : "",
                           not_runnable);
      // a bare --gpu: GPU-hours; a price only when --price-per-hour gives one (per GPU-hour)
      return fmt::format("{} tokens in {} on {} GPU(s): {:.0f} GPU-hours, {}{}", human_tokens(cost->tokens), human_duration(cost->seconds), nodes,
                         cost->instance_hours,
                         priced ? fmt::format("${:.0f} at ${:.2f}/h per GPU", cost->usd, price)
                                : std::string("no cost: the catalog prices instances, not a bare --gpu (give --instance, or "
                                              "--price-per-hour in USD per GPU-hour)"),
                         not_runnable);
    };
    if (o->format == "json") {
      auto j = io::estimate_to_json(m, c, me, te);
      io::add_band_json(j, me, te, band);
      if (!modules_note.empty()) j["memory"]["modules_note"] = modules_note;
      if (const std::string note = moe_host_note(m, c); !note.empty()) j["throughput"]["not_modelled"] = note;
      j["hardware"] = {{"gpu", t.gpu.id}, {"instance", t.instance ? t.instance->id : ""}, {"nodes", nodes}};
      if (t.gpu.power_limit_w > 0) j["hardware"]["power_limit_w"] = t.gpu.power_limit_w;  // the limit and kernel estimated at
      j["hardware"]["attention_kernel"] = to_string(t.gpu.attention);
      if (cost) {
        // a bare --gpu counts GPU-hours (nodes_of: one "node" per GPU), not instance-hours
        j["training"] = {{"tokens", cost->tokens}, {"seconds", cost->seconds}, {"hours", cost->seconds / 3600},
                         {t.instance ? "instance_hours" : "gpu_hours", cost->instance_hours}};
        if (priced) {  // a bare --gpu has no price in the catalog: no price and no cost rather than $0
          j["training"]["price_per_hour_usd"] = price;
          j["training"]["price_source"] = o->price_per_hour >= 0 ? std::string("--price-per-hour") : t.instance->price_source();
          j["training"]["cost_usd"] = cost->usd;
        }
      }
      ctx.out << j.dump(2) << "\n";
    } else if (o->format == "markdown") {
      ctx.out << estimate_markdown(m, t, c, me, te, band, modules_note);
      if (cost) ctx.out << "\n**Training:** " << training_line() << "\n";
    } else {
      print_table(ctx.out, m, t, c, nodes, me, te, style_for(ctx.out, o->ascii), band, modules_note);
      if (te.comm.tensor_parallel.raw() > 0 || te.comm.context_parallel.raw() > 0 || te.comm.expert_parallel.raw() > 0)
        // (each with its exposed part: "tensor … (exposed)" and "expert … (exposed)" were printed bare, which read as all
        // exposed under --tp-comm-overlap and --moe-a2a-overlap: DeepSeek-V3 on 1,024 H100s, expert 25.1 s of which 7.6)
        ctx.out << fmt::format("  communication by parallelism: data {:.3f} s (exposed {:.3f}), tensor {:.3f} s (exposed {:.3f}), "
                               "context {:.3f} s (exposed {:.3f}), expert {:.3f} s (exposed {:.3f})\n",
                               te.comm.data_parallel.raw(), te.exposed.data_parallel.raw(), te.comm.tensor_parallel.raw(),
                               te.exposed.tensor_parallel.raw(), te.comm.context_parallel.raw(), te.exposed.context_parallel.raw(),
                               te.comm.expert_parallel.raw(), te.exposed.expert_parallel.raw());
      if (const std::string note = moe_host_note(m, c); !note.empty()) ctx.out << "  not modelled: " << note << "\n";
      if (c.offload != 0)  // CPU offload: host memory against the node's RAM, and what the step waits for
        ctx.out << fmt::format("  CPU offload {}: host memory {:.2f} GiB per GPU, {:.2f} GiB per node{}; the step waits {:.3f} s for it "
                               "(CPU optimizer step {:.3f} s, not overlapped; host-device copies {:.3f} s before overlap)\n",
                               offload_to_string(c.offload), me.host_per_gpu.in(gib), host_memory_per_node(me, c).in(gib),
                               t.instance && t.instance->host_memory.raw() > 0
                                   ? fmt::format(" of {:.0f} GiB{}", t.instance->host_memory.in(gib),
                                                 host_memory_per_node(me, c) > t.instance->host_memory ? " -- DOES NOT FIT in host memory" : "")
                                   : std::string(" (a bare GPU: no host memory to compare with)"),
                               te.offload.raw(), te.offload_cpu_step.raw(), te.offload_pcie.raw());
      if (c.pp > 1) {
        const double bubble = static_cast<double>(c.pp - 1) / (static_cast<double>(c.virtual_stages()) * static_cast<double>(c.grad_accum));
        ctx.out << fmt::format("  pipeline: pp {} {}{}, {} micro-batches, bubble {:.3f} s ({:.1f}% of the ideal step); P2P {:.3f} s "
                               "(exposed {:.3f}) over {}; memory of rank {} (the most loaded), step time of rank {}\n",
                               c.pp, to_string(c.schedule), c.virtual_stages() > 1 ? fmt::format(" x{}", c.vpp) : std::string(), c.grad_accum,
                               te.bubble.raw(), 100 * bubble, te.comm.pipeline_parallel.raw(), te.exposed.pipeline_parallel.raw(),
                               c.world_size > c.nvlink_domain_gpus() ? "EFA" : "NVLink", me.pipeline_rank, te.pipeline_rank);
      }
      if (cost) ctx.out << "training   " << training_line() << "\n";
    }
    if (c.seq_len > m.max_context)
      spdlog::warn("--seq {} is longer than the model's context ({} tokens)", c.seq_len, m.max_context);
    return (o->check && !me.fits) ? failure : success;
  };
}

}  // namespace bwplan::cli
