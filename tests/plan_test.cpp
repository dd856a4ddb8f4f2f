// Library tests that mirror the headers: bwplan/plan.hpp (the plan, its rules, its command-line form and labels),
// bwplan/training.hpp (checkpointing, the configuration rules), bwplan/precision.hpp (the one precision table),
// bwplan/units.hpp, bwplan/quantity.hpp and bwplan/io/plan.hpp (the one reader and writer of plan files).
#include "test_util.hpp"

#include <bwplan/bwplan.hpp>
#include <bwplan/io/estimate.hpp>
#include <bwplan/io/plan.hpp>
#include <bwplan/plan.hpp>
#include <bwplan/quantity.hpp>

#include <catch2/catch.hpp>

#include <cmath>
#include <limits>

using namespace bwplan;

namespace {

using test::llama_8b;

plan eight_gpus() {
  plan p;
  p.model = "Llama-3.1-8B";
  p.target.instance = "ml.p6-b200.48xlarge";
  REQUIRE(resolve_world(p, 8).empty());
  p.training.shard = default_sharding(p.training.world_size);
  return p;
}

bool has_field(const std::vector<plan_violation>& v, const std::string& field) {
  for (const auto& x : v)
    if (x.field == field) return true;
  return false;
}

}  // namespace

// ---------------------------------------------------------------- training.hpp: checkpointing

TEST_CASE("checkpointing: one parser and one printer, inverse of each other", "[plan][training]") {
  for (const char* name : {"none", "full", "every-2", "every-17", "selective-op", "selective-attn"}) {
    const auto a = parse_checkpointing(name);
    REQUIRE(a);
    CHECK(to_string(*a) == name);
  }
  CHECK(*parse_checkpointing("every-1") == checkpointing::full());
  CHECK(parse_checkpointing("every-2")->every == 2);
  CHECK(parse_checkpointing("every-2")->recomputes_blocks());
  CHECK_FALSE(parse_checkpointing("selective-op")->recomputes_blocks());
  for (const char* bad : {"", "Full", "every-", "every-0", "every--1", "every-x", "every-99999999999", "selective"})
    CHECK_FALSE(parse_checkpointing(bad));
}

TEST_CASE("training_config: checkpointed blocks follow the one checkpointing value", "[plan][training]") {
  training_config c;
  c.ac = checkpointing::full(3);
  CHECK(c.checkpointed_blocks(32) == 11);  // blocks 0, 3, …, 30
  CHECK(c.checkpointed(0));
  CHECK_FALSE(c.checkpointed(1));
  c.ac = checkpointing::selective_op();
  CHECK(c.checkpointed_blocks(32) == 0);
}

TEST_CASE("violations: structured, with field and pointer, no command-line flag in the message", "[plan][training]") {
  training_config c;
  c.micro_batch = 0;
  c.world_size = 8;
  c.tp = 3;
  const auto v = violations(c);
  REQUIRE(v.size() >= 1);
  CHECK(v.front().field == "micro_batch_size");
  CHECK(v.front().pointer == "/micro_batch_size");
  for (const auto& x : v) CHECK(x.message.find("--") == std::string::npos);
  // first_only stops at the first
  CHECK(violations(c, true).size() == 1);
  // validate throws plan_error carrying the violation
  try {
    validate(c);
    FAIL("validate accepted micro-batch 0");
  } catch (const plan_error& e) {
    CHECK(e.violation().field == "micro_batch_size");
    CHECK(std::string(e.what()) == "micro_batch_size: micro-batch size must be >= 1, got 0");
  }
}

