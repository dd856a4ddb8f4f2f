// bwplan CLI internals: parameter sweeps (`bwplan sweep`, the report's sweep chart).
// SPDX-License-Identifier: Apache-2.0
#pragma once

#include "cli.hpp"

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

namespace bwplan::cli {

/// One `--vary KEY=VALUES` axis: the key and its values, as written (integers normalised).
struct sweep_axis {
  std::string key;
  std::vector<std::string> values;
};

/// Keys `--vary` accepts: mbs, seq, grad-accum, nodes, ac, ac-every, sharding, loss, master, optimizer-impl,
/// precision, tp, cp, ep, instance.
[[nodiscard]] const std::vector<std::string>& sweep_keys();

/// Parses one `--vary` spec: `KEY=V1,V2,...`, where an integer key also takes ranges: `A..B` (every
/// integer), `A..B:S` (step S) and `A..B:xF` (multiply by F: `1..64:x2` is 1, 2, 4, ..., 64).
/// `ac` takes the checkpointing names (none, full, every-K, selective-op, selective-attn) or a block interval K
/// (every K-th block; 0 = none). Throws invalid_request (message starting with `--vary`) on a malformed spec or
/// unknown key.
[[nodiscard]] sweep_axis parse_vary(const std::string& spec);

/// One evaluated point of a sweep: the whole plan, where it runs, and its estimates.
struct sweep_point {
  plan p;                   ///< the plan of this point (resolved: world size, accumulation)
  resolved_target target;   ///< its hardware (the instance may vary)
  training_config config;   ///< = p.training
  memory_estimate memory;
  throughput_estimate throughput;
  /// The error band of this point (context::band: the profile's, else configs/error-bands.json's group of its GPU,
  /// stack and mode); nullopt without bands. Filled by the caller: run_sweep leaves it empty.
  std::optional<error_band> band;
};

/// Number of points the cartesian product of `axes` holds (stops counting past the sweep limit).
[[nodiscard]] std::int64_t sweep_size(const std::vector<sweep_axis>& axes);

/// Evaluates the cartesian product of `axes` over `base` (the first axis outermost, the last varying
/// fastest). Each point is a whole plan checked by the same rules and limits as a plan file
/// (plan_violations); `nodes` and `instance` re-resolve the world size. `on_point(done, total)` is called
/// after each point. Throws invalid_request when the product exceeds 100000 points, a key repeats, or a point
/// is invalid (naming the point).
[[nodiscard]] std::vector<sweep_point> run_sweep(const hardware_catalog& cat, const model_spec& m, const resolved_plan& base,
                                                 const std::vector<sweep_axis>& axes,
                                                 const std::function<void(std::int64_t, std::int64_t)>& on_point = {},
                                                 const calibration_profile* profile = nullptr);

/// Column names of sweep_csv and of each point in sweep_json.
[[nodiscard]] const std::vector<std::string>& sweep_columns();
/// The cells of one point, as written to CSV (fixed decimals: GiB 4, headroom 4, tokens/s 1, step 6, MFU 4). The last
/// four are the band's: the verdict (fits | tight | does not fit: verdict_of; without a band the estimate's own fits |
/// does not fit), the device peak at the band's top (GiB, band_top) and the 90 % range of tokens/s; the last three are
/// empty without a band.
[[nodiscard]] std::vector<std::string> sweep_row(const model_spec& m, const sweep_point& p);
/// CSV (RFC 4180, header row first) of `points`.
[[nodiscard]] std::string sweep_csv(const model_spec& m, const std::vector<sweep_point>& points);
/// JSON document: model, hardware, the axes and one flat object per point (the keys of sweep_columns()
/// after model; numbers unrounded). A point with a band carries `verdict` and `band` as in estimate's JSON
/// (io::add_band_json); one without carries `verdict` only.
[[nodiscard]] nlohmann::ordered_json sweep_json(const model_spec& m, const resolved_target& t,
                                                const std::vector<sweep_axis>& axes,
                                                const std::vector<sweep_point>& points);

}  // namespace bwplan::cli
