// SPDX-License-Identifier: Apache-2.0
// `bwplan recommend MODEL`: search configurations and rank those that fit.
#include "cli.hpp"
#include "cmd_sagemaker.hpp"
#include "input.hpp"
#include "markdown.hpp"
#include "term.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <fstream>
#include <optional>
#include <ostream>

namespace bwplan::cli {

namespace {

struct recommend_options {
  std::string model;
  target_options target;
  std::string seq = "4096";
  std::string global_batch_tokens = "4194304";  ///< --global-batch-tokens (K/M/B suffixes, powers of 1000), or auto
  double seq_tolerance = 0.10;                  ///< --seq auto: throughput a longer sequence may give up
  // pinned settings (the search keeps them fixed)
  std::int64_t mbs = 0;                          ///< --mbs (0: searched)
  std::string ac;                                ///< --ac (empty: searched)
  std::string master;                            ///< --master (empty: fp32)
  std::string precision;                         ///< --precision: one format (= --precisions with one name)
  double headroom = 0.05;
  std::string headroom_source = "--headroom";  ///< where the headroom came from: --headroom, the error band, or the fixed default
  calibration_constants k;                     ///< --calibration's constants for the target GPU and stack (defaults without)
  int top = 5;
  std::string format = "table";
  std::string emit;    ///< sagemaker | estimator | modeltrainer: the best plan's SageMaker payload; plan: a plan file
  std::string output;  ///< -o FILE for --emit plan
  sagemaker::job_settings job;
  bool ascii = false;
  std::string precisions;             ///< --precisions LIST (comma-separated); empty: from --numerics
  std::string numerics = "balanced";  ///< conservative | balanced | aggressive
  std::vector<std::string> instances{"ml.p6-b200.48xlarge"};  ///< --instance (repeatable, comma-separated)
  std::string nodes = "1";        ///< --nodes N or auto
  int max_nodes = 8;              ///< --max-nodes with --nodes auto
  std::string objective = "throughput";
  std::string tokens;             ///< --tokens budget
  double budget_usd = -1;         ///< --budget-usd
  std::string deadline;           ///< --deadline (72h, 3d)
  double price_per_hour = -1;     ///< --price-per-hour override
  std::string parallel = "all";   ///< --parallel all | dp
  // fine-tuning (docs/finetune.md)
  std::string finetune = "full";  ///< --finetune full | lora | qlora
  std::string optimizer = "adamw";  ///< --optimizer NAME or auto (all six)
  int lora_rank = 16;
  double lora_alpha = 32;
  std::string lora_targets = "all-linear";
  double lora_dropout = 0;
  // the training stack (docs/stacks.md)
  std::string stack = "hf";         ///< --stack
  bool compile = false;             ///< --compile
  std::string modules = "fused";    ///< --modules
  bool expandable_segments = false; ///< --expandable-segments
  bool optimizer_in_backward = false;  ///< --optimizer-in-backward
  bool no_sequence_parallel = false;   ///< --no-sequence-parallel
  bool fsdp_embedding_units = false;   ///< --fsdp-embedding-units
  bool tp_comm_overlap = false;        ///< --tp-comm-overlap
  bool moe_a2a_overlap = false;        ///< --moe-a2a-overlap
  std::string offload = "none";     ///< --offload none | auto | a list of optimizer, params, activations
};

/// A memory saver that makes a full fine-tune fit: its label, its best plan, and the same layout run as a full
/// AdamW fine-tune (which does not fit) for the speed and memory it costs.
struct memory_saver {
  std::string label;
  plan_candidate best;
  memory_estimate full_memory;          ///< the full AdamW fine-tune in the saver's layout
  throughput_estimate full_throughput;  ///< its tokens/s (as if it fitted)
};

/// When no full AdamW fine-tune of `req` fits: the first memory saver, in order of how little it changes the run
/// (CPU offload of the optimizer, with the checkpoints, with the sharded parameters, all three: the same training on
/// other memory; 8-bit AdamW states; with bf16 masters; Adafactor; LoRA; QLoRA with `lora`'s rank and targets), whose search
/// finds a fitting plan. docs/finetune.md#what-recommend-says-when-a-full-fine-tune-does-not-fit
std::optional<memory_saver> find_memory_saver(const model_spec& m, const resolved_target& t, const plan_request& req,
                                              const lora_settings& lora, const calibration_constants& k) {
  struct step {
    const char* label;
    finetune_mode f;
    optimizer_kind o;
    std::optional<master_weights> master;
    unsigned offload = 0;
  };
  using namespace offload_target;
  // CPU offload first: it changes where the states live and what the step waits for, not what is trained or how
  // (the same full fine-tune, the same AdamW numerics); then the optimizers that change the states' numerics; then
  // what changes what is trained
  const step steps[] = {
      {"CPU offload of the optimizer (states, master weights, gradients and the step on the host)", finetune_mode::full,
       optimizer_kind::adamw, std::nullopt, optimizer},
      {"CPU offload of the optimizer and the activation checkpoints", finetune_mode::full, optimizer_kind::adamw, std::nullopt,
       optimizer | activations},
      {"CPU offload of the optimizer and the sharded parameters (FSDP2 CPUOffloadPolicy)", finetune_mode::full, optimizer_kind::adamw,
       std::nullopt, optimizer | params},
      {"CPU offload of the optimizer, the sharded parameters and the activation checkpoints", finetune_mode::full, optimizer_kind::adamw,
       std::nullopt, optimizer | params | activations},
      {"8-bit AdamW states (bitsandbytes AdamW8bit)", finetune_mode::full, optimizer_kind::adamw_8bit, std::nullopt},
      {"8-bit AdamW states with bf16 master weights", finetune_mode::full, optimizer_kind::adamw_8bit, master_weights::bf16},
      {"Adafactor (factored second moment) with bf16 master weights", finetune_mode::full, optimizer_kind::adafactor, master_weights::bf16},
      {"LoRA (frozen bf16 base)", finetune_mode::lora, optimizer_kind::adamw, std::nullopt},
      {"QLoRA (NF4 base)", finetune_mode::qlora, optimizer_kind::adamw, std::nullopt},
  };
  for (const step& st : steps) {
    // the stack's own rules: Megatron keeps fp32 main parameters; LoRA is modelled with hf and torchtune only
    if (req.stack == training_stack::megatron && st.master == master_weights::bf16) continue;
    if (st.f != finetune_mode::full && req.stack != training_stack::hf && req.stack != training_stack::torchtune) continue;
    if (st.offload != 0 && req.stack == training_stack::megatron) continue;  // (offload_violation)
    plan_request r = req;
    r.progress = nullptr;
    r.finetune = st.f;
    r.lora = lora;
    r.optimizers = {st.o};
    if (st.master) r.master = *st.master;
    if (st.offload != 0) r.offloads = {st.offload};  // (layouts a set cannot run are skipped: offload_violation)
    if (st.f != finetune_mode::full) {
      r.tps = {1};
      r.formats = {compute_format::bf16};
    }
    plan_result res = search_plans(m, t.gpu, t.instance ? &*t.instance : nullptr, r, 1, false, k.overheads, k.throughput);
    if (res.ranked.empty()) continue;
    memory_saver ms{st.label, res.ranked.front(), {}, {}};
    // a saver that is not itself an offload keeps the --offload the request asked for: named, and kept in the full
    // AdamW plan it is compared with (a review: "Adafactor ..." labelled a plan that also offloaded optimizer,params)
    const unsigned asked = st.offload == 0 ? ms.best.config.offload : 0u;
    if (asked != 0) ms.label += fmt::format(", with the CPU offload asked ({})", offload_to_string(asked));
    training_config full = ms.best.config;
    full.finetune = finetune_mode::full;
    full.lora = lora_settings{};
    full.optim = optimizer_kind::adamw;
    full.master = req.master;
    full.offload = asked;
    ms.full_memory = estimate_memory(m, full, t.gpu, k.overheads);
    ms.full_throughput = estimate_throughput(m, full, t.gpu, t.instance ? &*t.instance : nullptr, k.throughput);
    return ms;
  }
  return std::nullopt;
}

/// One line naming the saver, its plan, its tokens/s and what it costs against a full AdamW fine-tune.
std::string saver_line(const memory_saver& s) {
  const double cost = s.full_throughput.tokens_per_s > 0 ? 1 - s.best.throughput.tokens_per_s / s.full_throughput.tokens_per_s : 0;
  return fmt::format("the cheapest memory saver that fits: {}: {}; {:.0f} tokens/s, {:.2f} GiB per GPU ({} than a full AdamW "
                     "fine-tune in the same layout, which would need {:.2f} GiB per GPU and run {:.0f} tokens/s)",
                     s.label, describe(s.best.config), s.best.throughput.tokens_per_s, s.best.memory.device_peak().in(gib),
                     cost >= 0 ? fmt::format("{:.1f}% slower", 100 * cost) : fmt::format("{:.1f}% faster", -100 * cost),
                     s.full_memory.device_peak().in(gib), s.full_throughput.tokens_per_s);
}

/// One line on a plan whose step is mostly not compute (global_batch_hint): the share, the tokens per GPU per step,
/// and what a larger global batch would buy, or why none does. Empty when the plan hides its communication.
/// What a plan's step exposes, largest first: the parts above 1 % of the step ("expert all-to-all 1.369 s, …").
std::string exposed_parts(const plan_candidate& p) {
  const auto& te = p.throughput;
  std::vector<std::pair<double, std::string>> by;
  const auto& x = te.exposed;
  for (const auto& [v, name] : {std::pair{x.data_parallel.raw(), "data-parallel"}, std::pair{x.tensor_parallel.raw(), "tensor-parallel"},
                                std::pair{x.context_parallel.raw(), "context-parallel"}, std::pair{x.expert_parallel.raw(), "expert all-to-all"},
                                std::pair{x.pipeline_parallel.raw(), "pipeline sends"}, std::pair{te.bubble.raw(), "pipeline bubble"}})
    if (v > 0.01 * te.step.raw()) by.emplace_back(v, name);
  std::sort(by.begin(), by.end(), [](const auto& a, const auto& b) { return a.first > b.first; });
  std::string what;
  for (const auto& [v, name] : by) what += fmt::format("{}{} {:.3f} s", what.empty() ? "" : ", ", name, v);
  return what.empty() ? std::string("collectives") : what;
}

std::string hint_line(const batch_hint& h, const plan_candidate& best, int world) {
  if (!h.needed) return {};
  const auto& te = best.throughput;
  const std::string what = exposed_parts(best);
  const std::string parts =
      fmt::format("{:.0f}% of the step is exposed communication{} ({:.3f} s of {:.3f} s: {})", 100 * h.share,
                  te.bubble.raw() > 0 ? " and pipeline bubble" : "", (te.exposed_communication + te.bubble).raw(), te.step.raw(), what);
  // the plan's own global batch: the accumulation rounds the one asked (a review: 4194304 quoted of a plan running 4259840)
  const std::int64_t tokens = global_batch_tokens(best.config);
  const std::string per_gpu = fmt::format("{} tokens per step, {} per GPU", tokens, tokens / std::max(1, world));
  if (h.larger && h.then) {
    const auto& t2 = h.then->throughput;
    return fmt::format("{} with {}: the per-GPU batch is too small to hide it; a global batch of {} tokens ({} per GPU) would bring it "
                       "to {:.1f}% (MFU {:.1f}% -> {:.1f}%, {})",
                       parts, per_gpu, *h.larger, *h.larger / std::max(1, world), 100 * overhead_share(t2), 100 * te.mfu, 100 * t2.mfu,
                       describe(h.then->config));
  }
  if (h.at16) {
    const auto& t16 = h.at16->throughput;
    const auto& x = t16.exposed;
    const double floor = 0.01 * t16.step.raw();
    // why what is left stays (a review: a DDP plan's exposed gradient all-reduce was put down to expert all-to-all,
    // tensor-parallel collectives and FSDP gathers, none of which it had; and "16 times that" was 16 times the batch
    // asked, not the plan's own when the node count had rounded it up)
    std::vector<std::string> why;
    if (x.expert_parallel.raw() > floor || x.tensor_parallel.raw() > floor || x.context_parallel.raw() > floor)
      why.emplace_back("expert all-to-all and tensor- and context-parallel collectives are paid per micro-batch");
    if (x.data_parallel.raw() > floor) {
      const sharding sh = h.at16->config.shard;
      why.emplace_back(h.at16->config.grad_accum > 1 && (sh == sharding::full || sh == sharding::hybrid)
                           ? "FSDP's gathers are paid per micro-batch"
                           : "the data-parallel collectives of the step outlast the compute they overlap with");
    }
    if (te.bubble.raw() > 0 && t16.bubble.raw() > floor) why.emplace_back("the pipeline bubble stays");
    std::string reason;
    for (std::size_t i = 0; i < why.size(); ++i) reason += (i == 0 ? "" : i + 1 == why.size() ? " and " : ", ") + why[i];
    const std::int64_t t16_tokens = 16 * h.tokens;
    const std::string times = tokens == h.tokens ? "16 times that global batch" : fmt::format("16 times the {} tokens asked", h.tokens);
    return fmt::format("{} with {}; even {} ({} tokens, {} per GPU) leaves {:.0f}% (MFU {:.1f}% -> {:.1f}%, {}; its step still "
                       "exposes {}){}",
                       parts, per_gpu, times, t16_tokens, t16_tokens / std::max(1, world), 100 * overhead_share(t16), 100 * te.mfu,
                       100 * t16.mfu, describe(h.at16->config), exposed_parts(*h.at16), reason.empty() ? "" : ": " + reason);
  }
  return fmt::format("{} with {}; no plan fits a larger global batch", parts, per_gpu);
}

/// Formats `recommend` tries: --precisions when given (each must run on the GPU), else the --numerics
/// tier restricted to what the GPU supports (formats_for_tier: conservative = bf16, mxfp8; balanced adds fp8;
/// aggressive adds nvfp4; NVIDIA/AWS Blackwell guidance, docs/precision.md#recommendation).
/// With `skip_unsupported`, a listed format the GPU does not run is left out instead of refused (the comparison of
/// several instances, formats_for_instances).
std::vector<compute_format> formats_for(const recommend_options& o, const hardware_catalog& cat, const gpu_spec& gpu,
                                        bool skip_unsupported = false) {
  std::vector<compute_format> out;
  if (!o.precision.empty() && !o.precisions.empty())
    throw invalid_request("--precision pins one format and --precisions lists several: give one of them");
  if (!o.precisions.empty() || !o.precision.empty()) {
    const std::string flag = o.precision.empty() ? "--precisions" : "--precision";
    std::string list = o.precision.empty() ? o.precisions : o.precision;
    std::size_t start = 0;
    while (start <= list.size()) {
      const std::size_t comma = list.find(',', start);
      const std::string name = list.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
      const auto f = parse_format(name);
      if (!f) throw invalid_request(flag + ": unknown format '" + name + "' (" + precision_names() + ")");
      if (skip_unsupported && !supports(gpu, *f)) {
        if (comma == std::string::npos) break;
        start = comma + 1;
        continue;
      }
      require_support(cat, gpu, *f);
      if (std::find(out.begin(), out.end(), *f) == out.end()) out.push_back(*f);
      if (comma == std::string::npos) break;
      start = comma + 1;
    }
    return out;
  }
  const numerics_tier tier = o.numerics == "conservative" ? numerics_tier::conservative
                             : o.numerics == "aggressive" ? numerics_tier::aggressive : numerics_tier::balanced;
  return formats_for_tier(tier, gpu);
}

/// Formats `recommend` tries when it compares `instances` (more than one): each instance's own (formats_for of its
/// GPU: the --numerics tier it supports, or the --precisions it runs), as a union that search_fleet narrows to what each
/// GPU supports, so no instance is searched with another's formats and the pick does not depend on the order the
/// instances are given (a helper's sweep: `--instance ml.p5en.48xlarge,ml.p6-b300.48xlarge` searched B300 in bf16 and
/// fp8 only and picked p5en on cost; the reverse order searched mxfp8 and picked B300). A listed format no instance
/// runs is refused. One instance: formats_for.
std::vector<compute_format> formats_for_instances(const recommend_options& o, const hardware_catalog& cat,
                                                  const std::vector<std::string>& instances, const gpu_spec& first) {
  if (instances.size() <= 1) return formats_for(o, cat, first);
  std::vector<compute_format> out;
  std::vector<std::string> gpus;
  for (const auto& id : instances) {
    const gpu_spec& g = cat.gpu(cat.instance(id).gpu);
    require_power_within_rating(g);
    gpus.push_back(g.id);
    for (compute_format f : formats_for(o, cat, g, true))
      if (std::find(out.begin(), out.end(), f) == out.end()) out.push_back(f);
  }
  if (!o.precisions.empty() || !o.precision.empty()) {  // every listed format runs somewhere
    const std::string flag = o.precision.empty() ? "--precisions" : "--precision";
    const std::string list = o.precision.empty() ? o.precisions : o.precision;
    std::size_t start = 0;
    while (start <= list.size()) {
      const std::size_t comma = list.find(',', start);
      const std::string name = list.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
      if (const auto f = parse_format(name); f && std::find(out.begin(), out.end(), *f) == out.end())
        throw invalid_request(fmt::format("{}: {} runs on none of the GPUs compared ({})", flag, name, fmt::join(gpus, ", ")));
      if (comma == std::string::npos) break;
      start = comma + 1;
    }
  }
  return out;
}

/// One line on why the winning format won, for this model size.
std::string format_reason(const model_spec& m, const plan_result& r, const recommend_options& o, const gpu_spec& gpu) {
  if (r.ranked.empty() || r.best_per_format.size() < 1) return {};
  const plan_candidate& best = r.ranked.front();
  const compute_format win = best.config.format;
  const double params_b = static_cast<double>(count_parameters(m).total()) / 1e9;
  const plan_candidate* bf16 = nullptr;
  for (const auto& c : r.best_per_format)
    if (c.config.format == compute_format::bf16) bf16 = &c;
  std::string line = fmt::format("precision {} for a {:.1f}B-parameter model", to_string(win), params_b);
  // each format's best plan is the best over the sequences searched (--seq auto): one at another length says so (a
  // review: "-1% vs bf16" compared plan #1 at 2048 with bf16 at 1024, where mxfp8 at 2048 is 5 % faster than bf16)
  auto at_seq = [&](const plan_candidate& c) {
    return c.config.seq_len == best.config.seq_len ? std::string() : fmt::format(" at sequence {}", c.config.seq_len);
  };
  if (bf16) {
    // of the compute, not of the step: exposed communication, offload and the bubble are not what a faster GEMM shortens
    const double share = bf16->throughput.gemm / bf16->throughput.compute;
    line += fmt::format(": GEMMs are {:.0f}% of a bf16 step's compute{}", 100 * share, at_seq(*bf16));
  }
  std::vector<std::string> cmp;
  for (const auto& c : r.best_per_format) {
    if (c.config.format == win) continue;
    cmp.push_back(fmt::format("{:+.0f}% tokens/s vs {}{} (peak {} vs {})", 100 * (best.throughput.tokens_per_s / c.throughput.tokens_per_s - 1),
                              to_string(c.config.format), at_seq(c), human(best.memory.device_peak()), human(c.memory.device_peak())));
  }
  for (compute_format f : {compute_format::bf16, compute_format::fp8, compute_format::mxfp8, compute_format::nvfp4}) {
    bool tried = false, fit = false;
    for (const auto& c : r.best_per_format) if (c.config.format == f) fit = true;
    (void)tried;
    // (a LoRA / QLoRA search runs bf16 only: violations refuse the other formats for adapters)
    if (!fit && o.precisions.empty() && o.precision.empty() && o.finetune == "full" && supports(gpu, f)) {
      // formats outside the tier are named so the user knows what --numerics left out
      if (f == compute_format::nvfp4 && o.numerics != "aggressive") cmp.push_back("nvfp4 needs --numerics aggressive");
      if (f == compute_format::fp8 && o.numerics == "conservative") cmp.push_back("fp8 needs --numerics balanced");
    }
  }
  // the hf stack's fp8 runs torchao's eager Float8Linear, five kernels per cast (docs/precision.md): it wins compiled
  for (const auto& c : r.best_per_format)
    if (c.config.format != win && (c.config.format == compute_format::fp8 || c.config.format == compute_format::fp8_rowwise) &&
        c.config.stack == training_stack::hf && !c.config.compile)
      cmp.push_back(fmt::format("{} runs torchao's eager float8 casts here: try --compile", to_string(c.config.format)));
  for (std::size_t i = 0; i < cmp.size(); ++i) line += (i ? "; " : "; ") + cmp[i];
  // why bf16 won, only when another format was searched: by how much it lost, or a tie (the step bound by what the
  // formats share, e.g. exposed communication; the first format enumerated is kept)
  const plan_candidate* other = nullptr;
  for (const auto& c : r.best_per_format)
    if (c.config.format != win && (!other || c.throughput.tokens_per_s > other->throughput.tokens_per_s)) other = &c;
  if (win == compute_format::bf16 && other) {
    if (std::abs(best.throughput.tokens_per_s / other->throughput.tokens_per_s - 1) < 5e-4)
      line += fmt::format("; tied with {} on tokens/s: the step is bound by what the formats share ({:.0f} s of {:.0f} s exposed "
                          "communication and bubble), so bf16, enumerated first, is kept",
                          to_string(other->config.format), best.throughput.exposed_communication.raw() + best.throughput.bubble.raw(),
                          best.throughput.step.raw());
    else
      line += "; low-precision GEMMs do not pay for their casts and kept weights at this size";
  } else if (win == compute_format::bf16) {
    line += "; the only format searched";
  }
  return line;
}

/// `recommend --nodes auto` / several instances / --tokens: search_fleet, then the table, the notes and the pick.
/// Returns the picked row (for --emit) through `picked`.
int scale_out(context& ctx, const recommend_options& o, const hardware_catalog& cat, const model_spec& m,
              const std::vector<std::string>& instances, const plan_request& req, std::optional<fleet_row>* picked) {
  fleet_request fr;
  if (o.nodes == "auto") fr.node_counts = auto_node_counts(o.max_nodes);
  else fr.node_counts = {req.nodes};
  std::vector<std::string> ids;
  for (const auto& id : instances) {
    const instance_spec* inst = &cat.instance(id);
    if (std::find(ids.begin(), ids.end(), inst->id) != ids.end()) continue;  // the same instance named twice
    ids.push_back(inst->id);
    fr.instances.push_back(inst);
  }
  fr.objective = o.objective == "cost" ? fleet_objective::cost : o.objective == "time" ? fleet_objective::time : fleet_objective::throughput;
  fr.tokens = o.tokens.empty() ? 0 : parse_token_count(o.tokens, "--tokens");
  fr.deadline_s = o.deadline.empty() ? 0 : parse_duration(o.deadline, "--deadline");
  fr.budget_usd = o.budget_usd;
  fr.price_per_hour = o.price_per_hour;
  if ((fr.deadline_s > 0 || fr.budget_usd >= 0) && fr.tokens <= 0) throw invalid_request("--budget-usd and --deadline need --tokens");
  fr.search = req;
  fr.auto_global_batch = o.global_batch_tokens == "auto";
  fr.hints = picked == nullptr;  // the table explains rows whose step is mostly communication (--emit prints the plan only)
  const auto t0 = std::chrono::steady_clock::now();
  const fleet_result res = search_fleet(m, fr, [&cat](const instance_spec& i) -> const gpu_spec& { return cat.gpu(i.gpu); }, o.k.overheads,
                                        o.k.throughput);
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const auto& rows = res.rows;
  const fleet_row* pick = res.pick ? &rows[*res.pick] : nullptr;
  if (picked && pick) *picked = *pick;
  const double tokens = fr.tokens, deadline = fr.deadline_s;
  // single node or not, per instance
  std::vector<std::string> notes;
  // an instance whose GPU runs none of the formats asked is searched in bf16 (search_fleet): said, not silent
  for (const instance_spec* inst : fr.instances) {
    const gpu_spec& g = cat.gpu(inst->gpu);
    if (std::none_of(req.formats.begin(), req.formats.end(), [&](compute_format f) { return supports(g, f); })) {
      std::vector<std::string> names;
      for (compute_format f : req.formats) names.emplace_back(to_string(f));
      notes.push_back(fmt::format("{}: {} runs none of the formats asked ({}); its rows are bf16", inst->id, g.id, fmt::join(names, ", ")));
    }
  }
  for (const std::string& name : ids) {
    const fleet_row* one = nullptr;
    const fleet_row* two = nullptr;
    const fleet_row* first_fit = nullptr;
    for (const auto& r : rows) {
      if (r.instance->id != name) continue;
      if (r.nodes == 1) one = &r;
      if (r.nodes == 2) two = &r;
      if (r.best && first_fit == nullptr) first_fit = &r;
    }
    if (one && one->best) {
      std::string n = fmt::format("{}: a single node is enough ({:.0f} tokens/s, peak {} per GPU)", name,
                                  one->best->throughput.tokens_per_s, human(one->best->memory.device_peak()));
      if (two && two->best) {
        // whole percents as printed ("-0%" and "100% ... (above 100% because ...)" read for -0.3 % and 100.2 %)
        auto pct = [](double share) { const double p = std::round(100 * share); return p == 0 ? 0.0 : p; };
        n += fmt::format("; a second node buys {:+.0f}% tokens/s ({:.0f}% scaling efficiency)",
                         pct(two->best->throughput.tokens_per_s / one->best->throughput.tokens_per_s - 1), pct(two->scaling));
        // at a price of 0 (--price-per-hour 0) both costs are 0: no ratio to print
        if (one->usd_per_billion_tokens > 0)
          n += fmt::format(" at {:+.0f}% cost per token", pct(two->usd_per_billion_tokens / one->usd_per_billion_tokens - 1));
        else
          n += " at no cost (price 0)";
        if (pct(two->scaling) > 100)
          n += fmt::format(" (above 100% because the memory that sharding frees lets the plan change: {} vs {})",
                           describe(two->best->config), describe(one->best->config));
      }
      notes.push_back(n);
    } else if (first_fit && one) {  // one node was evaluated and nothing fitted on it
      // the smallest count evaluated that fits (--nodes auto tries 1, 2, 4, 8, ...: a count in between may fit too)
      std::string between;
      for (const auto& r : rows)
        if (r.instance->id == name && r.nodes < first_fit->nodes) between = fmt::format("; {} node(s) did not, counts in between were not evaluated", r.nodes);
      notes.push_back(fmt::format("{}: one node is not enough; the fewest nodes evaluated that fit: {} ({} GPUs){}", name,
                                  first_fit->nodes, first_fit->world, between));
    } else if (first_fit) {  // the smallest count asked fits; fewer nodes were not evaluated (--nodes N)
      notes.push_back(fmt::format("{}: fits on {} nodes ({} GPUs); fewer nodes were not evaluated (--nodes auto compares 1 to "
                                  "--max-nodes)", name, first_fit->nodes, first_fit->world));
    } else {
      notes.push_back(fmt::format("{}: nothing fits on {}{} nodes", name, fr.node_counts.size() > 1 ? "up to " : "",
                                  fr.node_counts.back()));
    }
  }
  // the price behind $/B tok and cost $, and which price it is (SageMaker's when a --hardware file gives one)
  for (const instance_spec* inst : fr.instances)
    notes.push_back(o.price_per_hour >= 0 ? fmt::format("{}: priced at ${:.2f}/h per instance (--price-per-hour)", inst->id, o.price_per_hour)
                                          : fmt::format("{}: priced at ${:.2f}/h per instance ({})", inst->id, inst->price_per_hour(),
                                                        inst->price_source()));
  // rows whose plan runs more tokens per step than asked, beyond the accumulation's rounding (> 5 %): one sequence per
  // GPU and micro-batch already makes more on that many GPUs (an audit: the header's global batch was all the table said)
  {
    std::vector<const fleet_row*> over;
    for (const auto& r : rows)
      if (r.best && static_cast<double>(global_batch_tokens(r.best->config)) > 1.05 * static_cast<double>(r.global_batch_tokens))
        over.push_back(&r);
    if (!over.empty()) {
      std::string where, runs;
      for (std::size_t i = 0; i < over.size(); ++i) {
        const std::int64_t g = global_batch_tokens(over[i]->best->config);
        where += fmt::format("{}{} x {}", i == 0 ? "" : ", ", over[i]->nodes, over[i]->instance->id);
        runs += fmt::format("{}{} ({:.3g}x)", i == 0 ? "" : ", ", g,
                            static_cast<double>(g) / static_cast<double>(over[i]->global_batch_tokens));
      }
      bool same = true;
      for (const fleet_row* r : over) same = same && r->global_batch_tokens == over.front()->global_batch_tokens;
      notes.push_back(fmt::format("global batch: the plans on {} run {} tokens per step, more than the global batch asked{}: every "
                                  "GPU takes at least one sequence per micro-batch",
                                  where, runs, same ? fmt::format(" ({})", over.front()->global_batch_tokens) : std::string()));
    }
  }
  // what the model leaves out for Megatron MoE, once (docs/scaling.md section 7), as the one-instance listing says it
  for (const auto& r : rows)
    if (r.best)
      if (const std::string note = moe_host_note(m, r.best->config); !note.empty()) {
        notes.push_back("not modelled: " + note);
        break;
      }
  if (picked) {  // --emit: the picked plan's payload is the output, not the table
    if (pick == nullptr) {
      ctx.err << fmt::format("bwplan: no configuration of {} fits{} on the instances and node counts searched; nothing emitted\n", m.name,
                             (o.budget_usd >= 0 || deadline > 0) ? " within the budget and deadline" : "");
      return failure;
    }
    spdlog::info("picked {} x {} ({}): {}", pick->nodes, pick->instance->id, o.objective, describe(pick->best->config));
    return success;
  }
  if (o.format == "json") {
    nlohmann::ordered_json j;
    j["model"] = m.name;
    j["objective"] = o.objective;
    if (tokens > 0) j["tokens"] = tokens;
    if (o.budget_usd >= 0) j["budget_usd"] = o.budget_usd;
    if (deadline > 0) j["deadline_s"] = deadline;
    j["search"] = {{"seconds", secs}, {"node_counts", fr.node_counts}, {"instances", ids}};
    j["rows"] = nlohmann::ordered_json::array();
    for (const auto& r : rows) {
      nlohmann::ordered_json x;
      x["instance"] = r.instance->id;
      x["nodes"] = r.nodes;
      x["world_size"] = r.world;
      x["price_per_hour_usd"] = r.price_per_hour;
      x["price_source"] = o.price_per_hour >= 0 ? std::string("--price-per-hour") : r.instance->price_source();
      x["evaluated"] = r.evaluated;
      x["fits"] = r.best.has_value();
      if (r.best) {
        const auto& te = r.best->throughput;
        x["tokens_per_s"] = te.tokens_per_s;
        x["tokens_per_s_per_gpu"] = te.tokens_per_s_per_gpu;
        x["mfu"] = te.mfu;
        x["scaling_efficiency"] = r.scaling;
        x["usd_per_billion_tokens"] = r.usd_per_billion_tokens;
        if (tokens > 0) {
          x["seconds"] = r.cost.seconds;
          x["hours"] = r.cost.seconds / 3600;
          x["cost_usd"] = r.cost.usd;
        }
        x["within_constraints"] = r.within;
        // the plan's own global batch (an audit: the row said the 4194304 asked of a plan running 33554432, one
        // sequence per GPU on 4,096 nodes), and the one asked
        x["global_batch_tokens"] = global_batch_tokens(r.best->config);
        x["global_batch_tokens_asked"] = r.global_batch_tokens;
        if (r.best_pipeline)
          x["best_pipeline_parallel"] = {{"tokens_per_s", r.best_pipeline->throughput.tokens_per_s},
                                         {"mfu", r.best_pipeline->throughput.mfu},
                                         {"pp", r.best_pipeline->config.pp},
                                         {"pp_schedule", to_string(r.best_pipeline->config.schedule)},
                                         {"vpp", r.best_pipeline->config.vpp},
                                         {"bubble_s", r.best_pipeline->throughput.bubble.raw()},
                                         {"description", describe(r.best_pipeline->config)}};
        x["overhead_share"] = overhead_share(te);
        if (r.hint.needed) {
          x["global_batch_hint"] = {{"share", r.hint.share}, {"summary", hint_line(r.hint, *r.best, r.world)}};
          if (r.hint.larger) x["global_batch_hint"]["global_batch_tokens"] = *r.hint.larger;
        }
        x["plan"] = io::estimate_to_json(m, r.best->config, r.best->memory, te);
      }
      j["rows"].push_back(x);
    }
    if (pick) j["pick"] = {{"instance", pick->instance->id}, {"nodes", pick->nodes}, {"description", describe(pick->best->config)}};
    else j["pick"] = nullptr;
    j["notes"] = notes;
    ctx.out << j.dump(2) << "\n";
  } else if (o.format == "markdown") {  // the same rows as the text table, as a GitHub-flavoured Markdown table
    ctx.out << fmt::format("**{}**: best plan per instance and node count{}, objective {}{}\n\n", m.name,
                           tokens > 0 ? fmt::format(" for {} tokens", human_tokens(tokens)) : "", o.objective,
                           fr.auto_global_batch ? "; global batch auto: max(4Mi, 32Ki × GPUs) tokens per step"
                                                : fmt::format("; global batch {} tokens per step", fr.search.global_batch_tokens));
    ctx.out << "| instance | nodes | GPUs | tokens/s | per GPU | MFU | scaling | $/B tok |" << (tokens > 0 ? " time | cost $ |" : "")
            << " plan |\n|---|---:|---:|---:|---:|---:|---:|---:|" << (tokens > 0 ? "---:|---:|" : "") << "---|\n";
    for (const auto& r : rows) {
      if (!r.best) {
        ctx.out << fmt::format("| `{}` | {} | {} | does not fit | | | | |{} |\n", r.instance->id, r.nodes, r.world, tokens > 0 ? " | |" : "");
        continue;
      }
      const auto& te = r.best->throughput;
      ctx.out << fmt::format("| `{}` | {} | {} | {:.0f} | {:.0f} | {:.1f}% | {:.0f}% | {:.2f} |{} {}{}{} |\n", r.instance->id, r.nodes, r.world,
                             te.tokens_per_s, te.tokens_per_s_per_gpu, 100 * te.mfu, 100 * r.scaling, r.usd_per_billion_tokens,
                             tokens > 0 ? fmt::format(" {} | {:.0f} |", human_duration(r.cost.seconds), r.cost.usd) : "",
                             describe(r.best->config), r.within ? "" : " (over budget/deadline)", &r == pick ? " **← pick**" : "");
    }
    if (!notes.empty()) ctx.out << "\n";
    for (const auto& n : notes) ctx.out << "- " << n << "\n";
    for (const auto& r : rows)
      if (r.best && r.hint.needed) ctx.out << fmt::format("- {} × {}: {}\n", r.nodes, r.instance->id, hint_line(r.hint, *r.best, r.world));
    if (pick) ctx.out << fmt::format("\n**pick** ({}): {} × `{}`, {}\n", o.objective, pick->nodes, pick->instance->id, describe(pick->best->config));
  } else {
    ctx.out << fmt::format("{}: best plan per instance and node count{}, objective {}{}\n\n", m.name,
                           tokens > 0 ? fmt::format(" for {} tokens", human_tokens(tokens)) : "", o.objective,
                           fr.auto_global_batch ? "; global batch auto: max(4Mi, 32Ki x GPUs) tokens per step"
                                                : fmt::format("; global batch {} tokens per step", fr.search.global_batch_tokens));
    ctx.out << fmt::format("{:<22} {:>5} {:>5} {:>12} {:>9} {:>6} {:>8} {:>10} {:>10} {:>9}  {}\n", "instance", "nodes", "GPUs",
                           "tokens/s", "per GPU", "MFU", "scaling", "$/B tok", tokens > 0 ? "time" : "", tokens > 0 ? "cost $" : "",
                           "plan");
    for (const auto& r : rows) {
      if (!r.best) {
        ctx.out << fmt::format("{:<22} {:>5} {:>5} {:>12}\n", r.instance->id, r.nodes, r.world, "does not fit");
        continue;
      }
      const auto& te = r.best->throughput;
      ctx.out << fmt::format("{:<22} {:>5} {:>5} {:>12.0f} {:>9.0f} {:>5.1f}% {:>7.0f}% {:>10.2f} {:>10} {:>9}  {}{}{}\n", r.instance->id,
                             r.nodes, r.world, te.tokens_per_s, te.tokens_per_s_per_gpu, 100 * te.mfu, 100 * r.scaling,
                             r.usd_per_billion_tokens, tokens > 0 ? human_duration(r.cost.seconds) : "",
                             tokens > 0 ? fmt::format("{:.0f}", r.cost.usd) : "", describe(r.best->config),
                             r.within ? "" : " (over budget/deadline)", &r == pick ? "  <- pick" : "");
    }
    ctx.out << "\n";
    for (const auto& n : notes) ctx.out << n << "\n";
    for (const auto& r : rows)
      if (r.best && r.hint.needed)
        ctx.out << fmt::format("{} x {}: {}\n", r.nodes, r.instance->id, hint_line(r.hint, *r.best, r.world));
    if (pick && pick->best->config.pp == 1 && pick->best_pipeline)
      ctx.out << fmt::format("pipeline parallelism: the best pp plan on {} x {} runs {:.0f} tokens/s ({:+.1f}%): {}; bubble {:.3f} s per step\n",
                             pick->nodes, pick->instance->id, pick->best_pipeline->throughput.tokens_per_s,
                             100 * (pick->best_pipeline->throughput.tokens_per_s / pick->best->throughput.tokens_per_s - 1),
                             describe(pick->best_pipeline->config), pick->best_pipeline->throughput.bubble.raw());
    if (pick)
      ctx.out << fmt::format("pick ({}): {} x {}, {}\n", o.objective, pick->nodes, pick->instance->id, describe(pick->best->config));
  }
  if (pick == nullptr) {
    ctx.err << fmt::format("bwplan: no configuration of {} fits{} on the instances and node counts searched\n", m.name,
                           (o.budget_usd >= 0 || deadline > 0) ? " within the budget and deadline" : "");
    return failure;
  }
  return success;
}

/// The plan of candidate `p` found on `t` with `nodes` instances (plan_to_json writes it).
plan plan_of(const recommend_options& o, const resolved_target& t, int nodes, double headroom, const plan_candidate& p) {
  plan x;
  x.name = fmt::format("bwplan recommend {}: {:.0f} tokens/s, MFU {:.1f}%, peak {}", o.model, p.throughput.tokens_per_s,
                       100 * p.throughput.mfu, human(p.memory.device_peak()));
  x.model = o.model;
  if (t.instance) {
    x.target.instance = t.instance->id;
    x.target.nodes = nodes;
  } else {
    x.target.gpu = t.gpu.id;
    x.target.gpus = p.config.world_size;
  }
  x.training = p.config;
  x.global_batch = p.config.micro_batch * p.config.grad_accum * p.config.dp();
  x.headroom = headroom;
  return x;
}

/// The id of a refusal io::trainer_refusals reports ("sharding optimizer: the reference trainer cannot run it (T-zero1):
/// ..." → "T-zero1"; the field where the message has none), and in `what` the setting it names ("sharding optimizer").
std::string refusal_id(const plan_violation& v, std::string* what = nullptr) {
  constexpr std::string_view mark = ": the reference trainer cannot run it (";  // io::trainer_refusals' wording
  const auto cut = v.message.find(mark);
  const auto close = cut == std::string::npos ? cut : v.message.find(')', cut);
  if (cut == std::string::npos || close == std::string::npos) return v.field;
  if (what) *what = v.message.substr(0, cut);
  return v.message.substr(cut + mark.size(), close - cut - mark.size());
}

/// What keeps the reference trainer from running configuration `c` of `m`: the contract's static refusals and the one
/// of the model's norms (Gemma under modules fused, T-modules, which the trainer finds at start).
std::vector<plan_violation> launch_refusals(const io::training_contract& k, const model_spec& m, const training_config& c) {
  plan p;
  p.training = c;
  std::vector<plan_violation> v = io::trainer_refusals(k, p);
  if (c.stack == training_stack::hf && c.modules == module_kernels::fused && !trainer_fuses_norms(m))
    v.push_back({"modules", "/modules", "modules fused: the reference trainer cannot run it (T-modules): " + m.name +
                                            "'s " + trainer_unfused_norms(m) + "; use --modules transformers"});
  return v;
}

/// Whether the reference trainer runs each ranked plan (io::trainer_refusals: the training contract's static refusals),
/// per row: the ids of the refusals it hits (empty: it runs).
std::vector<std::vector<std::string>> trainer_refusal_ids(const io::training_contract& k, const model_spec& m,
                                                         const std::vector<plan_candidate>& ranked) {
  std::vector<std::vector<std::string>> out;
  for (const auto& c : ranked) {
    std::vector<std::string> ids;
    for (const auto& v : launch_refusals(k, m, c.config)) ids.push_back(refusal_id(v));
    out.push_back(std::move(ids));
  }
  return out;
}

/// The "launch:" line of recommend's table when plan #1 is one the reference trainer refuses: what it hits, and the
/// best row the trainer runs, which `--emit sagemaker|estimator|modeltrainer` would launch (that search keeps only the
/// plans the trainer runs, so the emitted plan can differ from #1). Empty when #1 runs.
std::string launch_line(const io::training_contract& k, const model_spec& m, const std::vector<plan_candidate>& ranked) {
  if (ranked.empty()) return {};
  if (const std::string why = trainer_model_refusal(m); !why.empty())
    return why + ": --emit sagemaker|estimator|modeltrainer refuses it";
  const auto v = launch_refusals(k, m, ranked.front().config);
  if (v.empty()) return {};
  std::string what;
  for (const auto& x : v) {
    std::string setting = x.field;
    const std::string id = refusal_id(x, &setting);
    what += (what.empty() ? "" : "; ") + setting + " (" + id + ")";
  }
  std::string line = "plan #1 is not one the reference trainer runs: " + what + "; --emit sagemaker|estimator|modeltrainer searches only "
                     "the plans it runs";
  for (std::size_t i = 1; i < ranked.size(); ++i) {
    if (!launch_refusals(k, m, ranked[i].config).empty()) continue;
    return line + fmt::format(" (the best of the rows shown: #{}, {:.0f} tokens/s, {:+.1f}%)", i + 1, ranked[i].throughput.tokens_per_s,
                              100 * (ranked[i].throughput.tokens_per_s / ranked.front().throughput.tokens_per_s - 1));
  }
  return line + " (none of the rows shown)";
}

/// One line on why `a` beat `b`.
std::string why(const plan_candidate& a, const plan_candidate& b) {
  const double gain = a.throughput.tokens_per_s / b.throughput.tokens_per_s - 1;
  std::vector<std::string> diffs;
  const auto& x = a.config;
  const auto& y = b.config;
  if (x.micro_batch != y.micro_batch) diffs.push_back(fmt::format("micro-batch {} vs {}", x.micro_batch, y.micro_batch));
  if (x.seq_len != y.seq_len) diffs.push_back(fmt::format("sequence {} vs {}", x.seq_len, y.seq_len));
  if (!(x.ac == y.ac)) {
    const double ra = a.throughput.step_flops.recompute / a.throughput.step_flops.model;
    const double rb = b.throughput.step_flops.recompute / b.throughput.step_flops.model;
    diffs.push_back(fmt::format("recompute {:.0f}% vs {:.0f}% extra FLOPs", 100 * ra, 100 * rb));
  }
  if (x.shard != y.shard)
    diffs.push_back(fmt::format("{} vs {} ({:.3f} s vs {:.3f} s exposed communication)", shard_label(x), shard_label(y), a.throughput.exposed_communication.raw(),
                                b.throughput.exposed_communication.raw()));
  if (x.format != y.format) diffs.push_back(fmt::format("{} vs {} GEMMs", to_string(x.format), to_string(y.format)));
  if (x.loss != y.loss) diffs.push_back(fmt::format("{} vs {} loss", to_string(x.loss), to_string(y.loss)));
  if (x.tp != y.tp) diffs.push_back(fmt::format("tensor parallel {} vs {}", x.tp, y.tp));
  if (x.cp != y.cp) diffs.push_back(fmt::format("context parallel {} vs {}", x.cp, y.cp));
  if (x.pp != y.pp || x.vpp != y.vpp)
    diffs.push_back(fmt::format("pipeline {} vs {} ({:.3f} s vs {:.3f} s bubble)", x.pp > 1 ? fmt::format("{}x{}", x.pp, x.virtual_stages()) : "1",
                                y.pp > 1 ? fmt::format("{}x{}", y.pp, y.virtual_stages()) : "1", a.throughput.bubble.raw(), b.throughput.bubble.raw()));
  if (x.master != y.master) diffs.push_back(fmt::format("{} vs {} master weights", to_string(x.master), to_string(y.master)));
  if (x.ep != y.ep)
    diffs.push_back(fmt::format("expert parallel {} vs {} ({:.3f} s vs {:.3f} s exposed communication)", x.ep, y.ep,
                                a.throughput.exposed_communication.raw(), b.throughput.exposed_communication.raw()));
  // every other setting of the plan tables (optimizer, offload, expandable segments, compile, stack, fine-tuning, ...):
  // a review found "same knobs" for runners-up with another optimizer or offload set
  {
    const auto cx = setting_columns(x), cy = setting_columns(y);
    for (std::size_t i = 0; i < cx.size(); ++i) {
      const std::string_view k = cx[i].key;
      if (k == "micro_batch_size" || k == "seq_len" || k == "grad_accum" || k == "dp" || k == "global_batch_tokens" ||
          k == "activation_checkpointing" || k == "sharding" || k == "tp" || k == "cp" || k == "ep" || k == "pp" || k == "precision" ||
          k == "master_weights" || k == "loss" || cx[i].value == cy[i].value)
        continue;  // named above, or derived from those (accumulation, DP and the global batch follow micro-batch and layout)
      std::string name(k);
      std::replace(name.begin(), name.end(), '_', ' ');
      diffs.push_back(fmt::format("{} {} vs {}", name, cx[i].value, cy[i].value));
    }
  }
  std::string d;
  for (std::size_t i = 0; i < diffs.size(); ++i) d += (i ? "; " : "") + diffs[i];
  if (d.empty()) d = "no setting (the same plan)";
  if (std::abs(gain) < 5e-4)  // a tie on tokens/s: the search keeps the first found, say so
    return fmt::format("tied with the runner-up on tokens/s ({:.0f} vs {:.0f}; {}); kept the first found, peak {} vs {}; the runner-up "
                       "differs by {}",
                       a.throughput.tokens_per_s, b.throughput.tokens_per_s, describe(y), human(a.memory.device_peak()),
                       human(b.memory.device_peak()), d);
  return fmt::format("{:.1f}% more tokens/s than the runner-up ({}); the runner-up differs by {}, peak {} vs {}",
                     100 * gain, describe(y), d, human(a.memory.device_peak()), human(b.memory.device_peak()));
}

}  // namespace

namespace {

/// `--emit`: the plan file or the SageMaker payload of candidate `best` on `t` with `nodes` instances.
/// " (N more needed over M micro-batches per step ...)" when the search skipped candidates whose accumulation would
/// pass plan_limits::max_grad_accum (plan_result::skipped_accumulation), else "": why none fits may be the global batch
/// (a review: "try more nodes" was the only advice).
std::string skipped_accumulation_note(const plan_result& r, const plan_request& req) {
  if (r.skipped_accumulation <= 0) return {};
  return fmt::format(" ({} more needed over {} micro-batches per step for {} tokens: a smaller --global-batch-tokens lets them run)",
                     r.skipped_accumulation, plan_limits::max_grad_accum, req.global_batch_tokens);
}

int emit(context& ctx, const recommend_options& o, const model_spec& m, const resolved_target& t, int nodes, double headroom,
         const plan_candidate& best) {
  spdlog::info("emitting plan 1: {}", describe(best.config));
  if (o.emit == "plan") {
    ctx.warn_unrecorded("the plan file", true);  // (the SageMaker forms warn in emit_sagemaker)
    plan written = plan_of(o, t, nodes, headroom, best);
    ctx.record_gpu_settings(written.target);  // --power-limit and --attention-kernel, as estimated
    written.model = model_path_for_plan(written.model, o.output);  // (relative to the file, where readers look)
    const std::string text = io::plan_to_json(written).dump(2) + "\n";
    if (o.output.empty() || o.output == "-") {  // ("-": stdout, as report takes it)
      ctx.out << text;
    } else {
      refuse_output_over_input(o.output, {o.model}, "--output");
      write_output_file(o.output, text, "--output");
      spdlog::info("wrote {}", o.output);
    }
    return success;
  }
  if (!t.instance) throw invalid_request("--emit: a SageMaker job runs on instances; give --instance instead of a bare --gpu");
  const plan p = plan_of(o, t, nodes, headroom, best);
  const io::training_contract contract = ctx.contract();
  sagemaker::job_settings job = o.job;
  job.price_per_hour = o.price_per_hour;  // the price the plan was picked at prices the job too
  return emit_sagemaker(ctx, job, o.emit == "sagemaker" ? "request" : o.emit, {p, m, t.gpu, *t.instance, best.throughput, contract});
}

}  // namespace

runner register_recommend(CLI::App& app, context& ctx) {
  auto o = std::make_shared<recommend_options>();
  o->target.instance = "ml.p6-b200.48xlarge";
  auto* sub = app.add_subcommand("recommend", "search micro-batch, checkpointing, sharding and accumulation; rank by tokens/s");
  sub->add_option("MODEL", o->model, "Hugging Face config.json path or bundled preset")->required();
  sub->add_option("--instance", o->instances, "instance type; several (repeated or comma-separated) compare instances")
      ->delimiter(',')
      ->capture_default_str()
      ->check(non_empty());
  sub->add_option("--gpu", o->target.gpu, "a bare GPU instead of an instance: --nodes GPUs on one node of its interconnect (NVLink or PCIe), no network")->check(non_empty());
  sub->add_option("--nodes", o->nodes, "instances, or auto (1, 2, 4, ... up to --max-nodes)")->capture_default_str();
  sub->add_option("--max-nodes", o->max_nodes, "largest node count with --nodes auto")->capture_default_str();
  sub->add_option("--objective", o->objective, "rank node counts and instances by throughput | cost | time")->capture_default_str();
  sub->add_option("--tokens", o->tokens, "token budget (e.g. 100B, 1T): time and cost of each plan");
  sub->add_option("--budget-usd", o->budget_usd, "largest cost of the token budget, USD (needs --tokens)")
      ->check(finite_range(0, max_budget_usd));
  sub->add_option("--deadline", o->deadline, "longest time for the token budget, e.g. 72h or 3d (needs --tokens)");
  sub->add_option("--price-per-hour", o->price_per_hour, "USD per instance-hour (default: the catalog's price)")
      ->check(finite_range(0, max_price_per_hour));
  sub->add_option("--parallel", o->parallel,
                  "search space: all (DDP, FSDP full, HSDP across nodes, shard-grad-op, distributed optimizer; tp 1/2/4/8, more in "
                  "an NVL72 domain; pp 1-32 with 1F1B and interleaved schedules) | dp (DDP and FSDP full, tp 1, pp 1)")
      ->check(CLI::IsMember({"all", "dp"}))
      ->capture_default_str();
  sub->add_option("--seq,--seq-len", o->seq,
                  "sequence length in tokens (the model's context when shorter than the default), or 'auto': the best plan for "
                  "every length up to the context, and the longest "
                  "whose tokens/s is within --seq-tolerance of the fastest ranked first")
      ->capture_default_str();
  sub->add_option("--seq-tolerance", o->seq_tolerance, "with --seq auto: share of the best tokens/s a longer sequence may give up")
      ->capture_default_str()
      ->check(finite_range(0, max_headroom));
  sub->add_option("--global-batch-tokens", o->global_batch_tokens,
                  "tokens per optimizer step for the whole job (suffixes K, M, B: 4M = 4,000,000), or auto: max(4Mi, 32Ki x GPUs), "
                  "scaled with the node count; plans round it up to whole micro-batches, and the table says by how much")
      ->capture_default_str();
  sub->add_option("--mbs,--micro-batch-size", o->mbs, "pin the micro-batch size (default: searched, powers of two)");
  sub->add_option("--ac", o->ac, "pin activation checkpointing: none | full | every-K | selective-op | selective-attn (default: searched)")
      ->option_text("none|full|every-K|selective-op|selective-attn");
  sub->add_option("--master", o->master, "master weights: fp32 | bf16 (default fp32)")->check(CLI::IsMember({"fp32", "bf16"}));
  sub->add_option("--precision", o->precision, "pin one format (the same as --precisions with one name)")
      ->option_text("bf16|fp8|fp8-rowwise|mxfp8|nvfp4");
  sub->add_option("--headroom", o->headroom,
                  "share of GPU memory kept free at the peak (0-1; default: what the error band of the GPU and stack needs for a "
                  "plain \"fits\", docs/calibration.md#bands, else 0.05)")
      ->check(finite_range(0, max_headroom));
  sub->add_option("--top", o->top, "plans to show")->capture_default_str();
  sub->add_option("--format", o->format, "table | json | markdown")->capture_default_str()->check(CLI::IsMember({"table", "json", "markdown"}));
  sub->add_flag("--ascii", o->ascii, "plain ASCII memory bars (the default when stdout is not a terminal)");
  sub->add_option("--emit", o->emit, "print the best plan instead of the table: sagemaker (CreateTrainingJob request) | estimator | modeltrainer | plan (a plan file for bwplan check / --plan); the SageMaker forms search only plans the reference trainer runs")
      ->check(CLI::IsMember({"sagemaker", "estimator", "modeltrainer", "plan"}));
  sub->add_option("-o,--output", o->output, "with --emit plan: write to FILE instead of stdout");
  sub->add_option("--precisions", o->precisions, "formats to search, comma-separated (bf16,fp8,fp8-rowwise,mxfp8,nvfp4); default: by --numerics");
  sub->add_option("--numerics", o->numerics, "conservative (bf16, mxfp8) | balanced (+fp8) | aggressive (+nvfp4)")
      ->capture_default_str()->check(CLI::IsMember({"conservative", "balanced", "aggressive"}));
  sub->add_option("--finetune", o->finetune,
                  "full | lora | qlora: search LoRA / QLoRA plans (adapters at --lora-rank on --lora-targets; bf16, tp 1)")
      ->option_text("full|lora|qlora")->capture_default_str();
  sub->add_option("--optimizer", o->optimizer, "adamw | adamw-8bit | paged-adamw-8bit | adafactor | sgd | lion, or auto (search all)")
      ->option_text("NAME|auto")->capture_default_str();
  sub->add_option("--lora-rank", o->lora_rank, "LoRA rank (with --finetune lora|qlora)")->capture_default_str()->check(int_range(1, 65536));
  sub->add_option("--lora-alpha", o->lora_alpha, "LoRA alpha (with --finetune lora|qlora)")->capture_default_str();
  sub->add_option("--lora-targets", o->lora_targets, "attention | mlp | all-linear | q_proj,v_proj,... (with --finetune lora|qlora)")
      ->capture_default_str();
  sub->add_option("--lora-dropout", o->lora_dropout, "LoRA dropout (with --finetune lora|qlora)")->capture_default_str();
  sub->add_option("--stack", o->stack, "training stack the plans run on: hf | torchtitan | torchtune | megatron (docs/stacks.md)")
      ->option_text("hf|torchtitan|torchtune|megatron")->capture_default_str();
  sub->add_flag("--compile", o->compile, "plans use torch.compile as the stack applies it");
  sub->add_option("--modules", o->modules,
                  "RMSNorm and RoPE kernels of the plans' blocks (stack hf): fused | transformers (docs/stacks.md#modules)")
      ->option_text("fused|transformers")->capture_default_str();
  sub->add_flag("--expandable-segments", o->expandable_segments,
                "every plan runs with PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True (without it, a plan that fits only with it "
                "is kept with it and says so)");
  sub->add_flag("--optimizer-in-backward", o->optimizer_in_backward,
                "plans step each parameter in backward (torchtune's optimizer_in_bwd; --stack torchtune, one GPU, no accumulation)");
  sub->add_flag("--no-sequence-parallel", o->no_sequence_parallel,
                "plans with tp > 1 run without sequence parallel (Megatron-LM without --sequence-parallel; --stack megatron)");
  sub->add_flag("--fsdp-embedding-units", o->fsdp_embedding_units,
                "FSDP plans shard the embedding and the LM head as units of their own (torchtune custom_sharded_layers; "
                "torchtitan since 2025-07); plans without FSDP are skipped");
  sub->add_flag("--tp-comm-overlap", o->tp_comm_overlap,
                "plans with tp > 1 overlap the tensor-parallel collectives with the GEMMs (Megatron-LM --tp-comm-overlap, "
                "Transformer Engine userbuffers; --stack megatron)");
  sub->add_flag("--moe-a2a-overlap", o->moe_a2a_overlap,
                "plans with ep > 1 overlap each micro-batch's MoE all-to-all with another's compute (Megatron-Core "
                "overlap_moe_expert_parallel_comm)");
  sub->add_option("--offload", o->offload,
                  "CPU offload of every plan: none, a list of optimizer, params, activations, or auto (search the sets; "
                  "docs/finetune.md#cpu-offload)")
      ->option_text("none|auto|LIST")->capture_default_str();
  CLI::Option_group* sagemaker_group = sub->add_option_group("SageMaker (with --emit)");
  add_sagemaker_options(sagemaker_group, std::shared_ptr<sagemaker::job_settings>(o, &o->job));

  return [o, sub, sagemaker_group, &ctx]() -> int {
    const hardware_catalog cat = ctx.catalog();
    const model_spec m = ctx.model(o->model);
    if (o->nodes != "auto") {
      std::size_t pos = 0;
      int n = 0;
      try { n = std::stoi(o->nodes, &pos); } catch (const std::exception&) { pos = 0; }
      if (pos != o->nodes.size() || o->nodes.empty()) throw invalid_request("--nodes: expected a number or auto, got '" + o->nodes + "'");
      if (n < 1 || n > plan_limits::max_nodes)
        throw invalid_request(fmt::format("--nodes: must be between 1 and {}, got {}", plan_limits::max_nodes, o->nodes));
      o->target.nodes = n;
    }
    if (o->instances.empty()) throw invalid_request("--instance: no instance given");
    o->instances = unique_instances(cat, o->instances);  // each instance type once, however often it was given
    o->target.instance = o->instances.front();
    target_options tgt = o->target;
    if (!tgt.gpu.empty() && sub->get_option("--instance")->count() == 0) tgt.instance.clear();
    if (o->objective != "throughput" && o->objective != "cost" && o->objective != "time")
      throw invalid_request("--objective: unknown objective '" + o->objective + "' (use throughput, cost or time)");
    const resolved_target t = resolve_target(cat, tgt, "ml.p6-b200.48xlarge");
    if (o->top < 1) throw invalid_request("--top: must be >= 1, got " + std::to_string(o->top));
    if (!(o->headroom >= 0 && o->headroom < 1)) throw invalid_request(fmt::format("--headroom: must be in [0, 1), got {}", o->headroom));
    // --emit sagemaker/estimator/modeltrainer launches the reference trainer: the search keeps only the plans it
    // runs (the training contract's refusals, io::trainer_refusals); everything else searches what --parallel asks for.
    const bool launcher = !o->emit.empty() && o->emit != "plan";
    // the SageMaker options shape the job --emit writes: without one they would change nothing, silently (a review:
    // `recommend ... --role-arn x` without --emit)
    if (!launcher)
      for (const CLI::Option* opt : sagemaker_group->get_options())
        if (opt->count() > 0)
          throw invalid_request(fmt::format("{}: a SageMaker job setting, for --emit sagemaker, estimator or modeltrainer{}",
                                            opt->get_name(), o->emit.empty() ? "" : " (not --emit " + o->emit + ")"));
    const std::vector<compute_format> formats = formats_for_instances(*o, cat, o->instances, t.gpu);
    plan_request req = o->parallel == "all" ? full_search(t.gpu, o->target.nodes, formats, t.instance ? t.instance->nvlink_domain_gpus : 0)
                                            : plan_request{};
    if (o->parallel != "all") req.formats = formats;
    std::shared_ptr<const io::training_contract> contract;
    if (launcher) {
      contract = std::make_shared<const io::training_contract>(ctx.contract());
      if (const std::string why = trainer_model_refusal(m); !why.empty())
        throw invalid_request(fmt::format("--emit {}: {}", o->emit, why));
      // formats the trainer never runs (mxfp8 on the PyTorch 2.11 image) leave the search; naming one is an error
      std::vector<compute_format> runnable;
      for (compute_format f : req.formats) {
        plan probe;
        probe.training.format = f;  // with FSDP, tp 1: only what the format itself makes the trainer refuse
        probe.training.shard = sharding::full;
        probe.training.world_size = 8;
        const auto v = io::trainer_refusals(*contract, probe);
        if (v.empty()) runnable.push_back(f);
        else if (!o->precisions.empty()) throw invalid_request("--precisions: " + v.front().message);
        else spdlog::info("--emit {}: not searching {}: {}", o->emit, to_string(f), v.front().message);
      }
      if (runnable.empty()) throw invalid_request("--emit " + o->emit + ": none of the formats searched is one the reference trainer runs");
      req.formats = runnable;
      req.admit = [contract](const training_config& c) {
        plan p;
        p.training = c;
        return io::trainer_runs(*contract, p);
      };
    }
    req.nodes = o->target.nodes;
    // fine-tuning: what is trained, the adapters, the optimizers searched
    {
      const auto f = parse_finetune(o->finetune);
      if (!f) throw invalid_request("--finetune: unknown value '" + o->finetune + "' (full, lora, qlora)");
      req.finetune = *f;
      const auto targets = parse_lora_targets(o->lora_targets);
      if (!targets)
        throw invalid_request("--lora-targets: unknown value '" + o->lora_targets + "' (attention, mlp, all-linear, or q_proj,v_proj,...)");
      req.lora = lora_settings{o->lora_rank, o->lora_alpha, *targets, o->lora_dropout};
      const bool lora_given = sub->get_option("--lora-rank")->count() + sub->get_option("--lora-alpha")->count() +
                                  sub->get_option("--lora-targets")->count() + sub->get_option("--lora-dropout")->count() > 0;
      if (req.finetune == finetune_mode::full) {
        if (lora_given) throw invalid_request("--lora-rank/--lora-alpha/--lora-targets/--lora-dropout: need --finetune lora or qlora");
      } else {
        training_config probe;
        probe.finetune = req.finetune;
        probe.lora = req.lora;
        for (const auto& v : violations(probe)) throw flag_error(v);
        req.tps = {1};  // adapters: tp 1, bf16 (violations)
        const bool asked = !o->precision.empty() || !o->precisions.empty();
        if (asked && (req.formats.size() != 1 || req.formats.front() != compute_format::bf16))
          throw invalid_request("--precision: LoRA and QLoRA plans compute in bf16 in this release");
        req.formats = {compute_format::bf16};
      }
      if (o->optimizer == "auto") {
        req.optimizers.assign(std::begin(all_optimizers), std::end(all_optimizers));
      } else {
        const auto opt = parse_optimizer(o->optimizer);
        if (!opt) throw invalid_request("--optimizer: unknown value '" + o->optimizer +
                                        "' (adamw, adamw-8bit, paged-adamw-8bit, adafactor, sgd, lion, auto)");
        req.optimizers = {*opt};
      }
      if (launcher) {  // what the reference trainer cannot run leaves the search; naming only such settings is an error
        std::vector<optimizer_kind> runnable;
        std::string why;
        for (optimizer_kind k : req.optimizers) {
          plan probe;
          probe.training.finetune = req.finetune;
          probe.training.lora = req.finetune == finetune_mode::full ? lora_settings{} : req.lora;
          probe.training.optim = k;
          probe.training.shard = sharding::full;
          probe.training.world_size = 8;
          const auto v = io::trainer_refusals(*contract, probe);
          if (v.empty()) runnable.push_back(k);
          else if (why.empty()) why = v.front().message;
        }
        if (runnable.empty()) throw invalid_request("--emit " + o->emit + ": " + why);
        req.optimizers = runnable;
      }
    }
    if (o->global_batch_tokens == "auto") {
      const int gpus = o->target.nodes * (t.instance ? t.instance->gpus_per_node : 1);
      req.global_batch_tokens = auto_global_batch_tokens(gpus);  // --nodes auto: per node count (search_fleet)
    } else {
      const double g = parse_token_count(o->global_batch_tokens, "--global-batch-tokens");
      if (g > static_cast<double>(plan_limits::max_global_batch) * 1024)
        throw invalid_request(fmt::format("--global-batch-tokens: at most {} tokens, got '{}'",
                                          plan_limits::max_global_batch * 1024, o->global_batch_tokens));
      req.global_batch_tokens = static_cast<std::int64_t>(std::llround(g));
    }
    req.headroom = o->headroom;
    // pinned settings
    if (sub->get_option("--mbs")->count() > 0) {  // (given as 0 it was searched: a helper's sweep)
      if (o->mbs < 1 || o->mbs > plan_limits::max_micro_batch)
        throw invalid_request(fmt::format("--mbs: must be between 1 and {}, got {}", plan_limits::max_micro_batch, o->mbs));
      req.min_micro_batch = req.max_micro_batch = o->mbs;
    }
    if (!o->ac.empty()) {
      const auto a = parse_checkpointing(o->ac);
      if (!a) throw invalid_request("--ac: unknown value '" + o->ac + "' (none, full, every-K, selective-op, selective-attn)");
      req.checkpointings = {*a};
    }
    if (!o->master.empty()) req.master = o->master == "bf16" ? master_weights::bf16 : master_weights::fp32;
    {  // the training stack, torch.compile and the allocator setting (pinned)
      const auto st = parse_stack(o->stack);
      if (!st) throw invalid_request("--stack: unknown value '" + o->stack + "'; allowed: hf, torchtitan, torchtune, megatron");
      req.stack = *st;
      req.compile = o->compile;
      const auto mk = parse_module_kernels(o->modules);
      if (!mk) throw invalid_request("--modules: unknown value '" + o->modules + "'; allowed: fused, transformers");
      req.modules = *mk;
      // --emit's plan is for the reference trainer, which fuses no Gemma norm (T-modules): its plans run transformers' modules
      if (!o->emit.empty() && sub->get_option("--modules")->count() == 0 && req.stack == training_stack::hf && !trainer_fuses_norms(m))
        req.modules = module_kernels::transformers;
      if (req.modules != module_kernels::fused && req.stack != training_stack::hf)
        throw invalid_request("--modules transformers: the transformers modules are the hf stack's; use it with --stack hf");
      req.expandable_segments = o->expandable_segments;
      req.optimizer_in_backward = o->optimizer_in_backward;
      if (o->optimizer_in_backward && req.stack != training_stack::torchtune)
        throw invalid_request("--optimizer-in-backward: modelled as torchtune's optimizer_in_bwd; use it with --stack torchtune");
      req.sequence_parallel = !o->no_sequence_parallel;
      req.fsdp_embedding_units = o->fsdp_embedding_units;
      if (o->fsdp_embedding_units && (req.stack == training_stack::megatron || o->optimizer_in_backward))
        throw invalid_request("--fsdp-embedding-units: FSDP2 units of their own need FSDP plans; --stack megatron and "
                              "--optimizer-in-backward plan none");
      req.tp_comm_overlap = o->tp_comm_overlap;
      req.moe_a2a_overlap = o->moe_a2a_overlap;
      if (o->tp_comm_overlap && (req.stack != training_stack::megatron || o->no_sequence_parallel))
        throw invalid_request("--tp-comm-overlap: modelled as Megatron-LM's with Transformer Engine userbuffers; use it with "
                              "--stack megatron and sequence parallel");
      if (o->no_sequence_parallel && req.stack != training_stack::megatron)
        throw invalid_request("--no-sequence-parallel: modelled as Megatron-LM's tensor parallelism without --sequence-parallel; "
                              "use it with --stack megatron");
      if (o->offload == "auto") {
        req.offloads = offload_candidates();
      } else {
        const auto off = parse_offload(o->offload);
        if (!off)
          throw invalid_request("--offload: unknown value '" + o->offload + "' (none, auto, or a list of optimizer, params, activations)");
        req.offloads = {*off};
      }
      if (req.stack == training_stack::torchtune) {  // torchtune trains in the model dtype (bf16)
        if (o->master == "fp32") throw invalid_request("--master fp32: torchtune trains in the model dtype without autocast; use --master bf16 with --stack torchtune");
        req.master = master_weights::bf16;
      }
      if (req.stack == training_stack::megatron) {
        if (o->master == "bf16") throw invalid_request("--master bf16: Megatron-LM keeps fp32 main parameters (--bf16); use --master fp32 with --stack megatron");
        if (o->compile) throw invalid_request("--compile: Megatron-LM does not torch.compile its model (--stack megatron)");
        req.shardings = {sharding::none};
        req.losses = {loss_impl::standard};
      }
      if (req.finetune != finetune_mode::full && req.stack != training_stack::hf && req.stack != training_stack::torchtune)
        throw invalid_request(std::string("--finetune ") + to_string(req.finetune) + ": LoRA / QLoRA are modelled with the hf and torchtune stacks only");
    }
    if (launcher) {
      // the settings pinned for every candidate (stack, compile, modules, offload, ...) that the reference trainer refuses
      // whatever the search picks are an error naming the refusal, not "no configuration fits" (the admit filter
      // dropped every candidate); offload sets it refuses leave --offload auto's search
      auto probe_with = [&](unsigned off) {
        plan probe;
        probe.training = pinned_settings(req);
        probe.training.shard = sharding::full;
        probe.training.world_size = 8;
        probe.training.offload = off;
        return io::trainer_refusals(*contract, probe);
      };
      std::vector<unsigned> runnable;
      std::string why;
      for (unsigned off : req.offloads) {
        const auto v = probe_with(off);
        if (v.empty()) runnable.push_back(off);
        else if (why.empty()) why = v.front().message;
      }
      if (runnable.empty()) throw invalid_request("--emit " + o->emit + ": " + why);
      req.offloads = runnable;
    }
    // the constants of --calibration, and the headroom: --headroom as given, else what the error band needs for "fits"
    o->k = ctx.constants(t.gpu.id, req.stack);
    if (sub->get_option("--headroom")->count() == 0) {
      o->headroom = ctx.default_headroom(t.gpu.id, req.stack, o->headroom, o->headroom_source);
      req.headroom = o->headroom;
    }
    spdlog::debug("headroom {:.4f} ({})", req.headroom, o->headroom_source);
    const bool auto_seq = o->seq == "auto";
    if (auto_seq) {
      req.seq_lens.clear();
      for (std::int64_t s = 1024; s <= m.max_context; s *= 2) req.seq_lens.push_back(s);
      if (req.seq_lens.empty()) req.seq_lens.push_back(m.max_context);
    } else {
      std::int64_t s = 0;
      try {
        std::size_t pos = 0;
        s = std::stoll(o->seq, &pos);
        if (pos != o->seq.size()) throw std::invalid_argument("trailing");
      } catch (const std::exception&) {
        throw invalid_request("--seq: expected a number of tokens or 'auto', got '" + o->seq + "'");
      }
      if (s < 1 || s > plan_limits::max_seq_len)
        throw invalid_request(fmt::format("--seq: must be between 1 and {}, got {}", plan_limits::max_seq_len, o->seq));
      if (sub->get_option("--seq")->count() == 0 && s > m.max_context) {
        // The default length is capped at the model's context: gpt2's 1,024 learned positions cannot run 4,096
        // tokens at all (the search would evaluate nothing), and TinyLlama's 2,048 were what it was trained at.
        spdlog::info("--seq: {} tokens, {}'s context (the default {} is longer)", m.max_context, m.name, s);
        s = m.max_context;
      }
      if (m.positions > 0 && s > m.positions)
        throw invalid_request(fmt::format("--seq: sequence {} exceeds the {} learned position embeddings of {} (n_positions)", s,
                                          m.positions, m.name));
      // past the model's context (RoPE runs, as a deliberate context extension): estimate's warning; what --emit writes
      // would fail `bwplan check` (BWP004, an error), so it is refused (a helper's sweep: gemma-2b-it at --seq 16384
      // emitted a plan check rejected)
      if (s > m.max_context) {
        if (!o->emit.empty())
          throw invalid_request(fmt::format("--seq: {} is longer than {}'s context ({} tokens), and `bwplan check` refuses such a plan "
                                            "(BWP004 seq-exceeds-context): emit with --seq {} or less, or, for a deliberate context "
                                            "extension, write the plan with bwplan estimate --emit plan and add \"check\": "
                                            "{{\"disable\": [\"BWP004\"]}}",
                                            s, m.name, m.max_context, m.max_context));
        spdlog::warn("--seq {} is longer than the model's context ({} tokens)", s, m.max_context);
      }
      req.seq_lens = {s};
    }
    const bool scale = o->nodes == "auto" || o->instances.size() > 1 || !o->tokens.empty() || o->objective != "throughput" ||
                       o->budget_usd >= 0 || !o->deadline.empty();
    if (!o->output.empty() && o->emit.empty()) throw invalid_request("--output needs --emit plan");
    if (scale) {
      if (!tgt.gpu.empty() && tgt.instance.empty())
        throw invalid_request("--nodes auto, --tokens and --objective need instances (--instance), not a bare --gpu");
      if (sub->get_option("--top")->count() > 0)  // the comparison lists the best plan of each instance and node count
        throw invalid_request("--top: the comparison of instances and node counts (several --instance, --nodes auto, --tokens, "
                              "--objective, --budget-usd, --deadline) shows the best plan of each; give one instance and node "
                              "count without those to list the top plans");
      if (o->emit.empty()) return scale_out(ctx, *o, cat, m, o->instances, req, nullptr);
      // --emit after a fleet search: the picked instance type and node count
      std::optional<fleet_row> picked;
      if (const int rc = scale_out(ctx, *o, cat, m, o->instances, req, &picked); rc != success) return rc;
      const resolved_target pt{cat.gpu(picked->instance->gpu), *picked->instance};
      return emit(ctx, *o, m, pt, picked->nodes, req.headroom, *picked->best);
    }
    const auto t0 = std::chrono::steady_clock::now();
    const int world = req.nodes * (t.instance ? t.instance->gpus_per_node : 1);
    // every candidate needs more micro-batches per step than a plan takes (the planner skips them; a review found
    // --global-batch-tokens 1T on one H100 emitting grad_accum 61,035,157, which `check` of the file refused)
    if (const double most = static_cast<double>(plan_limits::max_grad_accum) * static_cast<double>(req.max_micro_batch) *
                            static_cast<double>(*std::max_element(req.seq_lens.begin(), req.seq_lens.end())) * world;
        static_cast<double>(req.global_batch_tokens) > most)
      throw invalid_request(fmt::format("--global-batch-tokens {}: above the {:.0f} tokens of {} micro-batches (the most a plan takes) "
                                        "of the largest micro-batch searched, {} x {} tokens on each of {} GPUs; use more GPUs or a "
                                        "smaller global batch",
                                        o->global_batch_tokens, most, plan_limits::max_grad_accum, req.max_micro_batch,
                                        *std::max_element(req.seq_lens.begin(), req.seq_lens.end()), world));
    progress_bar bar(ctx.err, "searching", plan_search_size(req, world, detail::ep_candidates(m, world).size(), m.layers), is_terminal(ctx.err));
    req.progress = [&bar](std::int64_t done, std::int64_t) { bar.update(done); };
    // at least two kept, so that "why" can compare the winner with the runner-up even with --top 1
    plan_result r = search_plans(m, t.gpu, t.instance ? &*t.instance : nullptr, req,
                                 static_cast<std::size_t>(std::max(o->top, 2)), auto_seq, o->k.overheads, o->k.throughput);
    bar.finish();
    const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    spdlog::debug("evaluated {} configurations in {:.4f} s ({} fit)", r.evaluated, secs, r.fitting);
    const std::string where = t.instance ? fmt::format("{} x {} ({} x {})", req.nodes, t.instance->id, world, t.gpu.id)
                                         : fmt::format("{} x {}", world, t.gpu.id);
    std::string explanation;
    std::string seq_note;
    if (auto_seq && !r.ranked.empty()) {
      // The question --seq auto answers: the longest sequence that keeps most of the best throughput. Rows: the best
      // plan of each length, longest first; #1 is the longest within the tolerance of the fastest.
      if (!(o->seq_tolerance >= 0 && o->seq_tolerance < 1))
        throw invalid_request(fmt::format("--seq-tolerance: must be in [0, 1), got {}", o->seq_tolerance));
      double fastest = 0;
      for (const auto& p : r.ranked) fastest = std::max(fastest, p.throughput.tokens_per_s);
      std::stable_sort(r.ranked.begin(), r.ranked.end(), [](const plan_candidate& a, const plan_candidate& b) {
        return a.config.seq_len > b.config.seq_len;
      });
      const auto keep = std::find_if(r.ranked.begin(), r.ranked.end(), [&](const plan_candidate& p) {
        return p.throughput.tokens_per_s >= (1 - o->seq_tolerance) * fastest;
      });
      std::rotate(r.ranked.begin(), keep, keep + 1);
      seq_note = fmt::format("sequence {}: the longest whose tokens/s ({:.0f}) is within {:.0f}% of the fastest length's ({:.0f}); "
                             "the other rows are the best plan of each length, longest first",
                             r.ranked.front().config.seq_len, r.ranked.front().throughput.tokens_per_s, 100 * o->seq_tolerance,
                             fastest);
    }
    if (!seq_note.empty()) explanation = seq_note;
    else if (r.ranked.size() >= 2) explanation = why(r.ranked[0], r.ranked[1]);
    else if (r.ranked.size() == 1) explanation = r.fitting > 1 ? fmt::format("the best of {} configurations that fit", r.fitting)
                                                               : "the only configuration that fits";
    if (r.ranked.size() > static_cast<std::size_t>(o->top)) r.ranked.resize(static_cast<std::size_t>(o->top));
    const std::string precision_line = format_reason(m, r, *o, t.gpu);
    // plan #1 may be a layout the reference trainer refuses (the distributed optimizer, pp, ...): say what --emit launches
    std::optional<io::training_contract> contract_for_rows;
    if (o->emit.empty()) {
      try {
        contract_for_rows = ctx.contract();
      } catch (const config_error& e) {
        spdlog::warn("not checking the plans against the reference trainer's contract: {}", e.what());
      }
    }
    const std::string launch = contract_for_rows ? launch_line(*contract_for_rows, m, r.ranked) : std::string();
    if (!o->emit.empty()) {
      if (r.ranked.empty()) {
        ctx.err << fmt::format("bwplan: no configuration of {} fits on {} with {:.1f}% headroom{}; nothing emitted\n", m.name,
                               where, 100 * req.headroom, skipped_accumulation_note(r, req));
        return failure;
      }
      return emit(ctx, *o, m, t, req.nodes, req.headroom, r.ranked.front());
    }
    // a best plan whose step is mostly communication: what a larger global batch would buy (global_batch_hint)
    batch_hint hint;
    if (!r.ranked.empty() && !auto_seq) hint = global_batch_hint(m, t.gpu, t.instance ? &*t.instance : nullptr, req, r.ranked.front(), 0.10,
                                                                        o->k.overheads, o->k.throughput);
    const std::string hint_text = r.ranked.empty() ? std::string() : hint_line(hint, r.ranked.front(), world);
    // a full fine-tune that does not fit: name the cheapest memory saver that does
    std::optional<memory_saver> saver;
    if (r.ranked.empty() && req.finetune == finetune_mode::full) saver = find_memory_saver(m, t, req, req.lora, o->k);
    // the lines under the table, one text for every format (a review: Markdown had only "Why #1" and "Launch")
    std::string batch_line, pipeline_line;
    if (!r.ranked.empty()) {
      const training_config& c1 = r.ranked.front().config;
      if (global_batch_tokens(c1) != req.global_batch_tokens)
        batch_line = fmt::format("plan #1 runs {} tokens per step ({} sequences of {}), {:+.1f}% from the {} asked: the accumulation "
                                 "rounds up to whole micro-batches",
                                 global_batch_tokens(c1), c1.micro_batch * c1.grad_accum * c1.dp(), c1.seq_len,
                                 100.0 * (static_cast<double>(global_batch_tokens(c1)) / static_cast<double>(req.global_batch_tokens) - 1),
                                 req.global_batch_tokens);
      if (c1.pp == 1 && r.best_pipeline && req.nodes > 1)  // the pipeline alternative across nodes
        pipeline_line = fmt::format("the best pp plan runs {:.0f} tokens/s ({:+.1f}%): {}; bubble {:.3f} s per step",
                                    r.best_pipeline->throughput.tokens_per_s,
                                    100 * (r.best_pipeline->throughput.tokens_per_s / r.ranked.front().throughput.tokens_per_s - 1),
                                    describe(r.best_pipeline->config), r.best_pipeline->throughput.bubble.raw());
    }
    if (o->format == "json") {
      nlohmann::ordered_json j;
      j["model"] = m.name;
      j["hardware"] = {{"gpu", t.gpu.id}, {"instance", t.instance ? t.instance->id : ""}, {"nodes", req.nodes}, {"world_size", world}};
      if (t.gpu.power_limit_w > 0) j["hardware"]["power_limit_w"] = t.gpu.power_limit_w;  // what the plans were estimated at
      j["hardware"]["attention_kernel"] = to_string(t.gpu.attention);
      j["search"] = {{"evaluated", r.evaluated}, {"fitting", r.fitting}, {"fitting_unreplayed", r.fitting_unreplayed}, {"headroom", req.headroom}, {"headroom_source", o->headroom_source},
                     {"global_batch_tokens", req.global_batch_tokens}, {"seq_lens", req.seq_lens}, {"seconds", secs}};
      j["plans"] = nlohmann::ordered_json::array();
      const auto refusals = contract_for_rows ? trainer_refusal_ids(*contract_for_rows, m, r.ranked) : std::vector<std::vector<std::string>>{};
      const bool model_refused = !trainer_model_refusal(m).empty();
      for (std::size_t i = 0; i < r.ranked.size(); ++i) {
        const auto& p = r.ranked[i];
        auto x = io::estimate_to_json(m, p.config, p.memory, p.throughput);
        io::add_band_json(x, p.memory, p.throughput, ctx.band(t.gpu.id, p.config));
        if (const std::string note = moe_host_note(m, p.config); !note.empty()) x["throughput"]["not_modelled"] = note;  // as estimate
        if (contract_for_rows)  // (a MoE or non-Llama-layout model: the trainer refuses the model itself, T-model)
          x["reference_trainer"] = {{"runs", refusals[i].empty() && !model_refused},
                                    {"refusals", model_refused ? std::vector<std::string>{"T-model"} : refusals[i]}};
        j["plans"].push_back(x);
      }
      if (!launch.empty()) j["launch"] = launch;
      j["explanation"] = explanation;
      j["precision_explanation"] = precision_line;
      if (hint.needed) {
        j["global_batch_hint"] = {{"share", hint.share}, {"summary", hint_text}};
        if (hint.larger) j["global_batch_hint"]["global_batch_tokens"] = *hint.larger;
      }
      if (r.best_pipeline)
        j["best_pipeline_parallel"] = io::estimate_to_json(m, r.best_pipeline->config, r.best_pipeline->memory, r.best_pipeline->throughput);
      j["search"]["precisions"] = nlohmann::ordered_json::array();
      for (compute_format f : req.formats) j["search"]["precisions"].push_back(to_string(f));
      j["search"]["finetune"] = to_string(req.finetune);
      j["search"]["optimizers"] = nlohmann::ordered_json::array();
      for (optimizer_kind k : req.optimizers) j["search"]["optimizers"].push_back(to_string(k));
      if (saver) {
        j["memory_saver"] = {{"label", saver->label},
                             {"plan", io::estimate_to_json(m, saver->best.config, saver->best.memory, saver->best.throughput)},
                             {"full_adamw_device_peak_bytes", saver->full_memory.device_peak().raw()},
                             {"full_adamw_tokens_per_s", saver->full_throughput.tokens_per_s},
                             {"summary", saver_line(*saver)}};
      }
      ctx.out << j.dump(2) << "\n";
    } else if (o->format == "markdown") {
      std::vector<std::optional<error_band>> bands;
      for (const auto& p : r.ranked) bands.push_back(ctx.band(t.gpu.id, p.config));
      std::string md = plans_markdown(m, where, req, r, explanation, bands);
      std::string lines;  // before the version footer, after "Why #1", in the text output's order
      for (const auto& [label, text] : {std::pair<const char*, const std::string*>{"Global batch", &batch_line}, {"Precision", &precision_line},
                                        {"Communication", &hint_text}, {"Launch", &launch}, {"Pipeline parallelism", &pipeline_line}})
        if (!text->empty()) lines += fmt::format("**{}:** {}\n\n", label, *text);
      if (saver) lines += "**No full fine-tune fits;** " + saver_line(*saver) + "\n\n";
      const auto footer = md.rfind("<sub>");
      md.insert(footer == std::string::npos ? md.size() : footer, lines);
      ctx.out << md;
    } else {
      ctx.out << fmt::format("{} on {}: {} configurations evaluated, {} fit{} with {:.1f}% headroom ({}); global batch {} tokens asked\n",
                             m.name, where, r.evaluated, r.fitting, unreplayed_note(r), 100 * req.headroom, o->headroom_source,
                             req.global_batch_tokens);
      if (!batch_line.empty()) ctx.out << "global batch: " << batch_line << "\n";
      ctx.out << "\n";
      if (!r.ranked.empty()) {
        const term_style st = style_for(ctx.out, o->ascii);
        // every setting in which the plans differ gets a column (differing_columns)
        std::vector<training_config> cfgs;
        for (const auto& p : r.ranked) cfgs.push_back(p.config);
        const std::vector<bool> show = differing_columns(cfgs, m.is_moe() ? std::vector<std::string_view>{"ep"} : std::vector<std::string_view>{});
        const auto proto = setting_columns(cfgs.front());
        std::vector<std::size_t> width(proto.size());
        for (std::size_t k = 0; k < proto.size(); ++k) {
          width[k] = proto[k].header.size();
          for (const auto& c : cfgs) width[k] = std::max(width[k], setting_columns(c)[k].value.size());
        }
        // each plan's error band (docs/calibration.md#bands): the device peak at its top and the three-state verdict
        std::vector<std::optional<error_band>> bands;
        for (const auto& p : r.ranked) bands.push_back(ctx.band(t.gpu.id, p.config));
        const bool any_band = std::any_of(bands.begin(), bands.end(), [](const auto& b) { return b.has_value(); });
        std::string head = fmt::format("{:>3} ", "#");
        for (std::size_t k = 0; k < proto.size(); ++k)
          if (show[k]) head += fmt::format(" {:>{}}", proto[k].header, width[k]);
        head += fmt::format(" {:>9}", "peak GiB");
        if (any_band) head += fmt::format(" {:>9}", "band GiB");
        ctx.out << head << fmt::format(" {:>7} {:>11} {:>9} {:>9} {:>9}  {}\n", "verdict", "tokens/s", "MFU(fmt)", "MFU(bf16)", "step s",
                                       "memory per GPU");
        for (std::size_t i = 0; i < r.ranked.size(); ++i) {
          const plan_candidate& p = r.ranked[i];
          std::string line = fmt::format("{:>3} ", i + 1);
          const auto vals = setting_columns(p.config);
          for (std::size_t k = 0; k < vals.size(); ++k)
            if (show[k]) line += fmt::format(" {:>{}}", vals[k].value, width[k]);
          line += fmt::format(" {:>9.2f}", p.memory.device_peak().in(gib));
          if (any_band) line += bands[i] ? fmt::format(" {:>9.2f}", band_top(p.memory, bands[i]->memory).in(gib)) : fmt::format(" {:>9}", "-");
          const fit_verdict v = bands[i] ? verdict_of(p.memory, bands[i]->memory) : fit_verdict::fits;
          ctx.out << line
                  << fmt::format(" {:>7} {:>11.0f} {:>8.1f}% {:>8.1f}% {:>9.3f}  {}\n", to_string(v), p.throughput.tokens_per_s,
                                 100 * p.throughput.mfu_format, 100 * p.throughput.mfu, p.throughput.step.raw(),
                                 memory_bar(peak_segments(p.memory), p.memory.capacity, req.headroom, 24, st));
        }
        if (any_band)
          ctx.out << fmt::format("\nband GiB: the device peak at the top of the plan's 90 % error band; verdict \"tight\" when that top "
                                 "passes {:.0f}% of the GPU's memory (docs/calibration.md#bands)",
                                 100 * (1 - tight_margin));
        ctx.out << "\nMFU(fmt): model FLOPs against the dense peak of the plan's precision; MFU(bf16): against the bf16 peak "
                   "(bf16-equivalent, above 100% possible for fp8/nvfp4 plans)";
        ctx.out << fmt::format("\nmemory bars: share of the {:.2f} GiB per GPU, '{}' = headroom limit; plan #1 holds\n",
                               r.ranked[0].memory.capacity.in(gib), st.unicode ? "│" : "|")
                << memory_legend(peak_segments(r.ranked[0].memory), st, "  ");
        ctx.out << "\nwhy: " << explanation << "\n";
        if (!precision_line.empty()) ctx.out << "precision: " << precision_line << "\n";
        if (!hint_text.empty()) ctx.out << "communication: " << hint_text << "\n";
        if (!launch.empty()) ctx.out << "launch: " << launch << "\n";
        if (!pipeline_line.empty()) ctx.out << "pipeline parallelism: " << pipeline_line << "\n";
        if (const std::string note = moe_host_note(m, r.ranked[0].config); !note.empty()) ctx.out << "not modelled: " << note << "\n";
      }
    }
    if (r.ranked.empty()) {
      if (r.evaluated == 0) {
        // Nothing was evaluated: the settings given rule out every candidate the search builds, which more nodes or a
        // larger GPU would not change ("try more nodes" was the advice for --optimizer-in-backward under the default
        // 4M-token global batch, which needs gradient accumulation at every micro-batch).
        const std::int64_t largest_step = req.max_micro_batch * req.seq_lens.back();
        std::string why = "the settings given rule out every candidate of the search";
        if (r.skipped_accumulation > 0)
          why = fmt::format("every candidate needs more than {} micro-batches per step for {} tokens; use a smaller "
                            "--global-batch-tokens or more GPUs", plan_limits::max_grad_accum, req.global_batch_tokens);
        if (req.optimizer_in_backward && world > 1)
          why = fmt::format("--optimizer-in-backward is torchtune's single-device optimizer_in_bwd: one GPU, unsharded (--gpu {} "
                            "without --instance), not {} GPUs", t.gpu.id, world);
        else if (req.optimizer_in_backward)
          why = fmt::format("--optimizer-in-backward runs one GPU without gradient accumulation (torchtune's optimizer_in_bwd), and the "
                            "global batch of {} tokens needs accumulation at every micro-batch searched (at most {} x {} tokens): "
                            "the global batch is one micro-batch, pass --global-batch-tokens {} (1 x {}) or another multiple of the "
                            "sequence up to {}",
                            req.global_batch_tokens, req.max_micro_batch, req.seq_lens.back(), req.seq_lens.back(),
                            req.seq_lens.back(), largest_step);
        ctx.err << fmt::format("bwplan: no configuration of {} could be evaluated on {}: {}\n", m.name, where, why);
        return failure;
      }
      if (saver && o->format == "table") ctx.out << "\nno full fine-tune fits; " << saver_line(*saver) << "\n";
      // candidates the global batch ruled out (a review: "try more nodes" was the advice when every micro-batch
      // that fits needed more accumulation than a plan takes)
      const std::string skipped = skipped_accumulation_note(r, req);
      ctx.err << fmt::format("bwplan: no configuration of {} fits on {} with {:.1f}% headroom{}; {}\n", m.name, where, 100 * req.headroom,
                             skipped, saver ? "see the memory saver above, or try more nodes" : "try more nodes or a larger GPU");
      return failure;
    }
    return success;
  };
}

}  // namespace bwplan::cli
