// bwplan CLI internals: parameter sweeps (`bwplan sweep`, the report's sweep chart).
// SPDX-License-Identifier: Apache-2.0
#pragma once

#include "cli.hpp"

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace bwplan::cli {

/// One `--vary KEY=VALUES` axis: the key and its values, as written (integers normalised).
struct sweep_axis {
  std::string key;
  std::vector<std::string> values;
};

/// Keys `--vary` accepts: mbs, seq, grad-accum, nodes, ac, ac-every, sharding, loss, master, optimizer-impl.
[[nodiscard]] const std::vector<std::string>& sweep_keys();

/// Parses one `--vary` spec: `KEY=V1,V2,...`, where an integer key also takes ranges: `A..B` (every
/// integer), `A..B:S` (step S) and `A..B:xF` (multiply by F: `1..64:x2` is 1, 2, 4, ..., 64).
/// `ac` takes `none`, `full` or a block interval K (checkpoint every K-th block; 0 = none).
/// Throws invalid_request (message starting with `--vary`) on a malformed spec or unknown key.
[[nodiscard]] sweep_axis parse_vary(const std::string& spec);

/// One evaluated point of a sweep.
struct sweep_point {
  training_config config;
  memory_estimate memory;
  throughput_estimate throughput;
};

/// Number of points the cartesian product of `axes` holds.
[[nodiscard]] std::int64_t sweep_size(const std::vector<sweep_axis>& axes);

/// Evaluates the cartesian product of `axes` over `base` (the first axis outermost, the last varying
/// fastest). `gpus_per_node` scales `nodes`. `on_point(done, total)` is called after each point.
/// Throws invalid_request when the product exceeds 100000 points, a key repeats, or a point is invalid.
[[nodiscard]] std::vector<sweep_point> run_sweep(const model_spec& m, const resolved_target& t,
                                                 const training_config& base, const std::vector<sweep_axis>& axes,
                                                 const std::function<void(std::int64_t, std::int64_t)>& on_point = {});

/// Column names of sweep_csv and of each point in sweep_json.
[[nodiscard]] const std::vector<std::string>& sweep_columns();
/// The cells of one point, as written to CSV (fixed decimals: GiB 4, headroom 4, tokens/s 1, step 6, MFU 4).
[[nodiscard]] std::vector<std::string> sweep_row(const model_spec& m, const resolved_target& t, const sweep_point& p);
/// CSV (RFC 4180, header row first) of `points`.
[[nodiscard]] std::string sweep_csv(const model_spec& m, const resolved_target& t, const std::vector<sweep_point>& points);
/// JSON document: model, hardware, the axes and one flat object per point (the keys of sweep_columns()
/// after model, gpu and instance; numbers unrounded).
[[nodiscard]] nlohmann::ordered_json sweep_json(const model_spec& m, const resolved_target& t,
                                                const std::vector<sweep_axis>& axes,
                                                const std::vector<sweep_point>& points);

/// "none", "full" or "every K": the checkpointing of `c`.
[[nodiscard]] std::string ac_label(const training_config& c);

}  // namespace bwplan::cli
