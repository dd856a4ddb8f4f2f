#!/usr/bin/env python3
"""The bwplan training contract: SageMaker hyperparameters <-> plan (standard library only).

``configs/training-contract.json`` (a copy travels next to this file in the SageMaker source dir)
lists every plan field with its hyperparameter name, type, unit, allowed values and default. This
module reads hyperparameters the way a SageMaker training script receives them, checks them
against that contract and returns the plan, keyed by plan-file keys; ``plan_to_hyperparameters``
is the inverse. It imports no torch, so it runs anywhere (tests, ``train.py --dry-run``, a C++
test comparing the plan field by field)::

    python3 apps/train/contract.py --hyperparameters hp.json      # plan JSON on stdout
    python3 apps/train/contract.py -- --model Llama-3.2-1B --gpus 8 ...

How values arrive (``shared/reference/sagemaker-run.md`` section 2.1, from the
sagemaker-training-toolkit ``mapping.py`` and the SDK v3 ``torchrun_driver.py``):

* argv ``--key value`` pairs, every value a string; booleans ``True``/``False`` (SDK v2 toolkit)
  or ``true``/``false`` (SDK v3 ModelTrainer); ``None`` as ``""`` (v2) or ``null`` (v3);
* ``/opt/ml/input/config/hyperparameters.json``: the CreateTrainingJob ``HyperParameters`` map,
  where SDK v2 stores ``json.dumps(value)`` (strings quoted, ``"\\"abc\\""``) and v3 stores strings
  unquoted; keys starting with ``sagemaker_`` are the SDK's own and are skipped.

Errors are :class:`ContractError`, one line naming the hyperparameter.
"""

from __future__ import annotations

import json
import math
import os
import re
import sys
from typing import Any, Dict, Iterable, List, Mapping, Optional, Tuple

CONTRACT_FILE = "training-contract.json"
HYPERPARAMETERS_FILE = "/opt/ml/input/config/hyperparameters.json"
RESOURCE_CONFIG_FILE = "/opt/ml/input/config/resourceconfig.json"
SUPPORTED_CONTRACT_VERSION = 1


class ContractError(ValueError):
    """A hyperparameter or plan value the contract rejects; the message is one line."""


# ---------------------------------------------------------------------------------------------
# Loading the contract


def contract_path(explicit: Optional[str] = None) -> str:
    """Where the contract JSON is: ``explicit``, ``$BWPLAN_CONTRACT``, next to this file (the
    SageMaker source dir), or ``configs/`` of a repository checkout."""
    here = os.path.dirname(os.path.abspath(__file__))
    candidates = [explicit, os.environ.get("BWPLAN_CONTRACT"), os.path.join(here, CONTRACT_FILE),
                  os.path.join(here, "..", "..", "configs", CONTRACT_FILE)]
    for c in candidates:
        if c and os.path.isfile(c):
            return c
    if explicit:
        raise ContractError(f"contract file not found: {explicit}")
    raise ContractError(f"{CONTRACT_FILE} not found next to {__file__} nor in configs/; pass --contract")


def load_contract(path: Optional[str] = None) -> Dict[str, Any]:
    """Read and sanity-check the contract JSON (see its ``schema`` member)."""
    p = contract_path(path)
    with open(p, encoding="utf-8") as f:
        c = json.load(f)
    if c.get("contract_version") != SUPPORTED_CONTRACT_VERSION:
        raise ContractError(f"{p}: contract_version {c.get('contract_version')!r}, this parser knows {SUPPORTED_CONTRACT_VERSION}")
    keys = [f["key"] for f in c["fields"]]
    if len(set(keys)) != len(keys):
        raise ContractError(f"{p}: duplicate field keys")
    c["_path"] = p
    return c


def fields(contract: Mapping[str, Any]) -> List[Dict[str, Any]]:
    return list(contract["fields"])


def field_by_key(contract: Mapping[str, Any]) -> Dict[str, Dict[str, Any]]:
    return {f["key"]: f for f in contract["fields"]}


