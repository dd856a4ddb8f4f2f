#!/usr/bin/env python3
"""Error bands from the public validation: configs/public-error-bands.json.

Usage:
  tools/public_bands.py BWPLAN                     print the band file (JSON)
  tools/public_bands.py BWPLAN --write FILE        write it
  tools/public_bands.py BWPLAN --check FILE        exit 1 when FILE differs from a fresh run

The bundled bands of configs/error-bands.json come from the H200 harness rows (`bwplan calibrate --bands-only`);
every other GPU and stack fell back to them, which says how the model does where it was fitted, not how it carries
to other hardware. This file adds the residuals of the public evidence, computed exactly as the validation tables
compute them (docs/calibration.md#bands):

- tokens/s: the checked set of tools/public_runs.py (hardware stated by the source, a stack bwplan models): the
  row's `bwplan estimate` arguments, |measured / estimate - 1| of tokens/s per GPU;
- peak reserved: the cases of tests/data/stack-memory.json whose metric is torch.cuda.max_memory_reserved
  (torchtitan prints it), except those marked `"modelled": false` (a setting bwplan does not model); misses stay in.

Rows are grouped by the estimate's GPU, stack and band mode (single | fsdp | multi, bwplan::band_mode), each
quantity's band is the nearest-rank 0.9 quantile of its group's residuals, or, for a group without rows of that
quantity, the quantile pooled over all public rows of it (the fallback, also written). bwplan reads this file beside
configs/error-bands.json (context::bands, merge_error_bands): the harness groups first, then these, and the wider of
the two fallbacks. Exit 77 (ctest's skip code) when ../shared/groundtruth/public is absent. Standard library only.
"""
import argparse
import hashlib
import json
import math
import os
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import public_runs  # noqa: E402  (the row mapping: one source for the table and the bands)

ROOT = public_runs.ROOT
MEMORY_CASES = os.path.join("tests", "data", "stack-memory.json")
QUANTILE = 0.9
GIB = float(1 << 30)


def nearest_rank(values, q=QUANTILE):
    """The ceil(q*n)-th smallest value (bwplan::nearest_rank_quantile); 0 for none."""
    if not values:
        return 0.0
    v = sorted(values)
    k = min(max(int(math.ceil(q * len(v) - 1e-9)), 1), len(v))
    return v[k - 1]


def band_mode(config):
    """bwplan::band_mode of an estimate's config: fsdp (sharded), multi (more than one GPU, unsharded), single."""
    if config["sharding"] not in ("none", "optimizer"):
        return "fsdp"
    return "multi" if config["world_size"] > 1 else "single"


def estimate_json(bwplan, args):
    out = subprocess.run([bwplan, *args, "--format", "json"], capture_output=True, text=True, cwd=ROOT)
    if out.returncode != 0:
        raise SystemExit(f"public_bands: bwplan {' '.join(args)} failed: {out.stderr.strip()}")
    return json.loads(out.stdout)


def key_of(est):
    return (est["hardware"]["gpu"], est["config"]["stack"], band_mode(est["config"]))


def sha256(path):
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def residuals(bwplan, runs_path):
    """(key, quantity, |measured / estimate - 1|) of every public row that enters the bands."""
    out = []
    with open(runs_path) as f:
        rows = [json.loads(l) for l in f if l.strip()]
    n_tps = 0
    for r in rows:
        args, notes = public_runs.mapping(r)
        if args is None or any(n.startswith(public_runs.UNSTATED) or n.startswith("stack not modelled") for n in notes):
            continue
        est = estimate_json(bwplan, public_runs.command(args))
        e = est["throughput"]["tokens_per_s_per_gpu"]
        out.append((key_of(est), "tokens_per_s", abs(r["measured"]["tokens_per_s_per_gpu"] / e - 1)))
        n_tps += 1
    with open(os.path.join(ROOT, MEMORY_CASES)) as f:
        cases = json.load(f)["cases"]
    n_mem = 0
    for c in cases:
        if c["metric"] != "peak_reserved" or c.get("modelled", True) is False:
            continue
        est = estimate_json(bwplan, public_runs.command(c["args"]))
        e = est["memory"]["peak_reserved_bytes"]
        out.append((key_of(est), "memory", abs(c["measured_gib"] * GIB / e - 1)))
        n_mem += 1
    return out, len(rows), n_tps, n_mem


def bands(bwplan, runs_path):
    res, n_rows, n_tps, n_mem = residuals(bwplan, runs_path)
    pooled = {q: nearest_rank([v for _, qq, v in res if qq == q]) for q in ("memory", "tokens_per_s")}
    groups = {}
    for key, q, v in res:
        groups.setdefault(key, {"memory": [], "tokens_per_s": []})[q].append(v)
    out_groups = []
    for (gpu, stack, mode), g in groups.items():
        out_groups.append({
            "gpu": gpu, "stack": stack, "mode": mode, "rows": len(g["memory"]) + len(g["tokens_per_s"]),
            "memory": nearest_rank(g["memory"]) if g["memory"] else pooled["memory"],
            "tokens_per_s": nearest_rank(g["tokens_per_s"]) if g["tokens_per_s"] else pooled["tokens_per_s"],
            "memory_rows": len(g["memory"]), "tokens_per_s_rows": len(g["tokens_per_s"]),
        })
    return {
        "bwplan_error_bands": 1,
        "generated_by": "tools/public_bands.py build/bwplan --write configs/public-error-bands.json",
        "about": "relative half-widths from the public validation (docs/validation.md#public-runs, #stacks-public-memory): "
                 "the quantile of |measured / estimate - 1| of tokens/s per GPU (the public runs' checked set) and of peak "
                 "reserved (the torchtitan max_memory_reserved cases) per GPU / stack / mode; a group without rows of a "
                 "quantity takes the fallback's (docs/calibration.md#bands)",
        "inputs": [
            {"file": "public-runs.jsonl", "sha256": sha256(runs_path), "rows": n_tps},
            {"file": MEMORY_CASES, "sha256": sha256(os.path.join(ROOT, MEMORY_CASES)), "rows": n_mem},
        ],
        "quantile": QUANTILE,
        "groups": out_groups,
        "fallback": {"gpu": "*", "stack": "*", "mode": "*", "rows": len(res), "memory": pooled["memory"],
                     "tokens_per_s": pooled["tokens_per_s"], "memory_rows": n_mem, "tokens_per_s_rows": n_tps},
    }


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("bwplan")
    g = ap.add_mutually_exclusive_group()
    g.add_argument("--write", metavar="FILE")
    g.add_argument("--check", metavar="FILE")
    a = ap.parse_args()
    runs_path = os.path.join(public_runs.shared_dir(), "groundtruth", "public", "public-runs.jsonl")
    if not os.path.exists(runs_path):
        print(f"SKIP: {runs_path} not found (the public runs live in ../shared; set BWPLAN_SHARED_DIR)")
        return 77
    text = json.dumps(bands(os.path.abspath(a.bwplan), runs_path), indent=2) + "\n"
    if a.check:
        with open(a.check) as f:
            if f.read() != text:
                print(f"{a.check} is stale; regenerate with tools/public_bands.py BWPLAN --write {a.check}")
                return 1
        print(f"{a.check}: current")
    elif a.write:
        with open(a.write, "w") as f:
            f.write(text)
        print(f"wrote {a.write}", file=sys.stderr)
    else:
        sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
