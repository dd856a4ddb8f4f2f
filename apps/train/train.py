#!/usr/bin/env python3
"""bwplan reference trainer: runs exactly the plan the planner made, on maintained libraries.

SageMaker script mode starts it under torchrun with the job's hyperparameters as ``--name value``
pairs (docs/training-contract.md); it can also read them from a file::

    torchrun --nproc_per_node 8 train.py --model meta-llama/Llama-3.1-8B --gpus 8 --contract_version 1 ...
    python3 train.py --dry-run --hyperparameters hp.json     # resolved plan + library calls, no torch
    torchrun --nproc_per_node 1 train.py --probe probe-plans.json   # one measurement record per plan

Trainer options (not hyperparameters) are listed by ``--help``; everything else on the command line
is a hyperparameter checked against the training contract (contract.py). torch, transformers and
torchao are imported only when training runs, so ``--help`` and ``--dry-run`` work without them.
Exit status: 0 done, 2 bad hyperparameters or a plan the trainer refuses (one line naming the field).
"""

from __future__ import annotations

import argparse
import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import contract as C  # noqa: E402
from bwtrain import calls as calls_mod  # noqa: E402
from bwtrain import runtime  # noqa: E402


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(
        allow_abbrev=False,
        prog="train.py", description="bwplan reference trainer: trains one plan given as SageMaker hyperparameters.",
        epilog="Any other --name value pair is a hyperparameter of the training contract (configs/training-contract.json).")
    ap.add_argument("--hyperparameters", metavar="FILE", help="JSON object of hyperparameters (default: the --name value pairs, "
                    "else /opt/ml/input/config/hyperparameters.json)")
    ap.add_argument("--contract", metavar="FILE", help="training-contract.json (default: next to train.py)")
    ap.add_argument("--output-dir", default=os.environ.get("SM_OUTPUT_DATA_DIR", "/opt/ml/output/data"),
                    help="where measurements.jsonl goes (default: $SM_OUTPUT_DATA_DIR or /opt/ml/output/data)")
    ap.add_argument("--dry-run", action="store_true", help="print the resolved plan, its layout, refusals and the library calls; no torch")
    ap.add_argument("--probe", metavar="FILE", help="JSON list of plans (plan-file keys); run each for a few steps, one record each")
    ap.add_argument("--allow-gpu-mismatch", action="store_true", help="run although the GPU is not the plan's gpu")
    return ap


def hyperparameters(a, rest):
    """The job's hyperparameter strings: --hyperparameters FILE, else the --name value pairs, else SageMaker's
    hyperparameters.json; None when there are none."""
    if a.hyperparameters:
        return C.read_hyperparameters_file(a.hyperparameters)
    if rest:
        return C.argv_pairs(rest)
    if os.path.isfile(C.HYPERPARAMETERS_FILE):
        return C.read_hyperparameters_file(C.HYPERPARAMETERS_FILE)
    return None


def read_plan(a, rest, contract):
    rc = C.read_resource_config()
    hps = hyperparameters(a, rest)
    if hps is None:
        raise C.ContractError("no hyperparameters: pass --name value pairs or --hyperparameters FILE")
    return C.parse_hyperparameters(hps, contract, rc)


def probe_source(value: str):
    """The probe plans ``--probe`` names: a JSON list given inline, or a file; a relative file is
    looked up in the working directory, then next to train.py (the job's source dir, where
    ``bwplan sagemaker --probe --source-dir`` writes probe.json). SageMaker passes the SDK's
    JSON-encoded hyperparameter value, so one pair of surrounding double quotes is removed."""
    v = value.strip()
    if len(v) >= 2 and v[0] == v[-1] == '"':
        v = json.loads(v)
    if v.lstrip().startswith(("[", "{")):
        try:
            return json.loads(v)
        except json.JSONDecodeError as e:
            raise C.ContractError(f"--probe: the inline plans are not JSON ({e})") from None
    path = v if os.path.isabs(v) or os.path.isfile(v) else os.path.join(HERE, v)
    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    except FileNotFoundError:
        raise C.ContractError(f"--probe {v}: no such file (looked in the working directory and {HERE})") from None
    except json.JSONDecodeError as e:
        raise C.ContractError(f"--probe {v}: not JSON ({e})") from None