def field_by_hyperparameter(contract: Mapping[str, Any]) -> Dict[str, Dict[str, Any]]:
    return {f["hyperparameter"]: f for f in contract["fields"] if f.get("hyperparameter")}


# ---------------------------------------------------------------------------------------------
# Reading hyperparameters


def argv_pairs(argv: Iterable[str]) -> Dict[str, str]:
    """``--key value`` / ``--key=value`` / ``-k value`` pairs as the SageMaker toolkits pass them
    (one-character keys get a single dash in SDK v2, ``mapping.py`` ``to_cmd_args``)."""
    out: Dict[str, str] = {}
    args = list(argv)
    i = 0
    while i < len(args):
        a = args[i]
        if not a.startswith("-") or a in ("-", "--"):
            raise ContractError(f"unexpected argument {a!r}: hyperparameters come as --name value pairs")
        name = a.lstrip("-")
        if "=" in name:
            name, value = name.split("=", 1)
            i += 1
        else:
            if i + 1 >= len(args):
                raise ContractError(f"hyperparameter '{name}': no value after {a}")
            value = args[i + 1]
            i += 2
        if not name:
            raise ContractError(f"unexpected argument {a!r}")
        out[name] = value
    return out


def read_hyperparameters_file(path: str) -> Dict[str, str]:
    """A JSON object of hyperparameters (the SageMaker file, or one written by hand). Non-string
    values (a hand-written file) are turned into strings the way SDK v3 sends them."""
    with open(path, encoding="utf-8") as f:
        raw = json.load(f)
    if not isinstance(raw, dict):
        raise ContractError(f"{path}: expected a JSON object of hyperparameters")
    out: Dict[str, str] = {}
    for k, v in raw.items():
        if isinstance(v, str):
            out[str(k)] = v
        elif isinstance(v, bool):
            out[str(k)] = "true" if v else "false"
        elif v is None:
            out[str(k)] = "null"
        else:
            out[str(k)] = json.dumps(v)
    return out


def read_resource_config(path: str = RESOURCE_CONFIG_FILE) -> Optional[Dict[str, Any]]:
    """``/opt/ml/input/config/resourceconfig.json`` (current_host, hosts, current_instance_type),
    or the same facts from SM_* environment variables, or None outside SageMaker."""
    if os.path.isfile(path):
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    hosts = os.environ.get("SM_HOSTS")
    itype = os.environ.get("SM_CURRENT_INSTANCE_TYPE")
    if hosts or itype:
        rc: Dict[str, Any] = {}
        if hosts:
            rc["hosts"] = json.loads(hosts)
        if itype:
            rc["current_instance_type"] = itype
        return rc
    return None


# ---------------------------------------------------------------------------------------------
# Decoding one value


def _unquote(raw: str) -> str:
    """SDK v2 writes json.dumps(value) into the HyperParameters map: strip one level of JSON
    string quoting when the value is a JSON string literal."""
    s = raw.strip()
    if len(s) >= 2 and s[0] == '"' and s[-1] == '"':
        try:
            v = json.loads(s)
        except json.JSONDecodeError:
            return raw
        if isinstance(v, str):
            return v
    return raw


def _what(f: Mapping[str, Any]) -> str:
    unit = f" ({f['unit']})" if f.get("unit") else ""
    t = f["type"]
    if t == "enum":
        vals = list(f.get("values", [])) + [p["example"] for p in f.get("patterns", [])]
        return "one of " + ", ".join(str(v) for v in vals)
    return {"int": "an integer", "float": "a number", "bool": "true or false", "string": "a string"}[t] + unit


def _err(f: Mapping[str, Any], msg: str) -> ContractError:
    name = f.get("hyperparameter") or f["key"]
    return ContractError(f"hyperparameter '{name}': {msg}")


def is_null(raw: Optional[str]) -> bool:
    return raw is None or raw.strip() in ("", "null", "None")


