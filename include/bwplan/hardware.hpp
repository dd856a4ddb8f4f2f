// bwplan: GPU memory and throughput planning for LLM training
// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <bwplan/error.hpp>
#include <bwplan/units.hpp>

#include <algorithm>
#include <cctype>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace bwplan {

/// Attention kernel a GPU's training stack runs (the `F.scaled_dot_product_attention` backend), whose published or
/// measured rates the throughput model uses (docs/methodology.md#throughput).
enum class attention_kernel {
  fused,   ///< the current fused kernels: FlashAttention-3 / cuDNN on Hopper, cuDNN on Blackwell (PyTorch 2.11, TE, torchtitan)
  flash2,  ///< FlashAttention-2 (PyTorch's `flash` SDPA backend before FlashAttention-3; the stacks of 2024)
};

/// Catalog and CLI spelling of an attention kernel: "fused" or "fa2".
[[nodiscard]] constexpr const char* to_string(attention_kernel k) noexcept { return k == attention_kernel::flash2 ? "fa2" : "fused"; }

/// Parses "fused" or "fa2".
[[nodiscard]] inline std::optional<attention_kernel> parse_attention_kernel(std::string_view s) noexcept {
  if (s == "fused") return attention_kernel::fused;
  if (s == "fa2") return attention_kernel::flash2;
  return std::nullopt;
}

/// One GPU model. Numbers come from `configs/hardware/catalog.json`; each carries a source key
/// resolved in `docs/hardware.md`.
struct gpu_spec {
  std::string id;                   ///< catalog id, e.g. "h200"
  std::string name;                 ///< marketing name
  std::string architecture;         ///< "ampere", "ada", "hopper" or "blackwell"
  bytes hbm_total;                  ///< nvidia-smi `memory.total`
  bytes driver_reserved;            ///< part of the total the driver keeps (total − what CUDA reports)
  byte_rate hbm_bandwidth;          ///< device-memory (HBM or GDDR) bandwidth
  /// GPU-to-GPU bandwidth within a node, per GPU, one direction, over `interconnect`: the NVLink rate for
  /// "nvlink" GPUs, the PCIe rate for "pcie" GPUs (no NVLink; peer traffic crosses PCIe).
  byte_rate nvlink_per_direction;
  std::string interconnect = "nvlink";  ///< GPU-to-GPU link within a node: "nvlink" or "pcie"
  /// The GPU's link to its host (CPU memory), per direction: PCIe 5.0 x16 64 GB/s on the HGX H100/H200/B200/B300
  /// baseboards, PCIe 4.0 x16 32 GB/s on A100, L40S and A10G, NVLink-C2C on Grace superchips (catalog
  /// `host_link_gb_per_s_per_direction`, docs/hardware.md#host-link). Zero when the catalog entry has none (host_link()).
  byte_rate host_link_per_direction;
  double power_limit_w = 0;         ///< default board power limit (TDP) in W; 0 when the catalog entry has none
  /// Board power at which `dense_flops` are rated, W (the datasheet TDP); 0: `power_limit_w`. Differs where a
  /// GPU runs below its TDP by default (torchtitan's H100 96 GB hosts: 500 W of 700 W).
  double rated_power_w = 0;
  /// Attention-kernel speed over a GPU of the same tensor-core rate without it (1 = none). Blackwell Ultra
  /// (B300, GB300) doubles the SFU exponential (MUFU.EX2) throughput that bounds softmax between the two
  /// attention GEMMs; NVIDIA measures about 35 % more attention forward throughput than on GB200 (NVIDIA
  /// Technical Blog, "Making Softmax More Efficient with NVIDIA Blackwell Ultra"; docs/hardware.md NV-SOFTMAX).
  double attention_speedup = 1.0;
  /// The attention kernel the GPU's training stack runs (catalog key `attention_kernel`, default "fused"; the global
  /// `--attention-kernel` sets it for every GPU of one command, as `--power-limit` sets the power limit).
  attention_kernel attention = attention_kernel::fused;
  std::map<std::string, flop_rate, std::less<>> dense_flops;  ///< dense tensor-core rate per format ("bf16", "fp8", "fp4")
  /// Measured maximum achievable bf16 matmul rate (MAMF: the best `torch.matmul` over a brute-force search of shapes,
  /// mean of 100 iterations after 50 warm-up, at the GPU's default power; catalog `mamf_bf16_tflop_per_s`, from
  /// stas00/ml-engineering compute/accelerator/README.md "Maximum Achievable Matmul FLOPS comparison table",
  /// docs/hardware.md#sustained-matmul). Zero where no measurement is known. A GPU whose datasheet assumes clocks
  /// it cannot hold under matmul load reaches a smaller fraction of its `dense_flops` (GB200: 1,822 of 2,500, 72.9 %;
  /// B200 1,745 of 2,250, 77.6 %; H100 794.5 of 989, 80.3 %).
  flop_rate mamf_bf16;

