// The hardware catalog: the GPUs and instances users rent load with their sourced numbers, every number has a
// citation that docs/hardware.md resolves, precision support follows the tensor cores, the reader rejects
// impossible values with one line naming the file and JSON pointer, and prices say which price they are.
#include "test_util.hpp"

#include <bwplan/io/json.hpp>
#include <bwplan/precision.hpp>
#include <bwplan/throughput.hpp>

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <limits>
#include <set>
#include <sstream>
#include <string>
#include <vector>

using namespace bwplan;
using test::run_cli;
namespace fs = std::filesystem;

namespace {

const fs::path catalog_path = fs::path(BWPLAN_SOURCE_DIR) / "configs" / "hardware" / "catalog.json";

hardware_catalog bundled() {
  hardware_catalog cat;
  io::load_catalog(cat, catalog_path);
  return cat;
}

double mib_of(bytes b) { return b.raw() / 1048576.0; }
double tf(const gpu_spec& g, const char* f) { return g.peak(f) ? g.peak(f)->in(tflop_per_s) : 0.0; }

std::string write_file(const std::string& name, const std::string& text) {
  const auto p = fs::path(BWPLAN_TEST_OUTPUT_DIR) / ("catalog_test_" + name);
  std::ofstream(p) << text;
  return p.string();
}

/// The message of the config_error that merging `doc` into the bundled catalog throws ("" if none).
std::string merge_error(const nlohmann::json& doc) {
  hardware_catalog cat = bundled();
  try {
    io::merge_catalog(cat, doc, "user.json");
  } catch (const config_error& e) {
    return e.what();
  }
  return {};
}

/// A valid user GPU; tests change one field.
nlohmann::json user_gpu() {
  return nlohmann::json::parse(R"({"id": "mygpu", "architecture": "hopper", "hbm_total_mib": 100000, "driver_reserved_mib": 500,
    "hbm_bandwidth_tb_per_s": 5, "nvlink_gb_per_s_per_direction": 900, "dense_tflop_per_s": {"bf16": 2000, "fp8": 4000}})");
}

/// A valid user instance of the bundled h100; tests change one field.
nlohmann::json user_instance() {
  return nlohmann::json::parse(R"({"id": "ml.my.48xlarge", "gpu": "h100", "gpus_per_node": 8, "efa_gbit_per_s": 3200,
    "price_per_hour_usd": 50})");
}

nlohmann::json gpus_doc(const nlohmann::json& g) { return {{"gpus", nlohmann::json::array({g})}}; }
nlohmann::json instances_doc(const nlohmann::json& i) { return {{"instances", nlohmann::json::array({i})}}; }

std::vector<compute_format> supported(const gpu_spec& g) {
  std::vector<compute_format> out;
  for (auto f : {compute_format::bf16, compute_format::fp8, compute_format::fp8_rowwise, compute_format::mxfp8, compute_format::nvfp4})
    if (supports(g, f)) out.push_back(f);
  return out;
}

}  // namespace

TEST_CASE("catalog: the A100s, L40S, A10G, H100 96 GB and H800 load with their sourced numbers", "[catalog]") {
  const hardware_catalog cat = bundled();

  const gpu_spec& a40 = cat.gpu("a100-40gb");
  CHECK(a40.architecture == "ampere");
  CHECK(mib_of(a40.hbm_total) == 40960);
  CHECK(mib_of(a40.driver_reserved) == Approx(518.8125));
  CHECK(mib_of(a40.cuda_capacity()) == Approx(40441.1875));  // deviceQuery's 42,405,855,232 B
  CHECK(a40.hbm_bandwidth.in(tb_per_s) == Approx(1.555));
  CHECK(a40.interconnect == "nvlink");
  CHECK(a40.nvlink_per_direction.in(gb_per_s) == Approx(300));
  CHECK(a40.power_limit_w == 400);
  CHECK(tf(a40, "bf16") == Approx(312));
  CHECK_FALSE(a40.peak("fp8"));

  const gpu_spec& a80 = cat.gpu("A100-SXM4-80GB");  // alias, any case
  CHECK(a80.id == "a100-80gb");
  CHECK(mib_of(a80.hbm_total) == 81920);
  CHECK(mib_of(a80.driver_reserved) == 763);
  CHECK(a80.hbm_bandwidth.in(tb_per_s) == Approx(2.039));
  CHECK(a80.nvlink_per_direction.in(gb_per_s) == Approx(300));
  CHECK(tf(a80, "bf16") == Approx(312));
  CHECK(a80.dense_flops.size() == 1);

  const gpu_spec& l40s = cat.gpu("l40s");
  CHECK(l40s.architecture == "ada");
  CHECK(mib_of(l40s.hbm_total) == 46068);
  CHECK(l40s.hbm_bandwidth.in(tb_per_s) == Approx(0.864));
  CHECK(l40s.interconnect == "pcie");
  CHECK_FALSE(l40s.has_nvlink());
  CHECK(l40s.peer_per_direction().in(gb_per_s) == Approx(32));  // PCIe Gen4 x16, one direction
  CHECK(l40s.power_limit_w == 350);
  CHECK(tf(l40s, "bf16") == Approx(362.05));
  CHECK(tf(l40s, "fp8") == Approx(733));
  CHECK_FALSE(l40s.peak("fp4"));

  const gpu_spec& a10g = cat.gpu("a10g");
  CHECK(a10g.architecture == "ampere");
  CHECK(mib_of(a10g.hbm_total) == 23028);
  CHECK(a10g.hbm_bandwidth.in(tb_per_s) == Approx(0.6));
  CHECK(a10g.interconnect == "pcie");
  CHECK(a10g.peer_per_direction().in(gb_per_s) == Approx(32));
  CHECK(tf(a10g, "bf16") == Approx(70));  // the AWS A10G datasheet, not the A10's 125
  CHECK(a10g.power_limit_w == 300);

  const gpu_spec& h96 = cat.gpu("h100-96gb");
  CHECK(h96.architecture == "hopper");
  CHECK(mib_of(h96.hbm_total) == 98304);
  CHECK(h96.hbm_bandwidth.in(tb_per_s) == Approx(2.4));
  CHECK(h96.power_limit_w == 500);  // torchtitan: "the default 500W power limit"

  const gpu_spec& h800 = cat.gpu("h800");
  const gpu_spec& h100 = cat.gpu("h100");
  CHECK(h800.architecture == "hopper");
  CHECK(mib_of(h800.hbm_total) == 81559);
  CHECK(h800.nvlink_per_direction.in(gb_per_s) == Approx(200));  // 400 GB/s bidirectional
  CHECK(h800.nvlink_per_direction.raw() * 2.25 == Approx(h100.nvlink_per_direction.raw()));
  CHECK(tf(h800, "bf16") == tf(h100, "bf16"));
  CHECK(tf(h800, "fp8") == tf(h100, "fp8"));
  CHECK(h800.hbm_bandwidth.raw() == h100.hbm_bandwidth.raw());
}