def decode_value(f: Mapping[str, Any], raw: str) -> Any:
    """One hyperparameter string -> typed value, checked against the field's range/values."""
    s = _unquote(raw).strip()
    t = f["type"]
    if t == "bool":
        low = s.lower()
        if low not in ("true", "false"):
            raise _err(f, f"expected true or false (True/False), got {raw!r}")
        v: Any = low == "true"
    elif t == "int":
        if not re.fullmatch(r"[+-]?[0-9]+", s):
            raise _err(f, f"expected {_what(f)}, got {raw!r}")
        v = int(s)
    elif t == "float":
        # decimal notation only, as bwplan reads it (include/bwplan/io/contract.hpp decode_hyperparameter): float()
        # alone also takes digit separators ("1_0"), which bwplan refuses
        if not re.fullmatch(r"[+-]?([0-9]+(\.[0-9]*)?|\.[0-9]+)([eE][+-]?[0-9]+)?|[+-]?(inf|infinity|nan)", s, re.IGNORECASE):
            raise _err(f, f"expected {_what(f)}, got {raw!r}")
        try:
            v = float(s)
        except ValueError:
            raise _err(f, f"expected {_what(f)}, got {raw!r}") from None
        if not math.isfinite(v):
            raise _err(f, f"expected a finite number, got {raw!r}")
    elif t == "enum":
        v = s
        if v not in f.get("values", []) and not any(re.fullmatch(p["pattern"], v) for p in f.get("patterns", [])):
            raise _err(f, f"expected {_what(f)}, got {raw!r}")
    elif t == "string":
        v = s
        if f.get("pattern") and not re.fullmatch(f["pattern"], v):
            raise _err(f, f"{raw!r} does not match {f['pattern']}")
    else:  # pragma: no cover - the contract test keeps types closed
        raise _err(f, f"unknown type {t!r} in the contract")
    return check_range(f, v)


def check_range(f: Mapping[str, Any], v: Any) -> Any:
    if f["type"] in ("int", "float"):
        if "minimum" in f and v < f["minimum"]:
            raise _err(f, f"{v} is below the minimum {f['minimum']}")
        if "maximum" in f and v > f["maximum"]:
            raise _err(f, f"{v} is above the maximum {f['maximum']}")
        if "exclusive_minimum" in f and v <= f["exclusive_minimum"]:
            raise _err(f, f"{v} must be above {f['exclusive_minimum']}")
        if "exclusive_maximum" in f and v >= f["exclusive_maximum"]:
            raise _err(f, f"{v} must be below {f['exclusive_maximum']}")
    return v


def encode_value(f: Mapping[str, Any], v: Any, style: str = "v3") -> str:
    """Typed value -> hyperparameter string. ``style``: ``v3`` (ModelTrainer argv: strings raw,
    booleans true/false), ``v2`` (toolkit argv: booleans True/False), ``v2-json`` (the
    CreateTrainingJob map as SDK v2 writes it: json.dumps of every value)."""
    if style == "v2-json":
        return json.dumps(v)
    if f["type"] == "bool":
        if style == "v2":
            return "True" if v else "False"
        return "true" if v else "false"
    if f["type"] == "float":
        return repr(float(v))
    return str(v)


# ---------------------------------------------------------------------------------------------
# bf16_layers and the derived layout