  /// Dense rate for `format`, or nullopt if the GPU has no tensor-core support for it.
  [[nodiscard]] std::optional<flop_rate> peak(std::string_view format) const {
    auto it = dense_flops.find(format);
    if (it == dense_flops.end()) return std::nullopt;
    return it->second;
  }
  /// Bytes a CUDA process can allocate: hbm_total − driver_reserved.
  [[nodiscard]] bytes cuda_capacity() const noexcept { return hbm_total - driver_reserved; }
  /// Fraction of the rated tensor-core rate (`dense_flops`) sustained at `power_limit_w`:
  /// min(1, power_limit_w / rated_power_w), 1 when either is unknown.
  ///
  /// Dense GEMMs are the most power-hungry work a GPU does, so the power limit, not the boost clock, sets their
  /// sustained clock; dynamic power is α·C·V²·f and, with the voltage at its floor below the rated point, falls
  /// in proportion to the clock. Measured: a GB300 capped at 500 W of its 1,400 W runs cuBLAS GEMMs at about
  /// 617 TFLOP/s against 1,600–2,174 at 1,400 W (ratio 0.28–0.39 for a power ratio of 0.36;
  /// facebookexperimental/triton PR 2023, ../shared/reference/scaleout.md §6). Memory-bound kernels are not
  /// scaled (the HBM clock is not lowered by the cap). @sa docs/hardware.md#power
  [[nodiscard]] double compute_clock_fraction() const noexcept {
    const double rated = rated_power_w > 0 ? rated_power_w : power_limit_w;
    if (power_limit_w <= 0 || rated <= 0) return 1.0;
    return std::min(1.0, power_limit_w / rated);
  }
  /// The measured matmul rate over the datasheet bf16 peak, mamf_bf16 / dense_flops["bf16"] (0.729 for GB200), or 0
  /// when either is unknown. throughput_shape_of scales tensor-core rates by it relative to the calibration GPU's.
  [[nodiscard]] double mamf_fraction() const noexcept {
    const auto p = peak("bf16");
    if (!p || p->raw() <= 0 || mamf_bf16.raw() <= 0) return 0;
    return mamf_bf16.raw() / p->raw();
  }
  /// Whether the GPUs of a node talk over NVLink (false: over PCIe).
  [[nodiscard]] bool has_nvlink() const noexcept { return std::string_view(interconnect) == "nvlink"; }
  /// Whether `architecture` is `a` (compared as string views: the lengths first, no strlen; the search asks per
  /// collective).
  [[nodiscard]] bool architecture_is(std::string_view a) const noexcept { return std::string_view(architecture) == a; }
  /// The host link per direction (CPU offload): host_link_per_direction, or when the catalog has none the PCIe rate
  /// of a PCIe GPU and PCIe 5.0 x16 (64 GB/s) for an NVLink GPU.
  [[nodiscard]] byte_rate host_link() const noexcept {
    if (host_link_per_direction.raw() > 0) return host_link_per_direction;
    return has_nvlink() ? byte_rate::base(64e9) : nvlink_per_direction;
  }
  /// GPU-to-GPU bandwidth within a node, per direction (NVLink or PCIe, see `interconnect`).
  [[nodiscard]] byte_rate peer_per_direction() const noexcept { return nvlink_per_direction; }
};

/// What kind of hourly price an instance_spec::price_per_hour() returns (instance_spec::price_kind()).
enum class hourly_price_kind {
  sagemaker_training_on_demand,  ///< AWS's SageMaker training on-demand rate for the ml.* type
  ec2_on_demand,                 ///< EC2 on-demand rate of the matching EC2 type (no SageMaker price known)
  ec2_capacity_block,            ///< EC2 Capacity Block rate (no on-demand SKU, no SageMaker price known)
  other,                         ///< a price of another or unstated kind (a user file's own rate)
};