TEST_CASE("catalog: every GPU has a power limit, GB300 has its own FP4 rate", "[catalog]") {
  const hardware_catalog cat = bundled();
  for (const auto& g : cat.gpus()) {
    INFO(g.id);
    CHECK(g.power_limit_w > 0);
    CHECK(!g.name.empty());
  }
  CHECK(cat.gpu("h100").power_limit_w == 700);
  CHECK(cat.gpu("b200").power_limit_w == 1000);
  CHECK(cat.gpu("b300").power_limit_w == 1100);
  CHECK(cat.gpu("gb200").power_limit_w == 1200);
  CHECK(cat.gpu("gb300").power_limit_w == 1400);
  // Blackwell Ultra raised NVFP4 (15 PF dense) but not BF16/FP8 (2.5 / 5 PF, as GB200)
  CHECK(tf(cat.gpu("gb300"), "fp4") == Approx(15000));
  CHECK(tf(cat.gpu("gb200"), "fp4") == Approx(10000));
  CHECK(tf(cat.gpu("gb300"), "bf16") == Approx(2500));
  CHECK(tf(cat.gpu("gb300"), "fp8") == Approx(5000));
}

TEST_CASE("catalog: p4d, p4de, g5 and g6e load with host memory, NVLink domain, EFA and EC2 price", "[catalog]") {
  const hardware_catalog cat = bundled();
  struct row {
    const char* id;
    const char* gpu;
    double efa_gbit;
    int domain;
    double host_gib;
    double ec2_usd;
  };
  for (const row r : {row{"ml.p4d.24xlarge", "a100-40gb", 400, 8, 1152, 21.957642}, row{"ml.p4de.24xlarge", "a100-80gb", 400, 8, 1152, 27.44705},
                      row{"ml.g5.48xlarge", "a10g", 100, 1, 768, 16.288}, row{"ml.g6e.48xlarge", "l40s", 400, 1, 1536, 30.13118}}) {
    INFO(r.id);
    const instance_spec& i = cat.instance(r.id);
    CHECK(i.gpu == r.gpu);
    CHECK(i.gpus_per_node == 8);
    CHECK(i.efa_per_node.raw() * 8 / 1e9 == Approx(r.efa_gbit));
    CHECK(i.nvlink_domain_gpus == r.domain);
    CHECK(i.host_memory.in(gib) == Approx(r.host_gib));
    CHECK(i.price_per_hour_usd == Approx(r.ec2_usd));
    CHECK(i.price_kind() == hourly_price_kind::ec2_on_demand);
    CHECK(i.price_region == "us-east-1");
  }
  // every instance states its host memory and NVLink domain (an HGX node is one 8-GPU domain; a GB200 NVL72
  // UltraServer member shares one 72-GPU domain with 17 other instances)
  for (const auto& i : cat.instances()) {
    INFO(i.id);
    CHECK(i.host_memory.in(gib) >= 768);
    const bool pcie = !cat.gpu(i.gpu).has_nvlink();
    CHECK(i.nvlink_domain_gpus == (pcie ? 1 : i.gpu == "gb200" ? 72 : 8));
  }
  const instance_spec& gb = cat.instance("p6e-gb200.36xlarge");
  CHECK(gb.id == "ml.p6e-gb200.36xlarge");
  CHECK(gb.gpus_per_node == 4);
  CHECK(gb.efa_per_node.raw() * 8 / 1e9 == Approx(1600));
  CHECK(gb.host_memory.in(gib) == 960);
  CHECK(gb.price_per_hour_usd == Approx(761.904 / 18));  // the x72 UltraServer's Capacity Block rate per instance
  CHECK(gb.price_kind() == hourly_price_kind::ec2_capacity_block);
  CHECK(cat.instance("ml.p5.48xlarge").host_memory.in(gib) == 2048);
  CHECK(cat.instance("ml.p6-b300.48xlarge").host_memory.in(gib) == 4096);
  CHECK(cat.instance("p4de.24xlarge").id == "ml.p4de.24xlarge");
}