def parse_bf16_layers(text: str, layers: int) -> List[int]:
    """Indices of the decoder blocks kept bf16: none, first:N, last:N, first:N,last:M, or a
    fraction f = the last ceil(f x layers) blocks (torchtitan's NVFP4 recipe: 0.15 of 32 -> 27-31)."""
    text = text.strip()
    if text in ("none", ""):
        return []
    keep = set()
    m = (re.fullmatch(r"first:([0-9]+)()", text) or re.fullmatch(r"()last:([0-9]+)", text)
         or re.fullmatch(r"first:([0-9]+),last:([0-9]+)", text))
    if m:
        first = int(m.group(1) or 0)
        last = int(m.group(2) or 0)
        keep.update(range(min(first, layers)))
        keep.update(range(max(0, layers - last), layers))
        return sorted(keep)
    try:
        frac = float(text)
    except ValueError:
        raise ContractError(f"hyperparameter 'bf16_layers': cannot parse {text!r}") from None
    if not 0.0 <= frac <= 1.0:
        raise ContractError(f"hyperparameter 'bf16_layers': fraction {frac} is outside [0, 1]")
    n = math.ceil(frac * layers - 1e-9)
    return list(range(layers - n, layers))


def layout(plan: Mapping[str, Any], local_world_size: Optional[int] = None) -> Dict[str, int]:
    """Mesh sizes the plan implies (torchtitan ParallelDims style): dp = gpus / (tp cp pp);
    FSDP shards over dp_shard x cp; hybrid replicates over dp_replicate groups of shard_group GPUs."""
    gpus, tp, cp, pp = plan["gpus"], plan["tp"], plan["cp"], plan["pp"]
    dp = gpus // (tp * cp * pp)
    out = {"dp": dp, "dp_cp": dp * cp, "tp": tp, "cp": cp, "pp": pp}
    sharding = plan["sharding"]
    if sharding == "none":
        out.update(dp_replicate=dp, dp_shard=1)
    elif sharding == "hybrid":
        g = plan.get("shard_group")
        if g is None:
            g = max(1, (local_world_size or gpus) // tp)
        out.update(dp_replicate=gpus // (tp * g), dp_shard=g // cp, shard_group=g)
    else:
        out.update(dp_replicate=1, dp_shard=dp)
    return out


# ---------------------------------------------------------------------------------------------
# Hyperparameters -> plan


def _apply_rules(plan: Dict[str, Any]) -> None:
    """The cross-field rules of the contract (``rules`` in the JSON)."""
    gpus, tp, cp, pp = plan["gpus"], plan["tp"], plan["cp"], plan["pp"]
    if gpus % (tp * cp * pp):
        raise ContractError(f"hyperparameter 'gpus': {gpus} is not a multiple of tp x cp x pp = {tp * cp * pp} (rule R-world)")
    dp = gpus // (tp * cp * pp)
    mbs = plan["micro_batch_size"]
    gbs, ga = plan.get("global_batch_size"), plan.get("grad_accum")
    if gbs is None and ga is None:
        ga = 1
    if gbs is None:
        gbs = mbs * dp * ga
    elif ga is None:
        if gbs % (mbs * dp):
            raise ContractError(f"hyperparameter 'global_batch_size': {gbs} is not a multiple of micro_batch_size x dp = {mbs} x {dp} (rule R-batch)")
        ga = gbs // (mbs * dp)
    elif gbs != mbs * dp * ga:
        raise ContractError(f"hyperparameter 'global_batch_size': {gbs} != micro_batch_size x dp x grad_accum = {mbs} x {dp} x {ga} (rule R-batch)")
    plan["global_batch_size"], plan["grad_accum"] = gbs, ga
    sched, vpp = plan.get("pp_schedule") or "1f1b", plan.get("vpp") or 1
    if vpp > 1 and sched != "interleaved":
        raise ContractError(f"hyperparameter 'vpp': {vpp} virtual stages need pp_schedule interleaved (rule R-pipeline)")
    if sched == "interleaved" and (pp < 2 or vpp < 2 or ga % pp):
        raise ContractError(f"hyperparameter 'pp_schedule': interleaved needs pp >= 2, vpp >= 2 and grad_accum a multiple of pp, "
                            f"got pp {pp}, vpp {vpp}, grad_accum {ga} (rule R-pipeline)")
    if plan.get("sharding") is None:
        plan["sharding"] = "full" if gpus > 1 else "none"
    if plan["sharding"] == "hybrid" and plan.get("shard_group") is not None:
        g = plan["shard_group"]
        if (gpus // tp) % g:
            raise ContractError(f"hyperparameter 'shard_group': {g} does not divide gpus / tp = {gpus // tp} (rule R-hybrid)")
        if g % cp:
            raise ContractError(f"hyperparameter 'shard_group': {g} is not a multiple of cp = {cp} (rule R-hybrid)")
    if cp > 1 and plan["seq_len"] % (2 * cp * tp):
        raise ContractError(f"hyperparameter 'seq_len': {plan['seq_len']} is not a multiple of tp x 2 x cp = {2 * cp * tp} (rule R-cp-seq)")
    if plan["fp8_all_gather"]:
        if plan["precision"] != "fp8":
            raise ContractError(f"hyperparameter 'fp8_all_gather': needs precision fp8 (tensorwise), got {plan['precision']} (rule R-fp8-all-gather)")
        # sharding full only, as bwplan's plan rules (training.hpp violations, BWP010): the estimate prices the FP8
        # gather of full sharding alone, so a hybrid or grad-op request would run a plan nobody estimated
        if plan["sharding"] != "full":
            raise ContractError(f"hyperparameter 'fp8_all_gather': needs sharding full, got sharding {plan['sharding']} (rule R-fp8-all-gather)")
    if plan.get("bf16_layers") is None:
        plan["bf16_layers"] = "0.15" if plan["precision"] == "nvfp4" else "none"
    parse_bf16_layers(plan["bf16_layers"], 1000)  # syntax check (rule R-bf16-layers)


def parse_hyperparameters(hps: Mapping[str, str], contract: Optional[Mapping[str, Any]] = None,
                          resource_config: Optional[Mapping[str, Any]] = None) -> Dict[str, Any]:
    """Hyperparameter strings -> plan dict (plan keys and contract keys, in contract order).

    ``instance`` and ``nodes`` come from ``resource_config`` (resourceconfig.json), never from
    hyperparameters; without one they are absent. ``headroom`` (planning only) is never present.
    """
    contract = contract or load_contract()
    by_hp = field_by_hyperparameter(contract)
    ignored = tuple(contract["hyperparameter_encoding"]["ignored_prefixes"])
    values: Dict[str, Any] = {}
    for name, raw in hps.items():
        if name.startswith(ignored):
            continue
        f = by_hp.get(name)
        if f is None:
            known = field_by_key(contract).get(name)
            if known is not None and known.get("hyperparameter") is None:
                where = {"resource-config": "it comes from the SageMaker ResourceConfig",
                         "planning-only": "it is planning-only and not sent to the trainer"}[known["source"]]
                raise ContractError(f"hyperparameter '{name}': not accepted, {where}")
            raise ContractError(f"hyperparameter '{name}': unknown (not in training contract version {contract['contract_version']})")
        if not isinstance(raw, str):
            raise ContractError(f"hyperparameter '{name}': SageMaker hyperparameter values are strings, got {type(raw).__name__}")
        if is_null(raw):
            continue
        values[f["key"]] = decode_value(f, raw)
    plan: Dict[str, Any] = {}
    for f in contract["fields"]:
        if f.get("hyperparameter") is None:
            continue
        k = f["key"]
        if k in values:
            plan[k] = values[k]
        elif f.get("required"):
            raise _err(f, f"required ({_what(f)})")
        elif f.get("default_rule"):
            plan[k] = None  # filled in by _apply_rules
        else:
            plan[k] = f.get("default")
    if plan["contract_version"] != SUPPORTED_CONTRACT_VERSION:
        raise ContractError(f"hyperparameter 'contract_version': {plan['contract_version']}, this trainer knows {SUPPORTED_CONTRACT_VERSION}")
    _apply_rules(plan)
    if resource_config:
        fk = field_by_key(contract)
        if resource_config.get("current_instance_type"):
            plan["instance"] = decode_value(fk["instance"], str(resource_config["current_instance_type"]))
        if resource_config.get("hosts"):
            plan["nodes"] = check_range(fk["nodes"], len(resource_config["hosts"]))
    order = [f["key"] for f in contract["fields"]]
    return {k: plan[k] for k in order if k in plan}


def instance_gpus(instance: str, nodes: int, contract: Mapping[str, Any]) -> Tuple[int, str]:
    """GPUs of ``nodes`` instances of type ``instance`` and their GPU id, from bwplan's hardware catalog
    (configs/hardware/catalog.json, found beside the contract: ``configs/`` holds both when installed, the
    repository keeps the contract in apps/train). Raises ContractError when no catalog or instance is found."""
    here = os.path.dirname(os.path.abspath(contract.get("_path") or __file__))
    for cand in (os.path.join(here, "hardware", "catalog.json"), os.path.join(here, "..", "hardware", "catalog.json"),
                 os.path.join(here, "..", "..", "configs", "hardware", "catalog.json")):
        if os.path.isfile(cand):
            with open(cand, encoding="utf-8") as f:
                cat = json.load(f)
            key = instance.lower()
            for i in cat.get("instances", []):
                if i["id"].lower() in (key, "ml." + key):
                    return nodes * int(i["gpus_per_node"]), i["gpu"]
            raise ContractError(f"plan key 'instance': {instance!r} is not an instance of {cand}")
    raise ContractError("plan key 'gpus': required (the plan names an instance, and no hardware catalog was found beside "
                        "the contract to count its GPUs)")


def plan_from_dict(d: Mapping[str, Any], contract: Optional[Mapping[str, Any]] = None) -> Dict[str, Any]:
    """A plan written as typed JSON (a plan file, a --probe entry) -> the parsed plan, by going
    through the hyperparameter encoding (so both paths share one validator). Planning-only and
    resource-config keys are dropped; ``ac_every`` of plan schema 1 becomes every-K."""
    contract = contract or load_contract()
    fk = field_by_key(contract)
    d = dict(d)
    ac_every = d.pop("ac_every", None)
    if ac_every is not None and d.get("activation_checkpointing", "none") == "full" and int(ac_every) > 1:
        d["activation_checkpointing"] = f"every-{int(ac_every)}"
    d.setdefault("contract_version", contract["contract_version"])
    if d.get("gpus") is None and d.get("instance"):  # bwplan leaves gpus out of an instance plan: nodes x its GPUs
        d["gpus"], gpu = instance_gpus(str(d["instance"]), int(d.get("nodes") or 1), contract)
        if d.get("gpu") is None:
            d["gpu"] = gpu
    hps: Dict[str, str] = {}
    for k, v in d.items():
        if k in ("$schema", "schema_version", "name", "check"):
            continue
        f = fk.get(k)
        if f is None:
            raise ContractError(f"plan key '{k}': unknown (not in training contract version {contract['contract_version']})")
        if f.get("hyperparameter") is None or v is None:
            continue
        hps[f["hyperparameter"]] = encode_value(f, v)
    rc = {}
    if d.get("instance"):
        rc["current_instance_type"] = d["instance"]
    if d.get("nodes"):
        rc["hosts"] = [f"algo-{i + 1}" for i in range(int(d["nodes"]))]
    return parse_hyperparameters(hps, contract, rc or None)


# ---------------------------------------------------------------------------------------------
# Plan -> hyperparameters


def plan_to_hyperparameters(plan: Mapping[str, Any], style: str = "v3",
                            contract: Optional[Mapping[str, Any]] = None) -> Dict[str, str]:
    """The inverse of :func:`parse_hyperparameters`: the HyperParameters a job needs for ``plan``
    (string values; see :func:`encode_value` for ``style``). Keys whose value is None and fields
    that are not hyperparameters (instance, nodes, headroom) are left out."""
    contract = contract or load_contract()
    out: Dict[str, str] = {}
    for f in contract["fields"]:
        hp = f.get("hyperparameter")
        if hp is None:
            continue
        v = plan.get(f["key"])
        if v is None and f["key"] == "contract_version":
            v = contract["contract_version"]
        if v is None:
            continue
        out[hp] = encode_value(f, v, style)
    return out


def hyperparameters_to_argv(hps: Mapping[str, str]) -> List[str]:
    """argv as the SDK v3 driver builds it (``--key value``, dict order)."""
    argv: List[str] = []
    for k, v in hps.items():
        argv += [f"--{k}", v]
    return argv


# ---------------------------------------------------------------------------------------------
# What the reference trainer refuses (static part)


def _matches(cond: Any, value: Any) -> bool:
    if isinstance(cond, list):
        return value in cond
    if isinstance(cond, dict) and "minimum" in cond:
        return value is not None and value >= cond["minimum"]
    if isinstance(cond, dict) and "not" in cond:
        return value not in cond["not"]
    raise ContractError(f"bad 'when' condition {cond!r} in the contract")


def static_refusals(plan: Mapping[str, Any], contract: Optional[Mapping[str, Any]] = None) -> List[Tuple[str, str, str]]:
    """(refusal id, first field, reason) for every ``trainer_refusals`` entry of scope static
    that matches the plan. Derived keys: dp, dp_cp (:func:`layout`)."""
    contract = contract or load_contract()
    env = dict(plan)
    env.update({k: v for k, v in layout(plan).items() if k in ("dp", "dp_cp")})
    out = []
    for r in contract["trainer_refusals"]:
        if r["scope"] != "static" or not r["when"]:
            continue
        if all(_matches(c, env.get(k)) for k, c in r["when"].items()):
            out.append((r["id"], r["fields"][0], r["reason"]))
    return out


# ---------------------------------------------------------------------------------------------


def main(argv: Optional[List[str]] = None) -> int:
    import argparse

    ap = argparse.ArgumentParser(
        allow_abbrev=False,
        description="Parse SageMaker hyperparameters against the bwplan training contract and print the plan as JSON.",
        epilog="Hyperparameters after '--' are read as --name value pairs, as SageMaker passes them.")
    ap.add_argument("--hyperparameters", metavar="FILE", help="JSON object of hyperparameters (default: /opt/ml/input/config/hyperparameters.json, or the pairs after --)")
    ap.add_argument("--resource-config", metavar="FILE", help="resourceconfig.json giving instance and nodes")
    ap.add_argument("--contract", metavar="FILE", help="training-contract.json (default: next to this script, or configs/)")
    ap.add_argument("--to-hyperparameters", metavar="PLAN", help="the inverse: read a plan JSON file and print its hyperparameters")
    ap.add_argument("--style", choices=["v3", "v2", "v2-json"], default="v3", help="encoding for --to-hyperparameters")
    a, rest = ap.parse_known_args(argv)
    rest = [x for x in rest if x != "--"]
    try:
        contract = load_contract(a.contract)
        if a.to_hyperparameters:
            with open(a.to_hyperparameters, encoding="utf-8") as f:
                plan = plan_from_dict(json.load(f), contract)
            print(json.dumps(plan_to_hyperparameters(plan, a.style, contract), indent=2))
            return 0
        if a.hyperparameters:
            hps = read_hyperparameters_file(a.hyperparameters)
        elif rest:
            hps = argv_pairs(rest)
        elif os.path.isfile(HYPERPARAMETERS_FILE):
            hps = read_hyperparameters_file(HYPERPARAMETERS_FILE)
        else:
            ap.error("no hyperparameters: give --hyperparameters FILE or -- --name value ...")
        rc = None
        if a.resource_config:
            with open(a.resource_config, encoding="utf-8") as f:
                rc = json.load(f)
        plan = parse_hyperparameters(hps, contract, rc)
    except ContractError as e:
        print(f"contract.py: error: {e}", file=sys.stderr)
        return 2
    print(json.dumps(plan, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