/// Parses a catalog `price_kind` ("ec2-on-demand", "ec2-capacity-block", "other"). SageMaker prices have
/// their own field, so "sagemaker-training-on-demand" is not a value of `price_kind`.
[[nodiscard]] inline std::optional<hourly_price_kind> parse_price_kind(std::string_view s) noexcept {
  if (s == "ec2-on-demand") return hourly_price_kind::ec2_on_demand;
  if (s == "ec2-capacity-block") return hourly_price_kind::ec2_capacity_block;
  if (s == "other") return hourly_price_kind::other;
  return std::nullopt;
}

/// One AWS instance type (SageMaker `ml.*` name).
///
/// Two prices: `price_per_hour_usd` is what the catalog calls the EC2 price (kind in `ec2_price_kind`,
/// what it is in `price_note`), and `sagemaker_price_per_hour_usd` is SageMaker's training on-demand rate
/// when AWS publishes one in the catalog's sources. Outputs should use price_per_hour() with price_label().
struct instance_spec {
  std::string id;                ///< e.g. "ml.p6-b200.48xlarge"
  std::string gpu;               ///< gpu_spec id
  int gpus_per_node = 0;         ///< GPUs in one instance
  byte_rate efa_per_node;        ///< EFA bandwidth of the instance (per direction)
  /// GPUs in one NVLink domain: 8 for an HGX node, 72 for a GB200/GB300 NVL72 UltraServer, 1 for a PCIe box
  /// (0: not stated, treat the instance as the domain).
  int nvlink_domain_gpus = 0;
  bytes host_memory;             ///< host (CPU) memory of the instance; zero when not stated
  double price_per_hour_usd = 0; ///< the EC2 (or other non-SageMaker) price, USD per instance-hour
  std::string price_note;        ///< which price `price_per_hour_usd` is (kind, date, region)
  hourly_price_kind ec2_price_kind = hourly_price_kind::other;  ///< kind of `price_per_hour_usd`
  std::string price_region;      ///< region of `price_per_hour_usd` ("" when not stated)
  std::optional<double> sagemaker_price_per_hour_usd;  ///< SageMaker training on-demand, USD per instance-hour
  std::string sagemaker_price_region;  ///< region of the SageMaker price
  std::string sagemaker_price_note;    ///< source and date of the SageMaker price

  /// The price outputs should show: SageMaker training on-demand when known, else `price_per_hour_usd`.
  [[nodiscard]] double price_per_hour() const noexcept {
    return sagemaker_price_per_hour_usd ? *sagemaker_price_per_hour_usd : price_per_hour_usd;
  }
  /// The kind of price price_per_hour() returns.
  [[nodiscard]] hourly_price_kind price_kind() const noexcept {
    return sagemaker_price_per_hour_usd ? hourly_price_kind::sagemaker_training_on_demand : ec2_price_kind;
  }
  /// One line saying which price price_per_hour() is, for every output that shows it: "SageMaker training
  /// on-demand, us-east-1" or "EC2 on-demand, us-east-1 (no SageMaker training price in the catalog)".
  [[nodiscard]] std::string price_label() const {
    if (sagemaker_price_per_hour_usd)
      return "SageMaker training on-demand" + (sagemaker_price_region.empty() ? std::string() : ", " + sagemaker_price_region);
    const std::string region = price_region.empty() ? std::string() : ", " + price_region;
    const std::string no_sm = " (no SageMaker training price in the catalog)";
    switch (ec2_price_kind) {
      case hourly_price_kind::ec2_on_demand: return "EC2 on-demand" + region + no_sm;
      case hourly_price_kind::ec2_capacity_block: return "EC2 Capacity Block" + region + no_sm;
      default: break;
    }
    return (price_note.empty() ? std::string("price of unstated kind") : price_note) + no_sm;
  }
  /// Where price_per_hour() comes from, as every output names it: price_label() for a SageMaker price, else the EC2
  /// price's own `price_note` (kind, instance, region), else price_label().
  [[nodiscard]] std::string price_source() const {
    return sagemaker_price_per_hour_usd || price_note.empty() ? price_label() : price_note;
  }
};