TEST_CASE("violations: every rule of the configuration alone", "[plan][training]") {
  training_config c;
  c.world_size = 8;
  c.gpus_per_node = 8;
  c.shard = sharding::full;
  CHECK(violations(c).empty());
  auto broken = [&](auto edit) {
    training_config x = c;
    edit(x);
    return violations(x);
  };
  CHECK(has_field(broken([](auto& x) { x.fp8_all_gather = true; }), "fp8_all_gather"));
  CHECK(broken([](auto& x) { x.fp8_all_gather = true; x.format = compute_format::fp8; }).empty());
  CHECK(has_field(broken([](auto& x) { x.tp = 16; x.world_size = 16; }), "tp"));           // beyond a node
  CHECK(has_field(broken([](auto& x) { x.tp = 3; }), "gpus"));                             // 3 does not divide 8
  CHECK(has_field(broken([](auto& x) { x.cp = 2; x.seq_len = 4098; }), "cp"));             // 2·cp must divide the sequence
  CHECK(has_field(broken([](auto& x) { x.ep = 3; }), "ep"));
  CHECK(has_field(broken([](auto& x) { x.shard_group = 4; }), "shard_group"));             // needs hybrid
  CHECK(has_field(broken([](auto& x) { x.shard = sharding::hybrid; x.shard_group = 3; }), "shard_group"));
  CHECK(has_field(broken([](auto& x) { x.ac = {ac_mode::selective_op, 2}; }), "activation_checkpointing"));
  CHECK(has_field(broken([](auto& x) { x.pp = 0; }), "pp"));
}

// ---------------------------------------------------------------- plan.hpp

TEST_CASE("plan: resolve_world from the target", "[plan]") {
  plan p;
  p.target.instance = "ml.p5.48xlarge";
  p.target.nodes = 2;
  CHECK(resolve_world(p, 8).empty());
  CHECK(p.training.world_size == 16);
  CHECK(p.training.gpus_per_node == 8);
  p.target.gpus = 12;  // a part of the last instance
  CHECK(resolve_world(p, 8).empty());
  CHECK(p.training.world_size == 12);
  p.target.gpus = 4;  // an instance left without a GPU contradicts nodes (estimate ran it on one node: an audit)
  CHECK(has_field(resolve_world(p, 8), "gpus"));
  p.target.gpus = 17;
  CHECK(has_field(resolve_world(p, 8), "gpus"));  // more than 2 x 8
  plan bare;
  bare.target.gpu = "h200";
  bare.target.gpus = 2;
  CHECK(resolve_world(bare, 0).empty());
  CHECK(bare.training.world_size == 2);
  CHECK(bare.training.gpus_per_node == 2);
}

TEST_CASE("plan: the global batch sets the accumulation, and the rules check the arithmetic", "[plan]") {
  plan p = eight_gpus();
  p.training.micro_batch = 2;
  p.global_batch = 64;
  CHECK(apply_global_batch(p).empty());
  CHECK(p.training.grad_accum == 4);  // 64 / (2 x 8)
  CHECK(plan_violations(llama_8b(), p).empty());
  p.training.grad_accum = 3;
  CHECK(has_field(plan_violations(llama_8b(), p), "global_batch_size"));
  p.global_batch = 60;
  CHECK(has_field(apply_global_batch(p), "global_batch_size"));  // 60 is not a multiple of 16
}

TEST_CASE("plan_violations: the model's rules and what is not modelled", "[plan]") {
  const model_spec m = llama_8b();
  plan p = eight_gpus();
  CHECK(plan_violations(m, p).empty());
  p.training.tp = 8;
  CHECK(plan_violations(m, p).empty());  // 8 divides 32 heads and 8 KV heads
  p.training.pp = 2;
  p.training.tp = 4;
  CHECK(plan_violations(m, p).empty());  // pipeline parallelism is modelled (issue 13)
  p.training.shard = sharding::hybrid;   // … but not with HSDP
  const auto v = plan_violations(m, p);
  REQUIRE(has_field(v, "pp"));
  CHECK(v.front().message.find("not modelled") != std::string::npos);
  p.training.shard = eight_gpus().training.shard;
  p.training.pp = 1;
  p.training.ep = 2;
  CHECK(has_field(plan_violations(m, p), "ep"));  // a dense model has no experts
  p.training.ep = 1;
  p.training.micro_batch = plan_limits::max_micro_batch + 1;
  CHECK(has_field(plan_violations(m, p), "micro_batch_size"));  // the plan file's limits apply everywhere
}

