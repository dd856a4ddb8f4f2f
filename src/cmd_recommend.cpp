// SPDX-License-Identifier: Apache-2.0
// `bwplan recommend MODEL`: search configurations and rank those that fit.
#include "cli.hpp"
#include "cmd_sagemaker.hpp"
#include "input.hpp"
#include "markdown.hpp"
#include "term.hpp"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <chrono>
#include <fstream>
#include <optional>
#include <ostream>

namespace bwplan::cli {

namespace {

struct recommend_options {
  std::string model;
  target_options target;
  std::string seq = "4096";
  std::int64_t global_batch_tokens = 4'194'304;
  double headroom = 0.05;
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
};

/// Formats `recommend` tries: --precisions when given (each must run on the GPU), else the --numerics
/// tier restricted to what the GPU supports: conservative = bf16, mxfp8; balanced adds fp8; aggressive adds
/// nvfp4 (NVIDIA/AWS Blackwell guidance, docs/precision.md#recommendation).
std::vector<compute_format> formats_for(const recommend_options& o, const hardware_catalog& cat, const gpu_spec& gpu) {
  std::vector<compute_format> out;
  if (!o.precisions.empty()) {
    std::string list = o.precisions;
    std::size_t start = 0;
    while (start <= list.size()) {
      const std::size_t comma = list.find(',', start);
      const std::string name = list.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
      const auto f = parse_format(name);
      if (!f) throw invalid_request("--precisions: unknown format '" + name + "' (bf16, fp8, fp8-rowwise, mxfp8, nvfp4)");
      require_support(cat, gpu, *f);
      if (std::find(out.begin(), out.end(), *f) == out.end()) out.push_back(*f);
      if (comma == std::string::npos) break;
      start = comma + 1;
    }
    return out;
  }
  std::vector<compute_format> tier{compute_format::bf16, compute_format::mxfp8};
  if (o.numerics != "conservative") tier.push_back(compute_format::fp8);
  if (o.numerics == "aggressive") tier.push_back(compute_format::nvfp4);
  for (compute_format f : tier)
    if (supports(gpu, f)) out.push_back(f);
  return out;
}

/// One line on why the winning format won, for this model size.
std::string format_reason(const model_spec& m, const plan_result& r, const recommend_options& o) {
  if (r.ranked.empty() || r.best_per_format.size() < 1) return {};
  const plan_candidate& best = r.ranked.front();
  const compute_format win = best.config.format;
  const double params_b = static_cast<double>(count_parameters(m).total()) / 1e9;
  const plan_candidate* bf16 = nullptr;
  for (const auto& c : r.best_per_format)
    if (c.config.format == compute_format::bf16) bf16 = &c;
  std::string line = fmt::format("precision {} for a {:.1f}B-parameter model", to_string(win), params_b);
  if (bf16) {
    const double share = bf16->throughput.gemm / bf16->throughput.compute;
    line += fmt::format(": GEMMs are {:.0f}% of a bf16 step", 100 * share);
  }
  std::vector<std::string> cmp;
  for (const auto& c : r.best_per_format) {
    if (c.config.format == win) continue;
    cmp.push_back(fmt::format("{:+.0f}% tokens/s vs {} (peak {} vs {})", 100 * (best.throughput.tokens_per_s / c.throughput.tokens_per_s - 1),
                              to_string(c.config.format), human(best.memory.device_peak()), human(c.memory.device_peak())));
  }
  for (compute_format f : {compute_format::bf16, compute_format::fp8, compute_format::mxfp8, compute_format::nvfp4}) {
    bool tried = false, fit = false;
    for (const auto& c : r.best_per_format) if (c.config.format == f) fit = true;
    (void)tried;
    if (!fit && o.precisions.empty()) {
      // formats outside the tier are named so the user knows what --numerics left out
      if (f == compute_format::nvfp4 && o.numerics != "aggressive") cmp.push_back("nvfp4 needs --numerics aggressive");
      if (f == compute_format::fp8 && o.numerics == "conservative") cmp.push_back("fp8 needs --numerics balanced");
    }
  }
  for (std::size_t i = 0; i < cmp.size(); ++i) line += (i ? "; " : "; ") + cmp[i];
  if (win == compute_format::bf16) line += "; low-precision GEMMs do not pay for their casts and kept weights at this size";
  return line;
}

/// Best plan of one instance type at one node count.
struct scale_row {
  std::string instance;
  int nodes = 0;
  int world = 0;
  double price = 0;                     ///< USD per instance-hour
  std::optional<plan_candidate> best;   ///< absent: nothing fits
  std::int64_t evaluated = 0;
  double scaling = 0;                   ///< per-GPU tokens/s relative to the smallest fitting node count of the instance
  training_cost cost;                   ///< with --tokens
  double usd_per_btok = 0;              ///< USD per 1e9 tokens
  bool within = true;                   ///< meets --budget-usd and --deadline
};

/// `recommend --nodes auto` / several instances / --tokens: the best plan per (instance, nodes), ranked by objective.
int scale_out(context& ctx, const recommend_options& o, const hardware_catalog& cat, const model_spec& m,
              const std::vector<std::string>& instances, plan_request req) {
  std::vector<int> node_counts;
  if (o.nodes == "auto") {
    if (o.max_nodes < 1 || o.max_nodes > 4096) throw invalid_request("--max-nodes: must be between 1 and 4096");
    for (int n = 1; n <= o.max_nodes; n *= 2) node_counts.push_back(n);
    if (node_counts.back() != o.max_nodes) node_counts.push_back(o.max_nodes);
  } else {
    node_counts.push_back(std::stoi(o.nodes));
  }
  if (o.objective != "throughput" && o.objective != "cost" && o.objective != "time")
    throw invalid_request("--objective: unknown objective '" + o.objective + "' (use throughput, cost or time)");
  const double tokens = o.tokens.empty() ? 0 : parse_token_count(o.tokens, "--tokens");
  const double deadline = o.deadline.empty() ? 0 : parse_duration(o.deadline, "--deadline");
  if ((deadline > 0 || o.budget_usd >= 0) && tokens <= 0) throw invalid_request("--budget-usd and --deadline need --tokens");
  std::vector<scale_row> rows;
  const auto t0 = std::chrono::steady_clock::now();
  for (const auto& id : instances) {
    const instance_spec inst = cat.instance(id);
    const gpu_spec gpu = cat.gpu(inst.gpu);
    double base_per_gpu = 0;
    plan_request rq = req;  // the formats this instance's GPU runs
    rq.formats.clear();
    for (compute_format f : req.formats)
      if (supports(gpu, f)) rq.formats.push_back(f);
    if (rq.formats.empty()) rq.formats.push_back(compute_format::bf16);
    for (int n : node_counts) {
      rq.nodes = n;
      const plan_result r = search_plans(m, gpu, &inst, rq, 1);
      scale_row row;
      row.instance = inst.id;
      row.nodes = n;
      row.world = n * inst.gpus_per_node;
      row.price = o.price_per_hour >= 0 ? o.price_per_hour : inst.price_per_hour_usd;
      row.evaluated = r.evaluated;
      if (!r.ranked.empty()) {
        row.best = r.ranked.front();
        const auto& te = row.best->throughput;
        if (base_per_gpu <= 0) base_per_gpu = te.tokens_per_s_per_gpu;
        row.scaling = te.tokens_per_s_per_gpu / base_per_gpu;
        row.usd_per_btok = n * row.price / 3600 / te.tokens_per_s * 1e9;
        if (tokens > 0) row.cost = cost_to_train(te, tokens, n, row.price);
        if (deadline > 0 && row.cost.seconds > deadline) row.within = false;
        if (o.budget_usd >= 0 && row.cost.usd > o.budget_usd) row.within = false;
      }
      rows.push_back(std::move(row));
    }
  }
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  // pick by objective among rows that fit and meet the constraints
  const scale_row* pick = nullptr;
  auto better = [&](const scale_row& a, const scale_row& b) {
    const auto& x = a.best->throughput;
    const auto& y = b.best->throughput;
    if (o.objective == "cost") return a.usd_per_btok < b.usd_per_btok;
    return x.tokens_per_s > y.tokens_per_s;  // throughput; time (fixed budget): the fastest job finishes first
  };
  for (const auto& r : rows)
    if (r.best && r.within && (pick == nullptr || better(r, *pick))) pick = &r;
  // single node or not, per instance
  std::vector<std::string> notes;
  for (const auto& id : instances) {
    const scale_row* one = nullptr;
    const scale_row* two = nullptr;
    const scale_row* first_fit = nullptr;
    for (const auto& r : rows) {
      if (r.instance != cat.instance(id).id) continue;
      if (r.nodes == 1) one = &r;
      if (r.nodes == 2) two = &r;
      if (r.best && first_fit == nullptr) first_fit = &r;
    }
    const std::string name = cat.instance(id).id;
    if (one && one->best) {
      std::string n = fmt::format("{}: a single node is enough ({:.0f} tokens/s, peak {} per GPU)", name,
                                  one->best->throughput.tokens_per_s, human(one->best->memory.device_peak()));
      if (two && two->best)
        n += fmt::format("; a second node buys {:+.0f}% tokens/s ({:.0f}% scaling efficiency) at {:+.0f}% cost per token",
                         100 * (two->best->throughput.tokens_per_s / one->best->throughput.tokens_per_s - 1), 100 * two->scaling,
                         100 * (two->usd_per_btok / one->usd_per_btok - 1));
      notes.push_back(n);
    } else if (first_fit) {
      notes.push_back(fmt::format("{}: one node is not enough; the model needs at least {} nodes ({} GPUs)", name,
                                  first_fit->nodes, first_fit->world));
    } else {
      notes.push_back(fmt::format("{}: nothing fits on up to {} nodes", name, node_counts.back()));
    }
  }
  if (o.format == "json") {
    nlohmann::ordered_json j;
    j["model"] = m.name;
    j["objective"] = o.objective;
    if (tokens > 0) j["tokens"] = tokens;
    if (o.budget_usd >= 0) j["budget_usd"] = o.budget_usd;
    if (deadline > 0) j["deadline_s"] = deadline;
    j["search"] = {{"seconds", secs}, {"node_counts", node_counts}, {"instances", instances}};
    j["rows"] = nlohmann::ordered_json::array();
    for (const auto& r : rows) {
      nlohmann::ordered_json x;
      x["instance"] = r.instance;
      x["nodes"] = r.nodes;
      x["world_size"] = r.world;
      x["price_per_hour_usd"] = r.price;
      x["evaluated"] = r.evaluated;
      x["fits"] = r.best.has_value();
      if (r.best) {
        const auto& te = r.best->throughput;
        x["tokens_per_s"] = te.tokens_per_s;
        x["tokens_per_s_per_gpu"] = te.tokens_per_s_per_gpu;
        x["mfu"] = te.mfu;
        x["scaling_efficiency"] = r.scaling;
        x["usd_per_billion_tokens"] = r.usd_per_btok;
        if (tokens > 0) {
          x["seconds"] = r.cost.seconds;
          x["hours"] = r.cost.seconds / 3600;
          x["cost_usd"] = r.cost.usd;
        }
        x["within_constraints"] = r.within;
        x["plan"] = to_json(m, r.best->config, r.best->memory, te);
      }
      j["rows"].push_back(x);
    }
    if (pick) j["pick"] = {{"instance", pick->instance}, {"nodes", pick->nodes}, {"description", describe(pick->best->config)}};
    else j["pick"] = nullptr;
    j["notes"] = notes;
    ctx.out << j.dump(2) << "\n";
  } else {
    ctx.out << fmt::format("{}: best plan per instance and node count{}, objective {}\n\n", m.name,
                           tokens > 0 ? fmt::format(" for {:.4g} tokens", tokens) : "", o.objective);
    ctx.out << fmt::format("{:<22} {:>5} {:>5} {:>12} {:>9} {:>6} {:>8} {:>10} {:>10} {:>9}  {}\n", "instance", "nodes", "GPUs",
                           "tokens/s", "per GPU", "MFU", "scaling", "$/B tok", tokens > 0 ? "time" : "", tokens > 0 ? "cost $" : "",
                           "plan");
    for (const auto& r : rows) {
      if (!r.best) {
        ctx.out << fmt::format("{:<22} {:>5} {:>5} {:>12}\n", r.instance, r.nodes, r.world, "does not fit");
        continue;
      }
      const auto& te = r.best->throughput;
      ctx.out << fmt::format("{:<22} {:>5} {:>5} {:>12.0f} {:>9.0f} {:>5.1f}% {:>7.0f}% {:>10.2f} {:>10} {:>9}  {}{}{}\n", r.instance,
                             r.nodes, r.world, te.tokens_per_s, te.tokens_per_s_per_gpu, 100 * te.mfu, 100 * r.scaling,
                             r.usd_per_btok, tokens > 0 ? human_duration(r.cost.seconds) : "",
                             tokens > 0 ? fmt::format("{:.0f}", r.cost.usd) : "", describe(r.best->config),
                             r.within ? "" : " (over budget/deadline)", &r == pick ? "  <- pick" : "");
    }
    ctx.out << "\n";
    for (const auto& n : notes) ctx.out << n << "\n";
    if (pick)
      ctx.out << fmt::format("pick ({}): {} x {}, {}\n", o.objective, pick->nodes, pick->instance, describe(pick->best->config));
  }
  if (pick == nullptr) {
    ctx.err << fmt::format("bwplan: no configuration of {} fits{} on the instances and node counts searched\n", m.name,
                           (o.budget_usd >= 0 || deadline > 0) ? " within the budget and deadline" : "");
    return failure;
  }
  return success;
}

/// The plan file (docs/plan.schema.json) of candidate `p`.
nlohmann::ordered_json plan_json(const recommend_options& o, const resolved_target& t, const plan_request& req,
                                 const plan_candidate& p) {
  const training_config& c = p.config;
  nlohmann::ordered_json j;
  j["schema_version"] = 1;
  j["name"] = fmt::format("bwplan recommend {}: {:.0f} tokens/s, MFU {:.1f}%, peak {}", o.model, p.throughput.tokens_per_s,
                          100 * p.throughput.mfu, human(p.memory.device_peak()));
  j["model"] = o.model;
  if (t.instance) {
    j["instance"] = t.instance->id;
    j["nodes"] = req.nodes;
  } else {
    j["gpu"] = t.gpu.id;
    j["gpus"] = c.world_size;
  }
  j["precision"] = to_string(c.format);
  j["master_weights"] = to_string(c.master);
  j["micro_batch_size"] = c.micro_batch;
  j["seq_len"] = c.seq_len;
  j["global_batch_size"] = c.micro_batch * c.grad_accum * c.dp();
  j["grad_accum"] = c.grad_accum;
  j["activation_checkpointing"] = c.ac_enabled ? "full" : to_string(c.selective);
  j["precision"] = to_string(c.format);
  j["ac_every"] = c.ac_every;
  j["sharding"] = to_string(c.shard);
  if (c.shard == sharding::hybrid) j["shard_group"] = c.shard_size();
  j["tp"] = c.tp;
  j["cp"] = c.cp;
  j["ep"] = c.ep;
  j["pp"] = 1;
  j["optimizer"] = "adamw";
  j["optimizer_impl"] = to_string(c.optimizer);
  j["loss"] = to_string(c.loss);
  j["headroom"] = req.headroom;
  return j;
}

/// One line on why `a` beat `b`.
std::string why(const plan_candidate& a, const plan_candidate& b) {
  const double gain = a.throughput.tokens_per_s / b.throughput.tokens_per_s - 1;
  std::vector<std::string> diffs;
  const auto& x = a.config;
  const auto& y = b.config;
  if (x.micro_batch != y.micro_batch) diffs.push_back(fmt::format("micro-batch {} vs {}", x.micro_batch, y.micro_batch));
  if (x.seq_len != y.seq_len) diffs.push_back(fmt::format("sequence {} vs {}", x.seq_len, y.seq_len));
  if (x.ac_enabled != y.ac_enabled || x.ac_every != y.ac_every || x.selective != y.selective) {
    const double ra = a.throughput.step_flops.recompute / a.throughput.step_flops.model;
    const double rb = b.throughput.step_flops.recompute / b.throughput.step_flops.model;
    diffs.push_back(fmt::format("recompute {:.0f}% vs {:.0f}% extra FLOPs", 100 * ra, 100 * rb));
  }
  if (x.shard != y.shard)
    diffs.push_back(fmt::format("{} vs {} ({:.3f} s vs {:.3f} s exposed communication)", shard_label(x), shard_label(y), a.throughput.exposed_communication.raw(),
                                b.throughput.exposed_communication.raw()));
  if (x.format != y.format) diffs.push_back(fmt::format("{} vs {} GEMMs", to_string(x.format), to_string(y.format)));
  if (x.loss != y.loss) diffs.push_back(fmt::format("{} vs {} loss", to_string(x.loss), to_string(y.loss)));
  if (x.ep != y.ep)
    diffs.push_back(fmt::format("expert parallel {} vs {} ({:.3f} s vs {:.3f} s exposed communication)", x.ep, y.ep,
                                a.throughput.exposed_communication.raw(), b.throughput.exposed_communication.raw()));
  std::string d;
  for (std::size_t i = 0; i < diffs.size(); ++i) d += (i ? "; " : "") + diffs[i];
  if (d.empty()) d = "same knobs";
  return fmt::format("{:.1f}% more tokens/s than the runner-up ({}); the runner-up differs by {}, peak {} vs {}",
                     100 * gain, describe(y), d, human(a.memory.device_peak()), human(b.memory.device_peak()));
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
  sub->add_option("--gpu", o->target.gpu, "a bare GPU instead of an instance (one GPU per node)")->check(non_empty());
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
                  "search space: all (DDP, FSDP full, HSDP across nodes, shard-grad-op; tp 1/2/4/8) | dp (DDP and FSDP full, tp 1; "
                  "what --emit sagemaker/estimator/modeltrainer use)")
      ->check(CLI::IsMember({"all", "dp"}))
      ->capture_default_str();
  sub->add_option("--seq,--seq-len", o->seq, "sequence length in tokens, or 'auto' (best plan per length up to the context)")->capture_default_str();
  sub->add_option("--global-batch-tokens", o->global_batch_tokens, "tokens per optimizer step for the whole job")->capture_default_str()
      ->check(int_range(1, max_global_batch_tokens));
  sub->add_option("--headroom", o->headroom, "share of GPU memory kept free at the peak (0-1)")->capture_default_str()
      ->check(finite_range(0, max_headroom));
  sub->add_option("--top", o->top, "plans to show")->capture_default_str();
  sub->add_option("--format", o->format, "table | json | markdown")->capture_default_str()->check(CLI::IsMember({"table", "json", "markdown"}));
  sub->add_flag("--ascii", o->ascii, "plain ASCII memory bars (the default when stdout is not a terminal)");
  sub->add_option("--emit", o->emit, "print the best plan instead of the table: sagemaker (CreateTrainingJob request) | estimator | modeltrainer | plan (a plan file for bwplan check / --plan)")
      ->check(CLI::IsMember({"sagemaker", "estimator", "modeltrainer", "plan"}));
  sub->add_option("-o,--output", o->output, "with --emit plan: write to FILE instead of stdout");
  sub->add_option("--precisions", o->precisions, "formats to search, comma-separated (bf16,fp8,fp8-rowwise,mxfp8,nvfp4); default: by --numerics");
  sub->add_option("--numerics", o->numerics, "conservative (bf16, mxfp8) | balanced (+fp8) | aggressive (+nvfp4)")
      ->capture_default_str()->check(CLI::IsMember({"conservative", "balanced", "aggressive"}));
  add_sagemaker_options(sub->add_option_group("SageMaker (with --emit)"), std::shared_ptr<sagemaker::job_settings>(o, &o->job));