/// Edit distance, used for "did you mean" suggestions.
[[nodiscard]] inline std::size_t edit_distance(std::string_view a, std::string_view b) {
  std::vector<std::size_t> row(b.size() + 1);
  for (std::size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (std::size_t i = 1; i <= a.size(); ++i) {
    std::size_t prev = row[0];
    row[0] = i;
    for (std::size_t j = 1; j <= b.size(); ++j) {
      const std::size_t cur = row[j];
      const bool same = std::tolower(static_cast<unsigned char>(a[i - 1])) ==
                        std::tolower(static_cast<unsigned char>(b[j - 1]));
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, prev + (same ? 0 : 1)});
      prev = cur;
    }
  }
  return row[b.size()];
}

/// The closest of `names` to `query`, if one is close enough to suggest.
[[nodiscard]] inline std::optional<std::string> closest_match(std::string_view query,
                                                              const std::vector<std::string>& names) {
  std::optional<std::string> best;
  std::size_t best_d = 0;
  for (const auto& n : names) {
    const std::size_t d = edit_distance(query, n);
    if (!best || d < best_d) { best = n; best_d = d; }
  }
  if (best && best_d <= std::max<std::size_t>(2, query.size() / 3)) return best;
  return std::nullopt;
}

/// GPUs and instances known to the planner. Lookups are case-insensitive and accept aliases
/// ("h200-sxm" for "h200"; "p6-b200.48xlarge" for "ml.p6-b200.48xlarge").
class hardware_catalog {
 public:
  /// Adds or replaces a GPU (by id).
  void put(gpu_spec g) {
    auto it = std::find_if(gpus_.begin(), gpus_.end(), [&](const gpu_spec& x) { return x.id == g.id; });
    if (it != gpus_.end()) *it = std::move(g); else gpus_.push_back(std::move(g));
  }
  /// Adds or replaces an instance (by id).
  void put(instance_spec i) {
    auto it = std::find_if(instances_.begin(), instances_.end(), [&](const instance_spec& x) { return x.id == i.id; });
    if (it != instances_.end()) *it = std::move(i); else instances_.push_back(std::move(i));
  }
  /// Adds an alias for a GPU id.
  void alias(std::string name, std::string gpu_id) { aliases_[lower(std::move(name))] = std::move(gpu_id); }

  [[nodiscard]] const std::vector<gpu_spec>& gpus() const noexcept { return gpus_; }
  [[nodiscard]] const std::vector<instance_spec>& instances() const noexcept { return instances_; }
  /// Alias name (lower case) → GPU id.
  [[nodiscard]] const std::map<std::string, std::string>& aliases() const noexcept { return aliases_; }

  /// The GPU called `name`. Throws invalid_request naming the known GPUs (and the closest one).
  [[nodiscard]] const gpu_spec& gpu(std::string_view name) const {
    std::string key = lower(std::string(name));
    if (auto a = aliases_.find(key); a != aliases_.end()) key = a->second;
    for (const auto& g : gpus_)
      if (lower(g.id) == key) return g;
    std::vector<std::string> names;
    for (const auto& g : gpus_) names.push_back(g.id);
    throw invalid_request(unknown("GPU", name, names));
  }
  /// The instance called `name` (exactly, or with "ml." prefixed). Throws invalid_request when unknown.
  [[nodiscard]] const instance_spec& instance(std::string_view name) const {
    // the exact id first (an instance added with --hardware need not start with "ml."), then with "ml." added
    const std::string key = lower(std::string(name));
    for (const auto& i : instances_)
      if (lower(i.id) == key) return i;
    for (const auto& i : instances_)
      if (lower(i.id) == "ml." + key) return i;
    std::vector<std::string> names;
    for (const auto& i : instances_) names.push_back(i.id);
    throw invalid_request(unknown("instance", name, names));
  }

 private:
  static std::string lower(std::string s) {
    for (auto& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    return s;
  }
  static std::string unknown(std::string_view what, std::string_view name, const std::vector<std::string>& names) {
    std::string msg = "unknown " + std::string(what) + " '" + std::string(name) + "'";
    if (auto m = closest_match(name, names)) msg += " (did you mean '" + *m + "'?)";
    msg += "; known: ";
    for (std::size_t i = 0; i < names.size(); ++i) msg += (i ? ", " : "") + names[i];
    return msg;
  }
  std::vector<gpu_spec> gpus_;
  std::vector<instance_spec> instances_;
  std::map<std::string, std::string> aliases_;
};

}  // namespace bwplan