TEST_CASE("to_cli_args: every setting of the plan, defaults included", "[plan]") {
  plan p = eight_gpus();
  p.training.format = compute_format::mxfp8;
  p.training.ac = checkpointing::full(2);
  p.training.tp = 2;
  p.training.cp = 2;
  p.training.bf16_layers = parse_bf16_blocks("first:1,last:2");
  p.training.shard = sharding::hybrid;
  p.training.shard_group = 4;
  const auto a = to_cli_args(p);
  auto value = [&](const std::string& flag) {
    const auto it = std::find(a.begin(), a.end(), flag);
    REQUIRE(it != a.end());
    REQUIRE(it + 1 != a.end());
    return *(it + 1);
  };
  CHECK(a.front() == "Llama-3.1-8B");
  CHECK(value("--instance") == "ml.p6-b200.48xlarge");
  CHECK(value("--precision") == "mxfp8");
  CHECK(value("--ac") == "every-2");
  CHECK(value("--tp") == "2");
  CHECK(value("--cp") == "2");
  CHECK(value("--ep") == "1");
  CHECK(value("--bf16-layers") == "first:1,last:2");
  CHECK(value("--sharding") == "hybrid");
  CHECK(value("--shard-group") == "4");
  CHECK(value("--master") == "fp32");
  CHECK(value("--loss") == "standard");
  CHECK(value("--optimizer-impl") == "fused");
  CHECK(shell_quote("a b") == "'a b'");
  CHECK(shell_quote("it's") == "'it'\\''s'");
  CHECK(shell_quote("ml.p5.48xlarge") == "ml.p5.48xlarge");
}

/// Whether differing_columns' `show` holds the column `key` of `cols` (fails the test when there is no such column).
static bool column_shown(const std::vector<bool>& show, const std::vector<setting_column>& cols, std::string_view key) {
  for (std::size_t i = 0; i < cols.size(); ++i)
    if (cols[i].key == key) return show[i];
  FAIL("no column " << key);
  return false;
}

TEST_CASE("setting_columns / differing_columns: rows that differ name the setting", "[plan]") {
  training_config a;
  a.world_size = 8;
  training_config b = a;
  b.format = compute_format::fp8;
  b.tp = 2;
  const auto show = differing_columns({a, b});
  const auto shown = [&](std::string_view key) { return column_shown(show, setting_columns(a), key); };
  CHECK(shown("precision"));
  CHECK(shown("tp"));
  CHECK(shown("dp"));
  CHECK(shown("global_batch_tokens"));
  CHECK_FALSE(shown("cp"));  // equal in every row
  CHECK_FALSE(shown("ep"));
  CHECK(setting_columns(b)[3].value == "4");  // DP = 8 / tp 2
}

TEST_CASE("describe names every setting that differs from the defaults", "[plan]") {
  training_config c;
  c.world_size = 16;
  c.gpus_per_node = 8;
  c.shard = sharding::hybrid;
  c.tp = 2;
  c.ep = 1;
  c.format = compute_format::nvfp4;
  c.ac = checkpointing::selective_op();
  c.optimizer = optimizer_impl::foreach;
  const std::string d = describe(c);
  CHECK_THAT(d, Catch::Contains("AC selective-op") && Catch::Contains("nvfp4") && Catch::Contains("HSDP (shard 4 x replicate 2)") &&
                    Catch::Contains("TP 2") && Catch::Contains("foreach AdamW"));
}

// ---------------------------------------------------------------- precision.hpp: the one table

