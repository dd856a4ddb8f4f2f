// SPDX-License-Identifier: Apache-2.0
// `bwplan hardware`: list the GPU and instance catalog.
#include "cli.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <ostream>

namespace bwplan::cli {

runner register_hardware(CLI::App& app, context& ctx) {
  auto format = std::make_shared<std::string>("table");
  auto* sub = app.add_subcommand("hardware", "list the GPUs and instances in the catalog");
  sub->add_option("--format", *format, "table | json")->capture_default_str()->check(CLI::IsMember({"table", "json"}));
  return [format, &ctx]() -> int {
    const hardware_catalog cat = ctx.catalog();
    if (*format == "json") {
      nlohmann::ordered_json j;
      j["gpus"] = nlohmann::ordered_json::array();
      for (const auto& g : cat.gpus()) {
        nlohmann::ordered_json d;
        for (const auto& [k, v] : g.dense_flops) d[k + "_tflop_per_s"] = v.in(tflop_per_s);
        j["gpus"].push_back({{"id", g.id}, {"name", g.name}, {"architecture", g.architecture},
                             {"hbm_total_bytes", g.hbm_total.raw()}, {"cuda_capacity_bytes", g.cuda_capacity().raw()},
                             {"hbm_bandwidth_bytes_per_s", g.hbm_bandwidth.raw()},
                             {"nvlink_bytes_per_s_per_direction", g.nvlink_per_direction.raw()}, {"dense", d}});
        // the measured matmul rate the throughput model runs the GPU at (docs/hardware.md#sustained-matmul)
        if (g.mamf_bf16.raw() > 0) j["gpus"].back()["mamf_bf16_tflop_per_s"] = g.mamf_bf16.in(tflop_per_s);
      }
      j["instances"] = nlohmann::ordered_json::array();
      for (const auto& i : cat.instances()) {
        j["instances"].push_back({{"id", i.id}, {"gpu", i.gpu}, {"gpus_per_node", i.gpus_per_node},
                                  {"efa_bytes_per_s", i.efa_per_node.raw()}, {"price_per_hour_usd", i.price_per_hour_usd},
                                  {"price_note", i.price_note}});
        // the price the other commands use (SageMaker's when a --hardware file gives it) and where it comes from
        if (i.sagemaker_price_per_hour_usd) j["instances"].back()["sagemaker_price_per_hour_usd"] = *i.sagemaker_price_per_hour_usd;
        j["instances"].back()["effective_price_per_hour_usd"] = i.price_per_hour();
        j["instances"].back()["effective_price_source"] = i.price_source();
      }
      ctx.out << j.dump(2) << "\n";
      return success;
    }
    // the id columns are as wide as their longest entry (a100-40gb, h100-96gb, ml.p6e-gb200.36xlarge), so that every
    // row lines up under its header
    std::size_t gw = 3, aw = 4, iw = 8, igw = 3;
    for (const auto& g : cat.gpus()) { gw = std::max(gw, g.id.size()); aw = std::max(aw, g.architecture.size()); }
    for (const auto& i : cat.instances()) { iw = std::max(iw, i.id.size()); igw = std::max(igw, i.gpu.size()); }
    ctx.out << fmt::format("{:<{}} {:<{}} {:>10} {:>10} {:>9} {:>11} {:>8} {:>8} {:>8}\n", "GPU", gw, "arch", aw, "HBM GiB",
                           "usable GiB", "HBM TB/s", "NVLink GB/s", "BF16 TF", "FP8 TF", "FP4 TF");
    for (const auto& g : cat.gpus()) {
      auto tf = [&](const char* f) { auto p = g.peak(f); return p ? fmt::format("{:.0f}", p->in(tflop_per_s)) : std::string("-"); };
      ctx.out << fmt::format("{:<{}} {:<{}} {:>10.2f} {:>10.2f} {:>9.2f} {:>11.0f} {:>8} {:>8} {:>8}\n", g.id, gw, g.architecture,
                             aw, g.hbm_total.in(gib), g.cuda_capacity().in(gib), g.hbm_bandwidth.in(tb_per_s),
                             g.nvlink_per_direction.in(gb_per_s), tf("bf16"), tf("fp8"), tf("fp4"));
    }
    ctx.out << fmt::format("\n{:<{}} {:<{}} {:>5} {:>10} {:>10}  {}\n", "instance", iw, "GPU", igw, "GPUs", "EFA Gb/s", "USD/hour",
                           "price");
    for (const auto& i : cat.instances())
      ctx.out << fmt::format("{:<{}} {:<{}} {:>5} {:>10.0f} {:>10.2f}  {}\n", i.id, iw, i.gpu, igw, i.gpus_per_node,
                             i.efa_per_node.raw() * 8 / 1e9, i.price_per_hour(),
                             i.price_source());
    return success;
  };
}

}  // namespace bwplan::cli