TEST_CASE("catalog: every number has a source key that docs/hardware.md resolves", "[catalog]") {
  const nlohmann::json doc = io::read_json_file(catalog_path);
  // the keys of the Sources table: first cell of each row of the "## Sources" section, comma-separated
  std::set<std::string> keys;
  {
    std::ifstream in(fs::path(BWPLAN_SOURCE_DIR) / "docs" / "hardware.md");
    std::string line;
    bool in_sources = false;
    while (std::getline(in, line)) {
      if (line.rfind("## ", 0) == 0) in_sources = line == "## Sources";
      if (!in_sources || line.rfind("| ", 0) != 0 || line.rfind("| Key", 0) == 0) continue;
      std::string cell = line.substr(2, line.find(" |", 2) - 2);
      std::stringstream ss(cell);
      for (std::string k; std::getline(ss, k, ',');) {
        k.erase(0, k.find_first_not_of(' '));
        k.erase(k.find_last_not_of(' ') + 1);
        keys.insert(k);
      }
    }
  }
  REQUIRE(keys.count("AIC-L40S") == 1);
  auto check_entry = [&](const nlohmann::json& e, const std::vector<std::string>& numeric) {
    const std::string id = e.at("id").get<std::string>();
    REQUIRE(e.contains("sources"));
    const auto& src = e.at("sources");
    for (const auto& field : numeric) {
      if (!e.contains(field)) continue;
      INFO(id << " " << field);
      REQUIRE(src.contains(field));
      std::vector<std::string> cited;
      if (src.at(field).is_string()) cited.push_back(src.at(field).get<std::string>());
      else for (const auto& k : src.at(field)) cited.push_back(k.get<std::string>());
      CHECK(!cited.empty());
      for (const auto& k : cited) {
        INFO("key " << k);
        CHECK(keys.count(k) == 1);
      }
    }
    for (auto it = src.begin(); it != src.end(); ++it) {  // no source for a field the entry does not have
      INFO(id << " sources." << it.key());
      CHECK(e.contains(it.key()));
    }
  };
  for (const auto& g : doc.at("gpus"))
    check_entry(g, {"hbm_total_mib", "driver_reserved_mib", "hbm_bandwidth_tb_per_s", "nvlink_gb_per_s_per_direction",
                    "pcie_gb_per_s_per_direction", "power_limit_w", "rated_power_w", "attention_speedup", "dense_tflop_per_s",
                    "mamf_bf16_tflop_per_s", "host_link_gb_per_s_per_direction"});
  for (const auto& i : doc.at("instances"))
    check_entry(i, {"gpus_per_node", "efa_gbit_per_s", "nvlink_domain_gpus", "host_memory_gib", "price_per_hour_usd",
                    "sagemaker_price_per_hour_usd"});
  // every GPU and instance field the catalog holds is one of those, or descriptive text
  const std::set<std::string> gpu_fields{"id", "name", "architecture", "hbm_total_mib", "driver_reserved_mib", "hbm_bandwidth_tb_per_s",
                                         "interconnect", "nvlink_gb_per_s_per_direction", "pcie_gb_per_s_per_direction",
                                         "power_limit_w", "rated_power_w", "attention_speedup", "dense_tflop_per_s",
                                         "mamf_bf16_tflop_per_s", "host_link_gb_per_s_per_direction", "sources"};
  const std::set<std::string> inst_fields{"id", "gpu", "gpus_per_node", "efa_gbit_per_s", "nvlink_domain_gpus", "host_memory_gib",
                                          "price_per_hour_usd", "price_kind", "price_region", "price_note",
                                          "sagemaker_price_per_hour_usd", "sagemaker_price_region", "sagemaker_price_note", "sources"};
  for (const auto& g : doc.at("gpus"))
    for (auto it = g.begin(); it != g.end(); ++it) CHECK(gpu_fields.count(it.key()) == 1);
  for (const auto& i : doc.at("instances"))
    for (auto it = i.begin(); it != i.end(); ++it) CHECK(inst_fields.count(it.key()) == 1);
}