TEST_CASE("precision table: names, rates, support and tiers", "[plan][precision]") {
  CHECK(precisions().size() == 5);
  for (const auto& p : precisions()) {
    CHECK(to_string(p.format) == p.name);
    CHECK(parse_format(p.name) == p.format);
    CHECK(&info(p.format) == &p);
  }
  CHECK_FALSE(parse_format("fp16"));
  gpu_spec h;
  h.architecture = "hopper";
  h.dense_flops = {{"bf16", flop_rate::base(989e12)}, {"fp8", flop_rate::base(1979e12)}};
  gpu_spec b = h;
  b.architecture = "blackwell";
  b.dense_flops["fp4"] = flop_rate::base(9e15);
  CHECK(supports(h, compute_format::fp8));
  CHECK_FALSE(supports(h, compute_format::mxfp8));
  CHECK_FALSE(supports(h, compute_format::nvfp4));
  CHECK(supports(b, compute_format::nvfp4));
  CHECK(formats_for_tier(numerics_tier::conservative, b) == std::vector{compute_format::bf16, compute_format::mxfp8});
  CHECK(formats_for_tier(numerics_tier::balanced, h) == std::vector{compute_format::bf16, compute_format::fp8});
  CHECK(formats_for_tier(numerics_tier::aggressive, b).back() == compute_format::nvfp4);
}

TEST_CASE("bf16_layers: one parser and one printer, NaN and huge counts refused", "[plan][precision]") {
  for (const char* s : {"none", "last:3", "first:2", "first:1,last:4", "0.15", "0.5", "1"}) {
    const auto b = parse_bf16_blocks(s);
    CHECK(to_string(b) == s);
  }
  for (const char* bad : {"nan", "-0.1", "1.5", "inf", "first:x", "middle:2", "last:9223372036854775807", "first:-1"})
    CHECK_THROWS_AS(parse_bf16_blocks(bad), plan_error);
  try {
    (void)parse_bf16_blocks("nan");
  } catch (const plan_error& e) {
    CHECK(e.violation().field == "bf16_layers");
  }
}

// ---------------------------------------------------------------- quantity.hpp, units.hpp

TEST_CASE("quantities: token counts and durations as typed, finite and bounded", "[plan][units]") {
  CHECK(parse_token_count("4M", "x") == 4e6);
  CHECK(parse_token_count("1.5T", "x") == 1.5e12);
  CHECK_THROWS_AS(parse_token_count("nan", "x"), invalid_request);
  CHECK_THROWS_AS(parse_token_count("1e300", "x"), invalid_request);
  CHECK(parse_duration("90m", "x") == 5400);
  CHECK(parse_duration("2", "x", 1) == 2);
  CHECK_THROWS_AS(parse_duration("1e308w", "x"), invalid_request);
  CHECK_THROWS_AS(parse_duration("inf", "x"), invalid_request);
  CHECK(human_duration(30) == "30 s");
  CHECK(human_duration(7200 * 2) == "4.0 h");
  CHECK(bytes::base(1073741824.0).in(gib) == 1.0);
  CHECK((bytes::base(3.0) + bytes::base(4.0)).raw() == 7.0);
}

// ---------------------------------------------------------------- io/plan.hpp: one reader, one writer

TEST_CASE("plan file: plan_to_json reads back to the same plan", "[plan][io]") {
  plan p = eight_gpus();
  p.name = "round trip";
  p.training.micro_batch = 4;
  p.training.seq_len = 8192;
  p.training.grad_accum = 2;
  p.global_batch = 64;
  p.training.format = compute_format::fp8;
  p.training.fp8_all_gather = true;
  p.training.bf16_layers = parse_bf16_blocks("0.25");
  p.training.ac = checkpointing::full(4);
  p.training.tp = 2;
  p.training.cp = 2;
  p.training.master = master_weights::bf16;
  p.training.optimizer = optimizer_impl::foreach;
  p.training.loss = loss_impl::chunked;
  p.headroom = 0.1;
  p.check.min_mfu_ratio = 0.25;
  p.check.disable = {"BWP004"};
  const auto text = io::plan_to_json(p).dump(2);
  const plan_document d = io::parse_plan(text, "mem.json");
  plan back = d.value;
  back.training.world_size = p.training.world_size;  // resolved from the target, not stored
  back.training.gpus_per_node = p.training.gpus_per_node;
  CHECK(back == p);
  CHECK(d.has("activation_checkpointing"));
  CHECK(io::plan_to_json(back).dump(2) == text);
}