def request_settings(a, rest, contract):
    """What a probe job's request says beside the probe file: the contract's settings outside the plan (kind
    "contract": seed, data, model_init, measure_warmup, measure_steps, learning_rate, …; not max_steps, which each
    probe plan takes from its measured window) and the plan's ``gpu``
    that its hyperparameters name, decoded as every hyperparameter is. They apply to each probe plan that does not
    set its own (a review found them ignored: the request said seed 3, measure_steps 10 and the train channel, the
    probe ran seed 0, 3 steps, synthetic data, and skipped the GPU check). {} without hyperparameters."""
    hps = hyperparameters(a, rest)
    if hps is None:
        return {}
    out = {}
    for name, f in C.field_by_hyperparameter(contract).items():
        # max_steps is the probe's own, its measured window (a review: a request's max_steps from --train-tokens ran
        # every probe plan 9,537 steps)
        if name not in hps or f["key"] in ("contract_version", "max_steps") or (f.get("kind") != "contract" and f["key"] != "gpu"):
            continue
        if not isinstance(hps[name], str) or C.is_null(hps[name]):
            continue
        out[f["key"]] = C.check_range(f, C.decode_value(f, hps[name]))
    return out


def read_probe(path: str, contract, settings=None):
    """Probe plans: plan-file style dicts, over the request's ``settings`` (request_settings); gpus defaults to
    WORLD_SIZE, data to synthetic, checkpointing off, max_steps to the measured window."""
    raw = probe_source(path)
    items = raw.get("plans", raw) if isinstance(raw, dict) else raw
    plans = []
    for i, d in enumerate(items):
        d = {**(settings or {}), **dict(d)}
        d.setdefault("gpus", runtime.world_size())
        d.setdefault("data", "synthetic")
        d.setdefault("model_init", "random")
        d.setdefault("checkpoint_dir", "none")
        d.setdefault("max_steps", d.get("measure_warmup", 2) + d.get("measure_steps", 3))
        try:
            plans.append(C.plan_from_dict(d, contract))
        except C.ContractError as e:
            raise C.ContractError(f"probe plan {i + 1}: {e}") from None
    return plans


def refuse_static(plan, contract) -> None:
    for rid, field, reason in C.static_refusals(plan, contract):
        raise C.ContractError(f"refused: {field}={plan[field]} ({rid}): {reason}")


def main(argv=None) -> int:
    a, rest = parser().parse_known_args(argv)
    try:
        contract = C.load_contract(a.contract)
        if a.probe:
            plans = read_probe(a.probe, contract, request_settings(a, rest, contract))
        else:
            plans = [read_plan(a, rest, contract)]
        if a.dry_run:
            for plan in plans:
                refusals = C.static_refusals(plan, contract)
                print(json.dumps({"plan": plan, "layout": C.layout(plan, runtime.local_world_size()),
                                  "refusals": [{"id": r, "field": f, "reason": why} for r, f, why in refusals],
                                  "calls": calls_mod.describe(plan, runtime.local_world_size())}, indent=2))
            if not a.probe and C.static_refusals(plans[0], contract):
                refuse_static(plans[0], contract)
            return 0
        if not a.probe:
            refuse_static(plans[0], contract)
        # the caching allocator's setting, before torch initialises CUDA (one setting per process)
        settings = {bool(p["expandable_segments"]) for p in plans}
        if len(settings) > 1:
            raise C.ContractError("expandable_segments: the probe's plans differ; the allocator setting is one per process")
        try:
            conf = runtime.allocator_conf(settings.pop())
        except ValueError as e:
            raise C.ContractError(f"expandable_segments: {e}")
        if conf is not None:
            os.environ[runtime.allocator_conf_var()] = conf  # (the name torch reads: PYTORCH_ALLOC_CONF first)
    except C.ContractError as e:
        print(f"train.py: error: {e}", file=sys.stderr)
        return 2

    from bwtrain import engine  # torch from here on
    from bwtrain.model import Refusal

    a.script_dir = HERE
    try:
        if a.probe:
            engine.probe(plans, contract, a)
        else:
            engine.run(plans[0], contract, a)
    except Refusal as e:
        print(f"train.py: error: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