TEST_CASE("catalog: a GPU's measured matmul rate (MAMF) sets its tensor-core rates against the calibration H200's", "[catalog][throughput]") {
  const hardware_catalog cat = bundled();
  // stas00/ml-engineering's MAMF table (bf16): GB200 1,822 of 2,500; B200 1,745 of 2,250; H100 794.5 of 989, "H200 is the same"
  CHECK(cat.gpu("gb200").mamf_fraction() == Approx(1822.0 / 2500));
  CHECK(cat.gpu("b200").mamf_fraction() == Approx(1745.0 / 2250));
  CHECK(cat.gpu("h200").mamf_fraction() == Approx(794.5 / 989));
  CHECK(cat.gpu("gb300").mamf_fraction() == 0);  // not measured: its datasheet rate, as calibrated
  const throughput_calibration k;
  const model_spec m = test::llama_8b();
  const training_config c = test::fsdp_config(2, 8192, 8, 8);
  auto terms = [&](const gpu_spec& g) { return compose_throughput(compute_throughput_terms(m, c, g, nullptr, k)); };
  auto unmeasured = [](gpu_spec g) { g.mamf_bf16 = flop_rate{}; return g; };
  SECTION("hardware --format json shows the measurement where the catalog has one") {
    const auto r = run_cli({"hardware", "--format", "json"});
    REQUIRE(r.code == 0);
    const auto j = nlohmann::json::parse(r.out);
    for (const auto& g : j.at("gpus")) {
      INFO(g.at("id"));
      if (g.at("id") == "gb200") CHECK(g.at("mamf_bf16_tflop_per_s").get<double>() == Approx(1822));
      if (g.at("id") == "gb300") CHECK(!g.contains("mamf_bf16_tflop_per_s"));
    }
  }
  SECTION("a measurement of exactly a tenth of the peak is kept (0.1 × 328 rounds above 32.8)") {
    hardware_catalog c2 = bundled();
    nlohmann::json g = user_gpu();
    g["dense_tflop_per_s"] = {{"bf16", 328}};
    g["mamf_bf16_tflop_per_s"] = 32.8;
    io::merge_catalog(c2, gpus_doc(g), "user.json");
    CHECK(c2.gpu("mygpu").mamf_fraction() == Approx(0.1));
  }
  SECTION("the calibration GPU is unchanged") {
    const auto h200 = terms(cat.gpu("h200"));
    CHECK(h200.gemm.raw() == Approx(terms(unmeasured(cat.gpu("h200"))).gemm.raw()));
    CHECK(h200.attention.raw() == Approx(terms(unmeasured(cat.gpu("h200"))).attention.raw()));
  }
  SECTION("GB200's GEMMs and attention run at 0.729 / 0.803 = 0.907 of its datasheet-scaled rates") {
    const double f = (1822.0 / 2500) / (794.5 / 989);
    const auto measured = terms(cat.gpu("gb200")), datasheet = terms(unmeasured(cat.gpu("gb200")));
    CHECK(measured.gemm.raw() == Approx(datasheet.gemm.raw() / f));
    CHECK(measured.attention.raw() == Approx(datasheet.attention.raw() / f));
    CHECK(measured.memory_bound.raw() == Approx(datasheet.memory_bound.raw()));  // HBM-bound work is not a matmul
    // GB200 over B200: 2,500 / 2,250 = 1.11 on the datasheets, 1,822 / 1,745 = 1.04 measured
    const auto b200 = terms(cat.gpu("b200"));
    CHECK(b200.gemm.raw() / measured.gemm.raw() == Approx(1.044).epsilon(0.01));
  }
  SECTION("an A100's GEMMs run faster, its FlashAttention-2 rates are its own") {
    const auto measured = terms(cat.gpu("a100-80gb")), datasheet = terms(unmeasured(cat.gpu("a100-80gb")));
    CHECK(measured.gemm.raw() == Approx(datasheet.gemm.raw() / ((271.2 / 312) / (794.5 / 989))));
    CHECK(measured.attention.raw() == Approx(datasheet.attention.raw()));
  }
}

TEST_CASE("catalog: supports() follows the tensor cores (A100 bf16 only, L40S and H800 FP8, MX/NV FP4 on Blackwell)", "[catalog][precision]") {
  const hardware_catalog cat = bundled();
  using F = compute_format;
  CHECK(supported(cat.gpu("a100-40gb")) == std::vector<F>{F::bf16});
  CHECK(supported(cat.gpu("a100-80gb")) == std::vector<F>{F::bf16});
  CHECK(supported(cat.gpu("a10g")) == std::vector<F>{F::bf16});
  CHECK(supported(cat.gpu("l40s")) == std::vector<F>{F::bf16, F::fp8, F::fp8_rowwise});  // Ada SM 8.9: FP8, no MX
  CHECK(supported(cat.gpu("h800")) == std::vector<F>{F::bf16, F::fp8, F::fp8_rowwise});
  CHECK(supported(cat.gpu("h100-96gb")) == std::vector<F>{F::bf16, F::fp8, F::fp8_rowwise});
  CHECK(supported(cat.gpu("b200")) == std::vector<F>{F::bf16, F::fp8, F::fp8_rowwise, F::mxfp8, F::nvfp4});
  // Ada's FP8 GEMMs are TN-only like Hopper's: a transposed weight copy; Blackwell keeps one
  CHECK(traits(F::fp8, cat.gpu("l40s")).weight_copy_bytes == 2.0);
  CHECK(traits(F::fp8, cat.gpu("h800")).weight_copy_bytes == 2.0);
  CHECK(traits(F::fp8, cat.gpu("b200")).weight_copy_bytes == 1.0);
  // the CLI refuses FP8 on an A100 and accepts it on an L40S
  const auto a = run_cli({"estimate", "Llama-3.2-1B", "--gpu", "a100-80gb", "--precision", "fp8"});
  CHECK(a.code == 2);
  CHECK_THAT(a.err, Catch::Contains("--precision fp8 is not supported on a100-80gb (ampere)") && Catch::Contains("l40s"));
  CHECK(run_cli({"estimate", "Llama-3.2-1B", "--gpu", "l40s", "--precision", "fp8"}).code == 0);
}

