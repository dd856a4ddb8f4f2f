"""Measurement records without torch (docs/calibration.md#records).

The fields a record starts with (``record_head``, what ``engine.run_plan`` writes before it trains) and the
ground truth's labels for the recipe and checkpointing, so that a record can be built, and checked against
``bwplan calibrate``, on a machine without torch or a GPU (tests/train/test_trainer_static.py).
"""

from __future__ import annotations

from typing import Any, Dict, Optional


def ac_label(ac: str) -> str:
    """The ground truth's ``ac`` names where they mean the same thing (half = every other block)."""
    return {"every-2": "half"}.get(ac, ac)


def recipe_label(plan: Dict[str, Any]) -> str:
    """The ground truth's ``recipe`` where it applies: amp (fp32 masters + autocast, no wrapper or
    DDP), fsdp2 (FSDP2, fp32 masters, bf16 compute), bf16 (everything bf16, no wrapper); else
    fsdp2-bf16 or ddp-amp / ddp-bf16."""
    fsdp = plan["sharding"] != "none"
    ddp = not fsdp and plan["gpus"] // (plan["tp"] * plan["cp"]) > 1
    if plan["master_weights"] == "fp32":
        return "fsdp2" if fsdp else ("ddp-amp" if ddp else "amp")
    return "fsdp2-bf16" if fsdp else ("ddp-bf16" if ddp else "bf16")


def record_head(plan: Dict[str, Any], gpu_name: str, world_size: int, probe: bool,
                versions: Optional[Dict[str, Any]] = None, env: Optional[Dict[str, str]] = None) -> Dict[str, Any]:
    """The first fields of the record of ``plan`` (the parsed plan, contract.plan_from_dict) run on a GPU
    named ``gpu_name`` (torch.cuda.get_device_name) by ``world_size`` processes: the ground truth's
    configuration fields, ``kind`` (train | probe) and the plan itself, which ``bwplan calibrate`` reads."""
    return {"model": plan["model"], "recipe": recipe_label(plan), "mbs": plan["micro_batch_size"],
            "seq": plan["seq_len"], "ac": ac_label(plan["activation_checkpointing"]),
            "optim": plan["optimizer_impl"], "kind": "probe" if probe else "train",
            "contract_version": plan["contract_version"], "plan": plan, "grad_accum": plan["grad_accum"],
            "gpu": gpu_name, "gpu_count": plan["gpus"], "world_size": world_size,
            "versions": versions or {}, "env": env or {}}
