"""Checkpoints with torch.distributed.checkpoint (DCP) under /opt/ml/checkpoints.

SageMaker syncs CheckpointConfig.LocalPath (default /opt/ml/checkpoints) to S3 during training
and restores it on every instance of a new job with the same S3 URI
(shared/reference/sagemaker-run.md section 2.5), so every rank sees the same directory:
each rank writes its shards, DCP's coordinator (rank 0) the metadata.

Layout: ``<dir>/step-00000120/`` (a DCP checkpoint of {"model", "optim", "train"} from
``torch.distributed.checkpoint.state_dict.get_state_dict``, as torchtitan components/checkpoint.py
and optimizer.py) plus ``<dir>/latest`` naming the newest complete one, written by rank 0 after
the save. Keys are FQNs without wrapper prefixes, so a checkpoint loads under another world size,
sharding or checkpointing mode (DCP reshards).
"""

from __future__ import annotations

import json
import os
import shutil
import time
from typing import Any, Dict, Optional

import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict

KEEP = 2


def _rank0() -> bool:
    return not dist.is_initialized() or dist.get_rank() == 0


def _barrier() -> None:
    if dist.is_initialized():
        dist.barrier()


def save(directory: str, step: int, model, optimizer, plan: Dict[str, Any]) -> float:
    """Save step ``step``; returns the seconds it took."""
    t0 = time.time()
    path = os.path.join(directory, f"step-{step:08d}")
    model_sd, optim_sd = get_state_dict(model, optimizer)
    dcp.save({"model": model_sd, "optim": optim_sd, "train": {"step": step}}, checkpoint_id=path)
    _barrier()
    if _rank0():
        with open(os.path.join(path, "plan.json"), "w", encoding="utf-8") as f:
            json.dump(plan, f, indent=1)
        tmp = os.path.join(directory, ".latest.tmp")
        with open(tmp, "w", encoding="utf-8") as f:
            f.write(os.path.basename(path) + "\n")
        os.replace(tmp, os.path.join(directory, "latest"))
        olds = sorted(d for d in os.listdir(directory) if d.startswith("step-") and d != os.path.basename(path))
        for d in olds[:-(KEEP - 1)] if KEEP > 1 else olds:
            shutil.rmtree(os.path.join(directory, d), ignore_errors=True)
    _barrier()
    return time.time() - t0


def latest(directory: str) -> Optional[str]:
    p = os.path.join(directory, "latest")
    if not os.path.isfile(p):
        return None
    with open(p, encoding="utf-8") as f:
        name = f.read().strip()
    path = os.path.join(directory, name)
    return path if os.path.isdir(path) else None


def load(path: str, model, optimizer) -> int:
    """Restore model and optimizer from ``path``; returns the step to continue from."""
    model_sd, optim_sd = get_state_dict(model, optimizer)
    state = {"model": model_sd, "optim": optim_sd, "train": {"step": 0}}
    dcp.load(state, checkpoint_id=path)
    set_state_dict(model, optimizer, model_state_dict=state["model"], optim_state_dict=state["optim"])
    return int(state["train"]["step"])


def saved_plan(path: str) -> Optional[Dict[str, Any]]:
    p = os.path.join(path, "plan.json")
    if not os.path.isfile(p):
        return None
    with open(p, encoding="utf-8") as f:
        return json.load(f)