TEST_CASE("catalog: NVLS is modelled only on Hopper/Blackwell NVLink nodes, PCIe GPUs use their PCIe rate", "[catalog][collective]") {
  const hardware_catalog cat = bundled();
  const throughput_calibration k{};
  const comm_group node{8, 8, 1};
  const double S = 8e9;
  auto ar = [&](const char* gpu, const char* inst) {
    return collective_time(collective_kind::all_reduce, bytes::base(S), node, cat.gpu(gpu), &cat.instance(inst), k).raw();
  };
  auto ag = [&](const char* gpu, const char* inst) {
    return collective_time(collective_kind::all_gather, bytes::base(S), node, cat.gpu(gpu), &cat.instance(inst), k).raw();
  };
  // Ampere (no NVLS): an all-reduce is a ring, twice the all-gather's bandwidth term
  CHECK(ar("a100-80gb", "ml.p4de.24xlarge") > 1.9 * ag("a100-80gb", "ml.p4de.24xlarge"));
  // Hopper: NVLS makes it cheaper than the ring
  CHECK(ar("h100", "ml.p5.48xlarge") < 1.9 * ag("h100", "ml.p5.48xlarge"));
  // a PCIe box moves the all-gather at ~32 GB/s per direction: about 10x slower than a 300 GB/s A100 node
  CHECK(ag("l40s", "ml.g6e.48xlarge") > 8 * ag("a100-80gb", "ml.p4de.24xlarge"));
}

