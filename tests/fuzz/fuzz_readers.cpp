// libFuzzer target for the JSON readers: the model-config reader (io::model_from_json, gemma3's text_config
// included), the hardware-catalog reader (io::merge_catalog, then the estimators on every GPU and instance it
// accepts), the plan reader (io::plan_from_json), the calibration-profile and error-band readers
// (io::profile_from_json, io::error_bands_from_json, then an estimate with each accepted profile's constants and
// the verdict with each accepted band) and the locator used for line numbers. Built and run by
// tests/fuzz/run.sh with clang++ -fsanitize=fuzzer,address,undefined. Any exception other than bwplan::error
// is a finding.
#include <bwplan/bwplan.hpp>
#include <bwplan/io/calibration.hpp>
#include <bwplan/io/json.hpp>
#include <bwplan/io/locate.hpp>
#include <bwplan/io/plan.hpp>

#include <cstddef>
#include <cstdint>
#include <string>

namespace {

bwplan::gpu_spec fuzz_gpu() {
  bwplan::gpu_spec g;
  g.id = "fuzz";
  g.architecture = "hopper";
  g.hbm_total = 80 * bwplan::gib;
  g.hbm_bandwidth = 3 * bwplan::tb_per_s;
  g.nvlink_per_direction = 450 * bwplan::gb_per_s;
  g.dense_flops["bf16"] = 989 * bwplan::tflop_per_s;
  return g;
}

void model_reader(const nlohmann::json& j, const std::string& text) {
  try {
    const bwplan::model_spec m = bwplan::io::model_from_json(j, "fuzz.json");
    const auto pc = bwplan::count_parameters(m);
    (void)pc.total();
    // An accepted model must be evaluable: the estimators run on it without UB.
    bwplan::training_config c;
    c.seq_len = 1024;
    const auto me = bwplan::estimate_memory(m, c, fuzz_gpu());
    const auto te = bwplan::estimate_throughput(m, c, fuzz_gpu());
    (void)me.fits;
    (void)te.mfu;
  } catch (const bwplan::config_error& e) {
    (void)bwplan::io::with_location(e, text);
  }
}

/// The small dense model the catalog, profile and band readers evaluate with.
bwplan::model_spec small_model() {
  bwplan::model_spec m;
  m.name = "fuzz";
  m.family = "llama";
  m.hidden = 256;
  m.layers = 2;
  m.heads = 4;
  m.kv_heads = 4;
  m.head_dim = 64;
  m.intermediate = 512;
  m.vocab = 1000;
  m.max_context = 2048;
  return m;
}

/// A catalog document merged over an empty catalog; every GPU it accepts is then evaluated with a small model
/// (an accepted catalog must be usable without UB: no division by a zero bandwidth, no NaN capacity).
void catalog_reader(const nlohmann::json& j, const std::string& text) {
  try {
    bwplan::hardware_catalog cat;
    bwplan::io::merge_catalog(cat, j, "fuzz-catalog.json");
    const bwplan::model_spec m = small_model();
    for (const auto& g : cat.gpus()) {
      bwplan::training_config c;
      c.seq_len = 256;
      (void)bwplan::estimate_memory(m, c, g).fits;
      (void)bwplan::estimate_throughput(m, c, g).mfu;
    }
    for (const auto& i : cat.instances()) (void)cat.gpu(i.gpu);
  } catch (const bwplan::error& e) {
    if (const auto* ce = dynamic_cast<const bwplan::config_error*>(&e)) (void)bwplan::io::with_location(*ce, text);
  }
}


/// A calibration profile (docs/calibration.md#profile): every constant it accepts must give a finite estimate, and
/// its band a verdict (an accepted profile is usable without UB: no NaN efficiency, no negative overhead).
void profile_reader(const nlohmann::json& j, const std::string& text) {
  try {
    const bwplan::calibration_profile p = bwplan::io::profile_from_json(j, "fuzz-profile.json");
    const bwplan::model_spec m = small_model();
    for (const auto& e : p.entries) {
      bwplan::training_config c;
      c.seq_len = 256;
      const auto me = bwplan::estimate_memory(m, c, fuzz_gpu(), e.constants.overheads);
      const auto te = bwplan::estimate_throughput(m, c, fuzz_gpu(), nullptr, e.constants.throughput);
      if (e.band) (void)bwplan::verdict_of(me, e.band->memory);
      (void)te.mfu;
    }
  } catch (const bwplan::config_error& e) {
    (void)bwplan::io::with_location(e, text);
  }
}

/// An error-band file (configs/error-bands.json): each accepted band is looked up and gives a verdict.
void bands_reader(const nlohmann::json& j, const std::string& text) {
  try {
    const bwplan::error_bands b = bwplan::io::error_bands_from_json(j, "fuzz-bands.json");
    bwplan::training_config c;
    c.seq_len = 256;
    const auto me = bwplan::estimate_memory(small_model(), c, fuzz_gpu());
    for (const auto& g : b.groups) (void)bwplan::verdict_of(me, b.lookup(g.gpu, g.stack, g.mode).memory);
    (void)bwplan::verdict_of(me, b.widest_memory("fuzz", "hf"));
  } catch (const bwplan::config_error& e) {
    (void)bwplan::io::with_location(e, text);
  }
}

void plan_reader(const std::string& text) {
  try {
    const bwplan::plan_document p = bwplan::io::parse_plan(text, "fuzz-plan.json");
    for (const char* ptr : {"/model", "/micro_batch_size", "/check/disable/0"}) (void)p.where(ptr);
  } catch (const bwplan::config_error& e) {
    (void)e.line();
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  try {
    const nlohmann::json j = bwplan::io::parse_json(text, "fuzz.json");
    model_reader(j, text);
    catalog_reader(j, text);
    profile_reader(j, text);
    bands_reader(j, text);
  } catch (const bwplan::config_error&) {
  }
  plan_reader(text);
  // The locator also runs on text nlohmann rejected (it must stay in bounds whatever it is given).
  for (const char* ptr : {"", "/a", "/model_type", "/0/1", "/check/disable/3", "/a~1b/~0"}) (void)bwplan::io::locate(text, ptr);
  return 0;
}
