// Google Benchmark for the planner: candidate evaluations per second and a full recommend search.
#include <bwplan/bwplan.hpp>
#include <bwplan/io/json.hpp>

#include <benchmark/benchmark.h>

#include <filesystem>

using namespace bwplan;

namespace {
const std::filesystem::path configs = BWPLAN_CONFIG_DIR;

struct fixture {
  hardware_catalog cat;
  model_spec m70, m405;
  fixture() {
    io::load_catalog(cat, configs / "hardware" / "catalog.json");
    m70 = io::load_model(configs / "models" / "llama-3.1-70b.json");
    m405 = io::load_model(configs / "models" / "llama-3.1-405b.json");
  }
};
const fixture& fx() {
  static const fixture f;
  return f;
}

// One candidate: memory + throughput estimate (what the search does per configuration), on the cheap path: this
// FSDP2 layout is one the caching-allocator replay traces, which the search runs only for candidates near the fit line
// (BM_replay_fsdp_step prices one such replay).
void BM_evaluate_candidate(benchmark::State& state) {
  const auto& f = fx();
  const auto& gpu = f.cat.gpu("b200");
  const auto& inst = f.cat.instance("ml.p6-b200.48xlarge");
  training_config c;
  c.world_size = 8;
  c.shard = sharding::full;
  c.ac = checkpointing::full(2);
  runtime_overheads cheap;
  cheap.replay = runtime_overheads::replay_policy::never;
  std::int64_t mbs = 1;
  for (auto _ : state) {
    c.micro_batch = mbs;
    mbs = mbs == 64 ? 1 : mbs * 2;
    const auto me = estimate_memory(f.m70, c, gpu, cheap);
    const auto te = estimate_throughput(f.m70, c, gpu, &inst);
    benchmark::DoNotOptimize(me.peak_allocated);
    benchmark::DoNotOptimize(te.tokens_per_s);
  }
  state.counters["candidates_per_s"] = benchmark::Counter(static_cast<double>(state.iterations()), benchmark::Counter::kIsRate);
}
BENCHMARK(BM_evaluate_candidate);

// One caching-allocator replay of an FSDP2 rank (Llama-3.1-70B, 8 × B200, micro-batch 1 × 8192, every-2 checkpointing):
// what `estimate` adds to the cheap path, and the search for each candidate near the fit line.
void BM_replay_fsdp_step(benchmark::State& state) {
  const auto& f = fx();
  const auto& gpu = f.cat.gpu("b200");
  training_config c;
  c.world_size = 8;
  c.shard = sharding::full;
  c.ac = checkpointing::full(2);
  c.micro_batch = 1;
  c.seq_len = 8192;
  for (auto _ : state) {
    const auto me = estimate_memory(f.m70, c, gpu);
    benchmark::DoNotOptimize(me.peak_reserved);
  }
}
BENCHMARK(BM_replay_fsdp_step)->Unit(benchmark::kMillisecond);

// One LoRA candidate (issue 14): Llama-3.1-70B, r 16 on all linears, 8 × H200, FSDP, every-2 checkpointing.
void BM_evaluate_candidate_lora(benchmark::State& state) {
  const auto& f = fx();
  const auto& gpu = f.cat.gpu("h200");
  const auto& inst = f.cat.instance("ml.p5en.48xlarge");
  training_config c;
  c.world_size = 8;
  c.shard = sharding::full;
  c.ac = checkpointing::full(2);
  c.finetune = finetune_mode::lora;
  std::int64_t mbs = 1;
  for (auto _ : state) {
    c.micro_batch = mbs;
    mbs = mbs == 64 ? 1 : mbs * 2;
    const auto me = estimate_memory(f.m70, c, gpu);
    const auto te = estimate_throughput(f.m70, c, gpu, &inst);
    benchmark::DoNotOptimize(me.peak_allocated);
    benchmark::DoNotOptimize(te.tokens_per_s);
  }
  state.counters["candidates_per_s"] = benchmark::Counter(static_cast<double>(state.iterations()), benchmark::Counter::kIsRate);
}
BENCHMARK(BM_evaluate_candidate_lora);

// `recommend Llama-3.1-70B --instance ml.p5en.48xlarge --optimizer auto`: the full search with the six optimizers.
void BM_recommend_70b_optimizer_auto(benchmark::State& state) {
  const auto& f = fx();
  const auto& gpu = f.cat.gpu("h200");
  const auto& inst = f.cat.instance("ml.p5en.48xlarge");
  std::int64_t evaluated = 0;
  for (auto _ : state) {
    plan_request req = full_search(gpu, 1);
    req.optimizers.assign(std::begin(all_optimizers), std::end(all_optimizers));
    const auto r = search_plans(f.m70, gpu, &inst, req, 5);
    evaluated += r.evaluated;
    benchmark::DoNotOptimize(r.ranked.size());
  }
  state.counters["candidates_per_s"] = benchmark::Counter(static_cast<double>(evaluated), benchmark::Counter::kIsRate);
}
BENCHMARK(BM_recommend_70b_optimizer_auto)->Unit(benchmark::kMillisecond);

// One CPU-offload candidate (issue 14): Llama-3.1-70B, 8 × H200, FSDP2 CPUOffloadPolicy (optimizer,params), every-2
// checkpointing: the memory terms with the host term, the throughput terms with the CPU step and PCIe copies.
void BM_evaluate_candidate_offload(benchmark::State& state) {
  const auto& f = fx();
  const auto& gpu = f.cat.gpu("h200");
  const auto& inst = f.cat.instance("ml.p5en.48xlarge");
  training_config c;
  c.world_size = 8;
  c.shard = sharding::full;
  c.ac = checkpointing::full(2);
  c.offload = offload_target::optimizer | offload_target::params;
  std::int64_t mbs = 1;
  for (auto _ : state) {
    c.micro_batch = mbs;
    mbs = mbs == 64 ? 1 : mbs * 2;
    const auto me = estimate_memory(f.m70, c, gpu);
    const auto te = estimate_throughput(f.m70, c, gpu, &inst);
    benchmark::DoNotOptimize(me.host_per_gpu);
    benchmark::DoNotOptimize(te.tokens_per_s);
  }
  state.counters["candidates_per_s"] = benchmark::Counter(static_cast<double>(state.iterations()), benchmark::Counter::kIsRate);
}
BENCHMARK(BM_evaluate_candidate_offload);

// `recommend Llama-3.1-70B --instance ml.p5en.48xlarge --offload auto`: the full search with the six offload sets
// (the sets a layout cannot run are skipped before evaluation; the host-memory test per node after it).
void BM_recommend_70b_offload_auto(benchmark::State& state) {
  const auto& f = fx();
  const auto& gpu = f.cat.gpu("h200");
  const auto& inst = f.cat.instance("ml.p5en.48xlarge");
  std::int64_t evaluated = 0;
  for (auto _ : state) {
    plan_request req = full_search(gpu, 1);
    req.offloads = offload_candidates();
    const auto r = search_plans(f.m70, gpu, &inst, req, 5);
    evaluated += r.evaluated;
    benchmark::DoNotOptimize(r.ranked.size());
  }
  state.counters["candidates_per_s"] = benchmark::Counter(static_cast<double>(evaluated), benchmark::Counter::kIsRate);
}
BENCHMARK(BM_recommend_70b_offload_auto)->Unit(benchmark::kMillisecond);

// The whole search of `recommend Llama-3.1-405B` for node counts 1..64 (seq auto), with the search space of
// `recommend` (issue 4): four sharding modes and tensor-parallel degrees 1, 2, 4, 8.
void BM_recommend_405b_1_to_64_nodes(benchmark::State& state) {
  const auto& f = fx();
  const auto& gpu = f.cat.gpu("b200");
  const auto& inst = f.cat.instance("ml.p6-b200.48xlarge");
  std::int64_t evaluated = 0;
  for (auto _ : state) {
    for (int nodes = 1; nodes <= 64; nodes *= 2) {
      plan_request req;
      req.nodes = nodes;
      req.shardings = {sharding::none, sharding::full, sharding::hybrid, sharding::grad_op};
      req.tps = {1, 2, 4, 8};
      req.seq_lens.clear();
      for (std::int64_t s = 1024; s <= f.m405.max_context; s *= 2) req.seq_lens.push_back(s);
      const auto r = search_plans(f.m405, gpu, &inst, req, 5, true);
      evaluated += r.evaluated;
      benchmark::DoNotOptimize(r.ranked.size());
    }
  }
  state.counters["candidates_per_s"] = benchmark::Counter(static_cast<double>(evaluated), benchmark::Counter::kIsRate);
}
BENCHMARK(BM_recommend_405b_1_to_64_nodes)->Unit(benchmark::kMillisecond);
// One pipeline-parallel candidate (issue 13): Llama-3.1-405B on 64 B200 (8 × ml.p6-b200.48xlarge), tp 8, pp 8,
// 1F1B, distributed optimizer, full checkpointing, 1 × 4096, 128 micro-batches: memory of three ranks and the
// throughput of two (the most loaded and the slowest), as the search does per candidate.
void BM_evaluate_candidate_pp(benchmark::State& state) {
  const auto& f = fx();
  const auto& gpu = f.cat.gpu("b200");
  const auto& inst = f.cat.instance("ml.p6-b200.48xlarge");
  training_config c;
  c.world_size = 64;
  c.tp = 8;
  c.pp = 8;
  c.shard = sharding::optimizer;
  c.ac = checkpointing::full();
  c.seq_len = 4096;
  c.grad_accum = 128;
  std::int64_t mbs = 1;
  for (auto _ : state) {
    c.micro_batch = mbs;
    mbs = mbs == 4 ? 1 : mbs * 2;
    const auto me = estimate_memory(f.m405, c, gpu);
    const auto te = estimate_throughput(f.m405, c, gpu, &inst);
    benchmark::DoNotOptimize(me.peak_allocated);
    benchmark::DoNotOptimize(te.tokens_per_s);
  }
  state.counters["candidates_per_s"] = benchmark::Counter(static_cast<double>(state.iterations()), benchmark::Counter::kIsRate);
}
BENCHMARK(BM_evaluate_candidate_pp);

// The search of `recommend Llama-3.1-405B --nodes auto --max-nodes 128` (issue 13): node counts 1, 2, 4, …, 128
// of ml.p6-b200.48xlarge, each with full_search (every sharding incl. the distributed optimizer, tp 1-8, pp 1-32
// with 1F1B and interleaved 2 and 4, the --numerics balanced formats), sequence 4096, the default global batch.
void BM_recommend_405b_1_to_128_nodes_pp(benchmark::State& state) {
  const auto& f = fx();
  const auto& gpu = f.cat.gpu("b200");
  const auto& inst = f.cat.instance("ml.p6-b200.48xlarge");
  std::int64_t evaluated = 0;
  for (auto _ : state) {
    for (int nodes = 1; nodes <= 128; nodes *= 2) {
      plan_request req = full_search(gpu, nodes, formats_for_tier(numerics_tier::balanced, gpu), inst.nvlink_domain_gpus);
      req.best_per_format = state.range(0) != 0;  // search_fleet, which that command runs, turns it off
      const auto r = search_plans(f.m405, gpu, &inst, req, 1);
      evaluated += r.evaluated;
      benchmark::DoNotOptimize(r.ranked.size());
    }
  }
  state.counters["candidates_per_s"] = benchmark::Counter(static_cast<double>(evaluated), benchmark::Counter::kIsRate);
}
// /0: as search_fleet runs it (no best plan per format); /1: with them, as before 2026-12-06 (fifth session)
BENCHMARK(BM_recommend_405b_1_to_128_nodes_pp)->Arg(0)->Arg(1)->Unit(benchmark::kMillisecond);
}  // namespace

BENCHMARK_MAIN();