TEST_CASE("catalog reader: impossible values are one-line errors naming the file and JSON pointer", "[catalog][io]") {
  auto gpu_with = [](const char* key, const nlohmann::json& v) {
    auto g = user_gpu();
    g[key] = v;
    return gpus_doc(g);
  };
  auto inst_with = [](const char* key, const nlohmann::json& v) {
    auto i = user_instance();
    i[key] = v;
    return instances_doc(i);
  };
  struct bad {
    nlohmann::json doc;
    std::string expect;
  };
  const double inf = std::numeric_limits<double>::infinity();
  const double nan = std::numeric_limits<double>::quiet_NaN();
  std::vector<bad> cases{
      {gpu_with("hbm_bandwidth_tb_per_s", 0), "user.json: /gpus/0/hbm_bandwidth_tb_per_s: must be a positive number, got 0"},
      {gpu_with("hbm_bandwidth_tb_per_s", -3.35), "user.json: /gpus/0/hbm_bandwidth_tb_per_s: must be a positive number, got -3.35"},
      {gpu_with("hbm_bandwidth_tb_per_s", inf), "user.json: /gpus/0/hbm_bandwidth_tb_per_s: must be a finite number"},
      {gpu_with("nvlink_gb_per_s_per_direction", nan), "user.json: /gpus/0/nvlink_gb_per_s_per_direction: must be a finite number"},
      {gpu_with("nvlink_gb_per_s_per_direction", 0), "user.json: /gpus/0/nvlink_gb_per_s_per_direction: must be a positive number, got 0"},
      {gpu_with("nvlink_gb_per_s_per_direction", 9e9), "user.json: /gpus/0/nvlink_gb_per_s_per_direction: must be <= 100000, got"},
      {gpu_with("dense_tflop_per_s", {{"bf16", 0}}), "user.json: /gpus/0/dense_tflop_per_s/bf16: must be a positive number, got 0"},
      {gpu_with("dense_tflop_per_s", {{"bf16", 1000}, {"fp8", -1}}), "user.json: /gpus/0/dense_tflop_per_s/fp8: must be a positive number, got -1"},
      {gpu_with("dense_tflop_per_s", {{"bf16", 1e9}}), "user.json: /gpus/0/dense_tflop_per_s/bf16: must be <= 1000000, got"},
      {gpu_with("dense_tflop_per_s", {{"fp8", 1000}}), "user.json: /gpus/0/dense_tflop_per_s/bf16: missing required field"},
      {gpu_with("driver_reserved_mib", 100000), "user.json: /gpus/0/driver_reserved_mib: must be less than hbm_total_mib (100000), got 100000"},
      {gpu_with("driver_reserved_mib", 2e5), "user.json: /gpus/0/driver_reserved_mib: must be less than hbm_total_mib"},
      {gpu_with("hbm_total_mib", 2e12), "user.json: /gpus/0/hbm_total_mib: must be <= 1024000000 (10^6 GiB), got"},
      {gpu_with("hbm_total_mib", 0), "user.json: /gpus/0/hbm_total_mib: must be a positive number, got 0"},
      {gpu_with("id", ""), "user.json: /gpus/0/id: must not be empty"},
      {gpu_with("attention_kernel", "fast"), "user.json: /gpus/0/attention_kernel: expected \"fused\" or \"fa2\", got \"fast\""},
      {gpu_with("attention_kernel", 2), "user.json: /gpus/0/attention_kernel: expected \"fused\" or \"fa2\", got 2"},
      {gpu_with("id", "  "), "user.json: /gpus/0/id: must not be empty"},
      {gpu_with("architecture", "volta"), "user.json: /gpus/0/architecture: unknown architecture 'volta'"},
      {gpu_with("interconnect", "infiniband"), "user.json: /gpus/0/interconnect: expected \"nvlink\" or \"pcie\", got \"infiniband\""},
      {gpu_with("interconnect", "pcie"), "user.json: /gpus/0/nvlink_gb_per_s_per_direction: a PCIe GPU has no NVLink"},
      {gpu_with("power_limit_w", 0), "user.json: /gpus/0/power_limit_w: must be a positive number, got 0"},
      {gpu_with("mamf_bf16_tflop_per_s", 0), "user.json: /gpus/0/mamf_bf16_tflop_per_s: must be a positive number, got 0"},
      // a measured matmul rate above the datasheet's would make the GPU faster than its rating
      {gpu_with("mamf_bf16_tflop_per_s", 2500),
       "user.json: /gpus/0/mamf_bf16_tflop_per_s: above the bf16 dense peak (2000 TFLOP/s): a measured matmul rate cannot exceed the datasheet's"},
      // the fraction the docs quote, or PFLOP/s, for TFLOP/s: a GPU a thousand times slower (a review)
      {gpu_with("mamf_bf16_tflop_per_s", 0.729),
       "user.json: /gpus/0/mamf_bf16_tflop_per_s: below a tenth of the bf16 dense peak (2000 TFLOP/s): give the measured rate in TFLOP/s"},
      {gpu_with("power_limit_w", 7e5), "user.json: /gpus/0/power_limit_w: must be <= 100000, got"},
      {inst_with("efa_gbit_per_s", 0), "user.json: /instances/0/efa_gbit_per_s: must be a positive number, got 0"},
      {inst_with("efa_gbit_per_s", inf), "user.json: /instances/0/efa_gbit_per_s: must be a finite number"},
      {inst_with("host_memory_gib", 2e6), "user.json: /instances/0/host_memory_gib: must be <= 1000000, got"},
      {inst_with("host_memory_gib", -1), "user.json: /instances/0/host_memory_gib: must be a positive number, got -1"},
      {inst_with("id", ""), "user.json: /instances/0/id: must not be empty"},
      {inst_with("gpu", ""), "user.json: /instances/0/gpu: must not be empty"},
      {inst_with("gpu", "h2000"), "user.json: /instances/0/gpu: unknown GPU 'h2000'"},
      {inst_with("gpus_per_node", 0), "user.json: /instances/0/gpus_per_node: must be an integer from 1 to 1024, got 0"},
      {inst_with("gpus_per_node", 2.5), "user.json: /instances/0/gpus_per_node: must be an integer from 1 to 1024, got 2.5"},
      {inst_with("nvlink_domain_gpus", 0), "user.json: /instances/0/nvlink_domain_gpus: must be an integer from 1 to 100000, got 0"},
      // a domain smaller than the instance, or one splitting instances, was read as the instance's NVLink (an audit)
      {inst_with("nvlink_domain_gpus", 4), "user.json: /instances/0/nvlink_domain_gpus: must be a multiple of gpus_per_node (8): an "
                                           "NVLink domain holds whole instances, got 4"},
      {inst_with("nvlink_domain_gpus", 12), "user.json: /instances/0/nvlink_domain_gpus: must be a multiple of gpus_per_node (8)"},
      {inst_with("price_per_hour_usd", -1), "user.json: /instances/0/price_per_hour_usd: must be a non-negative number, got -1"},
      {inst_with("price_per_hour_usd", 1e9), "user.json: /instances/0/price_per_hour_usd: must be <= 100000, got"},
      {inst_with("price_kind", "spot"), "user.json: /instances/0/price_kind: expected \"ec2-on-demand\", \"ec2-capacity-block\" or \"other\""},
      {inst_with("sagemaker_price_per_hour_usd", 0), "user.json: /instances/0/sagemaker_price_per_hour_usd: must be a positive number, got 0"},
      {inst_with("sagemaker_price_per_hour_usd", 70), "user.json: /instances/0/sagemaker_price_region: missing required field"},
  };
  {  // a PCIe GPU's instance cannot claim an NVLink domain
    auto i = user_instance();
    i["gpu"] = "l40s";
    i["nvlink_domain_gpus"] = 8;
    cases.push_back({instances_doc(i), "user.json: /instances/0/nvlink_domain_gpus: must be 1 for a PCIe GPU (l40s has no NVLink), got 8"});
  }
  {  // an alias needs a name and a target
    cases.push_back({nlohmann::json{{"aliases", {{"x", ""}}}}, "user.json: /aliases/x: must not be empty"});
    cases.push_back({nlohmann::json{{"aliases", {{"", "h100"}}}}, "user.json: /aliases/: alias name must not be empty"});
    cases.push_back({gpu_with("dense_tflop_per_s", {{"bf16", 1000}, {"fp8/e4m3", 0}}),
                     "user.json: /gpus/0/dense_tflop_per_s/fp8~1e4m3: must be a positive number, got 0"});
  }
  for (const auto& c : cases) {
    INFO(c.doc.dump());
    const std::string msg = merge_error(c.doc);
    CHECK_THAT(msg, Catch::StartsWith(c.expect));
    CHECK(msg.find('\n') == std::string::npos);
  }
  // the valid documents the cases start from load
  CHECK(merge_error(gpus_doc(user_gpu())).empty());
  CHECK(merge_error(instances_doc(user_instance())).empty());
}