  return [o, sub, &ctx]() -> int {
    const hardware_catalog cat = ctx.catalog();
    const model_spec m = ctx.model(o->model);
    if (o->nodes != "auto") {
      std::size_t pos = 0;
      int n = 0;
      try { n = std::stoi(o->nodes, &pos); } catch (const std::exception&) { pos = 0; }
      if (pos != o->nodes.size() || o->nodes.empty()) throw invalid_request("--nodes: expected a number or auto, got '" + o->nodes + "'");
      if (n < 1) throw invalid_request("--nodes: must be >= 1, got " + o->nodes);
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
    plan_request req;
    req.formats = formats_for(*o, cat, t.gpu);
    req.nodes = o->target.nodes;
    req.global_batch_tokens = o->global_batch_tokens;
    req.headroom = o->headroom;
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
      if (s < 1) throw invalid_request("--seq: must be >= 1, got " + o->seq);
      req.seq_lens = {s};
    }
    const bool launcher = !o->emit.empty() && o->emit != "plan";
    if (o->parallel == "all" && !launcher) {
      req.shardings = {sharding::none, sharding::full, sharding::hybrid, sharding::grad_op};
      req.tps = {1, 2, 4, 8};
    }  // else: the SageMaker launchers set up FSDP or DDP only, so --emit sagemaker searches those
    const bool scale = o->nodes == "auto" || o->instances.size() > 1 || !o->tokens.empty() || o->objective != "throughput" ||
                       o->budget_usd >= 0 || !o->deadline.empty();
    if (scale) {
      if (!tgt.gpu.empty() && tgt.instance.empty())
        throw invalid_request("--nodes auto, --tokens and --objective need instances (--instance), not a bare --gpu");
      if (!o->emit.empty()) throw invalid_request("--emit works with one instance type and a fixed --nodes");
      return scale_out(ctx, *o, cat, m, o->instances, req);
    }
    const auto t0 = std::chrono::steady_clock::now();
    progress_bar bar(ctx.err, "searching", plan_search_size(req, req.nodes * (t.instance ? t.instance->gpus_per_node : 1), detail::ep_candidates(m, req.nodes * (t.instance ? t.instance->gpus_per_node : 1)).size()),
                     is_terminal(ctx.err));
    req.progress = [&bar](std::int64_t done, std::int64_t) { bar.update(done); };
    const plan_result r = search_plans(m, t.gpu, t.instance ? &*t.instance : nullptr, req,
                                       static_cast<std::size_t>(o->top), auto_seq);
    bar.finish();
    const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    spdlog::debug("evaluated {} configurations in {:.4f} s ({} fit)", r.evaluated, secs, r.fitting);
    const int world = req.nodes * (t.instance ? t.instance->gpus_per_node : 1);
    const std::string where = t.instance ? fmt::format("{} x {} ({} x {})", req.nodes, t.instance->id, world, t.gpu.id)
                                         : fmt::format("{} x {}", world, t.gpu.id);
    std::string explanation;
    if (r.ranked.size() >= 2) explanation = why(r.ranked[0], r.ranked[1]);
    else if (r.ranked.size() == 1) explanation = "the only configuration that fits";
    const std::string precision_line = format_reason(m, r, *o);
    if (!o->output.empty() && o->emit.empty()) throw invalid_request("--output needs --emit plan");
    if (o->emit == "plan") {
      if (r.ranked.empty()) {
        ctx.err << fmt::format("bwplan: no configuration of {} fits on {} with {:.0f}% headroom; no plan written\n", m.name,
                               where, 100 * req.headroom);
        return failure;
      }
      const std::string text = plan_json(*o, t, req, r.ranked.front()).dump(2) + "\n";
      if (o->output.empty()) {
        ctx.out << text;
      } else {
        write_output_file(o->output, text, "--output");
        spdlog::info("wrote {}", o->output);
      }
      return success;
    }
    if (!o->emit.empty()) {
      if (!r.ranked.empty()) {  // else: the "no configuration fits" message below
        if (!t.instance) throw invalid_request("--emit: a SageMaker job runs on instances; give --instance instead of a bare --gpu");
        const plan_candidate& best = r.ranked.front();
        spdlog::info("emitting plan 1: {}", describe(best.config));
        sagemaker::job_settings job = o->job;
        job.model_arg = o->model;
        return emit_sagemaker(ctx, job, o->emit == "sagemaker" ? "request" : o->emit,
                              {m, best.config, t.gpu, *t.instance, best.throughput});
      }
    } else if (o->format == "json") {
      nlohmann::ordered_json j;
      j["model"] = m.name;
      j["hardware"] = {{"gpu", t.gpu.id}, {"instance", t.instance ? t.instance->id : ""}, {"nodes", req.nodes}, {"world_size", world}};
      j["search"] = {{"evaluated", r.evaluated}, {"fitting", r.fitting}, {"headroom", req.headroom},
                     {"global_batch_tokens", req.global_batch_tokens}, {"seq_lens", req.seq_lens}, {"seconds", secs}};
      j["plans"] = nlohmann::ordered_json::array();
      for (const auto& p : r.ranked) j["plans"].push_back(to_json(m, p.config, p.memory, p.throughput));
      j["explanation"] = explanation;
      j["precision_explanation"] = precision_line;
      j["search"]["precisions"] = nlohmann::ordered_json::array();
      for (compute_format f : req.formats) j["search"]["precisions"].push_back(to_string(f));
      ctx.out << j.dump(2) << "\n";
    } else if (o->format == "markdown") {
      ctx.out << plans_markdown(m, where, req, r, explanation);
    } else {
      ctx.out << fmt::format("{} on {}: {} configurations evaluated, {} fit with {:.0f}% headroom\n\n", m.name, where,
                             r.evaluated, r.fitting, 100 * req.headroom);
      if (!r.ranked.empty()) {
        const term_style st = style_for(ctx.out, o->ascii);
        const bool moe = m.is_moe();  // MoE: an expert-parallel column after shard
        ctx.out << fmt::format("{:>3}  {:>4} {:>6} {:>5} {:>12} {:>5}{} {:>9} {:>11} {:>11} {:>11} {:>6} {:>10}  {}\n", "#", "mbs", "seq",
                               "accum", "AC", "shard", moe ? fmt::format(" {:>3}", "ep") : "", "loss", "precision", "peak GiB",
                               "tokens/s", "MFU", "step s", "memory per GPU");
        int i = 1;
        for (const auto& p : r.ranked) {
          const auto& c = p.config;
          ctx.out << fmt::format("{:>3}  {:>4} {:>6} {:>5} {:>12} {:>5}{} {:>9} {:>11} {:>11.2f} {:>11.0f} {:>5.1f}% {:>10.3f}  {}\n", i++,
                                 c.micro_batch, c.seq_len, c.grad_accum,
                                 ac_name(c),
                                 shard_label(c),
                                 moe ? fmt::format(" {:>3}", c.ep) : "", to_string(c.loss),
                                 to_string(c.format),
                                 p.memory.device_peak().in(gib), p.throughput.tokens_per_s, 100 * p.throughput.mfu,
                                 p.throughput.step.raw(),
                                 memory_bar(peak_segments(p.memory), p.memory.capacity, req.headroom, 24, st));
        }
        ctx.out << fmt::format("\nmemory bars: share of the {:.2f} GiB per GPU, '{}' = headroom limit; plan #1 holds\n",
                               r.ranked[0].memory.capacity.in(gib), st.unicode ? "│" : "|")
                << memory_legend(peak_segments(r.ranked[0].memory), st, "  ");
        ctx.out << "\nwhy: " << explanation << "\n";
        if (!precision_line.empty()) ctx.out << "precision: " << precision_line << "\n";
      }
    }
    if (r.ranked.empty()) {
      ctx.err << fmt::format("bwplan: no configuration of {} fits on {} with {:.0f}% headroom; try more nodes or a larger GPU\n",
                             m.name, where, 100 * req.headroom);
      return failure;
    }
    return success;
  };
}

}  // namespace bwplan::cli