TEST_CASE("plan file: the schema-1 two-key checkpointing form reads as every-K, contradictions are errors", "[plan][io]") {
  const auto d = io::parse_plan(R"({"model": "x", "activation_checkpointing": "full", "ac_every": 3})", "a.json");
  CHECK(d.value.training.ac == checkpointing::full(3));
  CHECK_THROWS_WITH(io::parse_plan(R"({"model": "x", "activation_checkpointing": "selective-op", "ac_every": 3})", "b.json"),
                    Catch::Contains("b.json: /ac_every"));
  CHECK_THROWS_WITH(io::parse_plan(R"({"model": "x", "activation_checkpointing": "evry-2"})", "c.json"),
                    Catch::Contains("/activation_checkpointing") && Catch::Contains("allowed"));
  CHECK_THROWS_WITH(io::parse_plan(R"({"model": "x", "bf16_layers": "nan"})", "d.json"), Catch::Contains("d.json: /bf16_layers"));
}

// ---------------------------------------------------------------- io/estimate.hpp

TEST_CASE("estimate JSON: communication by parallelism adds up, expert parallel included", "[plan][io]") {
  model_spec m = llama_8b();
  m.name = "moe";
  m.family = "qwen3_moe";
  m.experts = 8;
  m.top_k = 2;
  m.moe_layers = m.layers;
  m.moe_intermediate = 1024;
  training_config c;
  c.world_size = 8;
  c.gpus_per_node = 8;
  c.shard = sharding::full;
  c.ep = 4;
  c.tp = 2;
  gpu_spec g;
  g.id = "g";
  g.architecture = "hopper";
  g.hbm_total = bytes::base(141e9);
  g.hbm_bandwidth = byte_rate::base(4.8e12);
  g.nvlink_per_direction = byte_rate::base(450e9);
  g.dense_flops = {{"bf16", flop_rate::base(989e12)}};
  const auto te = estimate_throughput(m, c, g);
  REQUIRE(te.comm.expert_parallel.raw() > 0);
  CHECK(te.comm.total().raw() == Approx(te.communication.raw()).epsilon(1e-12));
  CHECK(te.exposed.total().raw() == Approx(te.exposed_communication.raw()).epsilon(1e-12));
  const auto me = estimate_memory(m, c, g);
  const auto j = io::estimate_to_json(m, c, me, te);
  const auto& parts = j["throughput"]["communication_by_parallelism_s"];
  double sum = 0;
  for (auto it = parts.begin(); it != parts.end(); ++it) sum += it.value().get<double>();
  CHECK(sum == Approx(j["throughput"]["communication_s"].get<double>()).epsilon(1e-12));
  CHECK(parts.contains("expert_parallel"));
  CHECK(j["config"]["dp"] == 4);
}

TEST_CASE("differing_columns: a setting away from its default is shown even when every row shares it", "[plan]") {
  // recommend --top 1 (or plans that all share TP 8, PP 2 interleaved or the chunked loss) printed no TP, PP or loss
  // column: a reader copying the table ran TP 1, PP 1 and the standard loss.
  training_config a;
  a.world_size = 8;
  a.tp = 8;
  a.pp = 1;
  a.loss = loss_impl::chunked;
  training_config b = a;
  b.micro_batch = 2;
  const auto cols = setting_columns(a);
  for (const auto& rows : {std::vector<training_config>{a}, std::vector<training_config>{a, b}}) {
    const auto show = differing_columns(rows);
    const auto shown = [&](std::string_view key) { return column_shown(show, cols, key); };
    CHECK(shown("tp"));
    CHECK(shown("loss"));
    CHECK_FALSE(shown("pp"));  // at its default in every row
    CHECK_FALSE(shown("cp"));
    CHECK_FALSE(shown("stack"));
  }
}