TEST_CASE("catalog reader: through --hardware the error names the file, the pointer and the line", "[catalog][cli]") {
  const std::string text =
      "{\"gpus\": [\n {\"id\": \"x\", \"architecture\": \"hopper\", \"hbm_total_mib\": 1000, \"driver_reserved_mib\": 1000,\n"
      "  \"hbm_bandwidth_tb_per_s\": 1, \"nvlink_gb_per_s_per_direction\": 100, \"dense_tflop_per_s\": {\"bf16\": 10}}]}";
  const auto f = write_file("reserved.json", text);
  const auto r = run_cli({"--hardware", f, "hardware"});
  CHECK(r.code == 2);
  CHECK_THAT(r.err, Catch::Contains(f + ": /gpus/0/driver_reserved_mib: must be less than hbm_total_mib (1000), got 1000 (line 2"));
  CHECK(std::count(r.err.begin(), r.err.end(), '\n') == 1);
  const auto z = write_file("zero_bw.json", R"({"gpus": [{"id": "x", "architecture": "hopper", "hbm_total_mib": 1000,
    "hbm_bandwidth_tb_per_s": 0, "nvlink_gb_per_s_per_direction": 100, "dense_tflop_per_s": {"bf16": 10}}]})");
  CHECK_THAT(run_cli({"--hardware", z, "hardware"}).err,
             Catch::Contains(z + ": /gpus/0/hbm_bandwidth_tb_per_s: must be a positive number, got 0 (line 2"));
}

TEST_CASE("bug: a SageMaker price from --hardware is the price every command shows", "[catalog][price][cli]") {
  // docs/hardware.md promised it; estimate, hardware, recommend and sagemaker read the EC2 price_per_hour_usd directly
  auto sm = nlohmann::json::parse(io::read_text_file(catalog_path))["instances"][0];
  REQUIRE(sm["id"] == "ml.p5.48xlarge");
  sm["sagemaker_price_per_hour_usd"] = 70.5;
  sm["sagemaker_price_region"] = "us-west-2";
  sm["sagemaker_price_note"] = "placeholder for the test";
  const auto f = write_file("sm-price.json", nlohmann::json{{"instances", {sm}}}.dump());
  const auto hw = run_cli({"--hardware", f, "hardware", "--format", "json"});
  REQUIRE(hw.code == 0);
  bool found = false;
  const auto hj = nlohmann::json::parse(hw.out);  // (a range-for over a temporary's member dangles)
  for (const auto& i : hj["instances"])
    if (i["id"] == "ml.p5.48xlarge") {
      found = true;
      CHECK(i["price_per_hour_usd"].get<double>() == 55.04);  // the catalog field: EC2's, as its price_note says
      CHECK(i["sagemaker_price_per_hour_usd"].get<double>() == 70.5);
      CHECK(i["effective_price_per_hour_usd"].get<double>() == 70.5);
      CHECK(i["effective_price_source"] == "SageMaker training on-demand, us-west-2");
    }
  CHECK(found);
  CHECK_THAT(run_cli({"--hardware", f, "hardware"}).out, Catch::Contains("70.50  SageMaker training on-demand, us-west-2"));
  const auto est = run_cli({"--hardware", f, "estimate", "Llama-3.2-1B", "--instance", "ml.p5.48xlarge", "--tokens", "1B", "--format", "json"});
  REQUIRE(est.code == 0);
  const auto tr = nlohmann::json::parse(est.out)["training"];
  CHECK(tr["price_per_hour_usd"].get<double>() == 70.5);
  CHECK(tr["cost_usd"].get<double>() == Approx(70.5 * tr["instance_hours"].get<double>()));
  CHECK(tr["price_source"] == "SageMaker training on-demand, us-west-2");
  const auto text = run_cli({"--hardware", f, "estimate", "Llama-3.2-1B", "--instance", "ml.p5.48xlarge", "--tokens", "1B"});
  CHECK_THAT(text.out, Catch::Contains("at $70.50/h per instance (SageMaker training on-demand, us-west-2)"));
  const auto rec = run_cli({"--hardware", f, "recommend", "Llama-3.2-1B", "--instance", "ml.p5.48xlarge", "--tokens", "1B", "--format", "json"});
  REQUIRE(rec.code == 0);
  const auto rj = nlohmann::json::parse(rec.out);
  REQUIRE(!rj["rows"].empty());
  CHECK(rj["rows"][0]["price_per_hour_usd"].get<double>() == 70.5);
  CHECK(rj["rows"][0]["price_source"] == "SageMaker training on-demand, us-west-2");
  CHECK_THAT(rj["notes"].dump(), Catch::Contains("ml.p5.48xlarge: priced at $70.50/h per instance (SageMaker training on-demand, us-west-2)"));
  const auto job = run_cli({"--hardware", f, "-v", "sagemaker", "Llama-3.2-1B", "--instance", "ml.p5.48xlarge"});
  REQUIRE(job.code == 0);
  CHECK_THAT(job.err, Catch::Contains("price: 70.50 USD per instance-hour (SageMaker training on-demand, us-west-2)"));
  // recommend's --price-per-hour prices the job it emits too (a review: the note gave the catalog's 55.04)
  const auto picked = run_cli({"-v", "recommend", "Llama-3.2-1B", "--instance", "ml.p5.48xlarge", "--price-per-hour", "10", "--emit", "sagemaker"});
  REQUIRE(picked.code == 0);
  CHECK_THAT(picked.err, Catch::Contains("price: 10.00 USD per instance-hour (--price-per-hour)"));
  // without the file: the EC2 price, labelled as such
  const auto ec2 = run_cli({"estimate", "Llama-3.2-1B", "--instance", "ml.p5.48xlarge", "--tokens", "1B", "--format", "json"});
  CHECK(nlohmann::json::parse(ec2.out)["training"]["price_per_hour_usd"].get<double>() == 55.04);
  CHECK(nlohmann::json::parse(ec2.out)["training"]["price_source"] == bundled().instance("ml.p5.48xlarge").price_note);
  const auto flag = run_cli({"--hardware", f, "estimate", "Llama-3.2-1B", "--instance", "ml.p5.48xlarge", "--tokens", "1B", "--price-per-hour",
                             "10", "--format", "json"});
  CHECK(nlohmann::json::parse(flag.out)["training"]["price_per_hour_usd"].get<double>() == 10);
  CHECK(nlohmann::json::parse(flag.out)["training"]["price_source"] == "--price-per-hour");
}

TEST_CASE("catalog reader: new fields are optional in user files, with defaults", "[catalog][io]") {
  hardware_catalog cat = bundled();
  auto pcie = user_gpu();
  pcie["id"] = "mypcie";
  pcie.erase("nvlink_gb_per_s_per_direction");
  pcie["interconnect"] = "pcie";
  pcie["pcie_gb_per_s_per_direction"] = 64;
  nlohmann::json doc{{"gpus", {user_gpu(), pcie}}};
  auto a = user_instance();
  a["gpu"] = "mygpu";
  auto b = user_instance();
  b["id"] = "ml.mypcie.48xlarge";
  b["gpu"] = "mypcie";
  doc["instances"] = {a, b};
  io::merge_catalog(cat, doc, "user.json");
  const gpu_spec& g = cat.gpu("mygpu");
  CHECK(g.interconnect == "nvlink");
  CHECK(g.power_limit_w == 0);
  CHECK(g.attention == attention_kernel::fused);  // the current fused kernels unless the file says "fa2"
  CHECK(cat.gpu("mypcie").interconnect == "pcie");
  CHECK(cat.gpu("mypcie").peer_per_direction().in(gb_per_s) == Approx(64));
  const instance_spec& ia = cat.instance("ml.my.48xlarge");
  CHECK(ia.nvlink_domain_gpus == 8);  // an NVLink GPU: the instance is the domain
  CHECK(ia.host_memory.raw() == 0);   // not stated
  CHECK(ia.price_kind() == hourly_price_kind::other);
  CHECK(cat.instance("ml.mypcie.48xlarge").nvlink_domain_gpus == 1);
  // a 4-GPU UltraServer member in a 72-GPU NVLink domain
  auto u = user_instance();
  u["id"] = "ml.my-nvl72.36xlarge";
  u["gpu"] = "gb200";
  u["gpus_per_node"] = 4;
  u["nvlink_domain_gpus"] = 72;
  u["host_memory_gib"] = 960;
  io::merge_catalog(cat, instances_doc(u), "user.json");
  CHECK(cat.instance("ml.my-nvl72.36xlarge").nvlink_domain_gpus == 72);
  CHECK(cat.instance("ml.my-nvl72.36xlarge").host_memory.in(gib) == 960);
}

TEST_CASE("catalog: the price label says whether a price is SageMaker's or EC2's", "[catalog][price]") {
  hardware_catalog cat = bundled();
  // no bundled instance has a SageMaker training price: AWS's ml.* rates are not in the catalog's sources
  for (const auto& i : cat.instances()) {
    INFO(i.id);
    CHECK_FALSE(i.sagemaker_price_per_hour_usd.has_value());
    CHECK(i.price_per_hour() == i.price_per_hour_usd);
    CHECK_THAT(i.price_label(), Catch::Contains("(no SageMaker training price in the catalog)"));
    CHECK(i.price_kind() != hourly_price_kind::sagemaker_training_on_demand);
  }
  const instance_spec& p5 = cat.instance("ml.p5.48xlarge");
  CHECK(p5.price_kind() == hourly_price_kind::ec2_on_demand);
  CHECK(p5.price_label() == "EC2 on-demand, us-east-1 (no SageMaker training price in the catalog)");
  const instance_spec& p5e = cat.instance("ml.p5e.48xlarge");
  CHECK(p5e.price_kind() == hourly_price_kind::ec2_capacity_block);
  CHECK(p5e.price_label() == "EC2 Capacity Block (no SageMaker training price in the catalog)");

  // a user file adds the SageMaker price: it becomes the price shown, the EC2 one stays as it was
  auto sm = nlohmann::json::parse(io::read_text_file(catalog_path))["instances"][0];
  REQUIRE(sm["id"] == "ml.p5.48xlarge");
  sm["sagemaker_price_per_hour_usd"] = 70.5;
  sm["sagemaker_price_region"] = "us-west-2";
  sm["sagemaker_price_note"] = "placeholder for the test";
  io::merge_catalog(cat, instances_doc(sm), "user.json");
  const instance_spec& p5sm = cat.instance("ml.p5.48xlarge");
  CHECK(p5sm.price_per_hour() == 70.5);
  CHECK(p5sm.price_per_hour_usd == 55.04);
  CHECK(p5sm.price_kind() == hourly_price_kind::sagemaker_training_on_demand);
  CHECK(p5sm.price_label() == "SageMaker training on-demand, us-west-2");

  // a price of unstated kind is labelled by its note
  auto other = user_instance();
  other["price_note"] = "our negotiated rate, Dec 2026";
  io::merge_catalog(cat, instances_doc(other), "user.json");
  CHECK(cat.instance("ml.my.48xlarge").price_label() == "our negotiated rate, Dec 2026 (no SageMaker training price in the catalog)");
}
