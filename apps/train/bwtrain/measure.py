"""Measurement records in the ground truth's format (shared/groundtruth/README.md, measure.py).

Memory is read like measure.py ``run_one``: at the start of the measured window
``torch.cuda.reset_peak_memory_stats()``; at the start of the window's last step the window's
peaks so far (``steps_peak``, ``steps_reserved``), then the last step split into forward,
backward and optimizer phases with ``torch.cuda.max_memory_allocated()`` /
``max_memory_reserved()`` read and the peaks reset between phases. ``peak_allocated`` is the
maximum of the phase peaks and the window peak. With gradient accumulation a phase's peak is the
maximum over the step's micro-batches and after_fwd / after_bwd are read after the last one.
Byte figures are rank 0's; ``max_over_ranks`` holds the maxima over all ranks.
"""

from __future__ import annotations

import json
import os
import time
from typing import Any, Dict, Optional

import torch
import torch.distributed as dist

from .records import ac_label, recipe_label  # noqa: F401 - the labels live in the torch-free module

BYTE_FIELDS = ["bytes_params", "peak_allocated", "peak_reserved", "device_used", "steps_reserved", "steps_peak",
               "fwd_peak", "fwd_reserved", "after_fwd", "before_fwd", "bwd_peak", "bwd_reserved", "after_bwd",
               "opt_peak", "opt_reserved", "after_step"]


class Meter:
    """Collects the phase figures of one run."""

    def __init__(self, cuda: bool):
        self.cuda = cuda
        self.phase: Dict[str, int] = {}

    def _alloc(self) -> int:
        return torch.cuda.memory_allocated() if self.cuda else 0

    def window_start(self) -> None:
        if self.cuda:
            torch.cuda.synchronize()
            torch.cuda.reset_peak_memory_stats()

    def last_step_start(self) -> None:
        if not self.cuda:
            return
        torch.cuda.synchronize()
        self.phase["before_fwd"] = self._alloc()
        self.phase["steps_reserved"] = torch.cuda.max_memory_reserved()
        self.phase["steps_peak"] = torch.cuda.max_memory_allocated()
        torch.cuda.reset_peak_memory_stats()

    def end_phase(self, name: str) -> None:
        """After forward (fwd), backward (bwd) or the optimizer step (opt) of the last step."""
        if not self.cuda:
            return
        peak, reserved = torch.cuda.max_memory_allocated(), torch.cuda.max_memory_reserved()
        self.phase[f"{name}_peak"] = max(self.phase.get(f"{name}_peak", 0), peak)
        self.phase[f"{name}_reserved"] = max(self.phase.get(f"{name}_reserved", 0), reserved)
        self.phase[{"fwd": "after_fwd", "bwd": "after_bwd", "opt": "after_step"}[name]] = self._alloc()
        torch.cuda.reset_peak_memory_stats()

    def finish(self, rec: Dict[str, Any]) -> None:
        if not self.cuda or "opt_peak" not in self.phase:
            return
        p = self.phase
        rec.update(p)
        rec["peak_allocated"] = max(p["fwd_peak"], p["bwd_peak"], p["opt_peak"], p["steps_peak"])
        rec["peak_reserved"] = max(p["steps_reserved"], p["fwd_reserved"], p["bwd_reserved"], p["opt_reserved"])
        rec["num_alloc_retries"] = torch.cuda.memory_stats().get("num_alloc_retries", 0)
        free, total = torch.cuda.mem_get_info()
        rec["device_used"] = total - free
        rec["peak_phase"] = max(("fwd", p["fwd_peak"]), ("bwd", p["bwd_peak"]), ("opt", p["opt_peak"]), key=lambda kv: kv[1])[0]


def max_over_ranks(rec: Dict[str, Any], device: torch.device) -> None:
    """``max_over_ranks``: each byte field's maximum over all ranks (one all_reduce)."""
    if not (dist.is_available() and dist.is_initialized()):
        return
    keys = [k for k in BYTE_FIELDS if isinstance(rec.get(k), int)]
    t = torch.tensor([rec[k] for k in keys], dtype=torch.int64, device=device)
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    rec["max_over_ranks"] = dict(zip(keys, (int(x) for x in t.tolist())))


def context_bytes(device: torch.device) -> int:
    """Bytes of the device in use outside PyTorch's caching allocator: the CUDA context, and NCCL's buffers once a
    process group is up (``total - free - memory_reserved``, as the ground truth's measure.py)."""
    free, total = torch.cuda.mem_get_info(device)
    return total - free - torch.cuda.memory_reserved(device)


def env_record(device: torch.device, context_before_dist: Optional[int] = None) -> Dict[str, Any]:
    """The ground truth's first line (``"kind": "env"``): ``context_used`` the CUDA context alone, measured before the
    process group (``context_before_dist``, from the session's start), and ``context_used_after_dist`` with NCCL's
    buffers when a process group is up, as ``shared/groundtruth/measure.py`` writes them; ``bwplan calibrate`` reads
    the first as the profile's cuda_context and the difference as its nccl (src/runs.cpp). Without
    ``context_before_dist`` the context is measured now (no process group may be up yet)."""
    free, total = torch.cuda.mem_get_info(device)
    now = total - free - torch.cuda.memory_reserved(device)
    rec: Dict[str, Any] = {"kind": "env", "gpu": torch.cuda.get_device_name(device), "torch": torch.__version__,
                           "total": total, "context_used": now if context_before_dist is None else context_before_dist,
                           "cuda": torch.version.cuda}
    if dist.is_available() and dist.is_initialized():
        rec["context_used_after_dist"] = now
    return rec


class RecordWriter:
    def __init__(self, output_dir: str, enabled: bool):
        self.path = os.path.join(output_dir, "measurements.jsonl")
        # RANK from torchrun: a refusal can come before the process group exists
        self.enabled = enabled and int(os.environ.get("RANK", "0")) == 0
        if self.enabled:
            os.makedirs(output_dir, exist_ok=True)

    def write(self, rec: Dict[str, Any]) -> None:
        if not self.enabled:
            return
        with open(self.path, "a", encoding="utf-8") as f:
            f.write(json.dumps(rec, default=str) + "\n")


def now() -> float:
    return time.perf_counter()


def mfu(tokens_per_s_per_gpu: float, flops_per_token: float, peak_tflops: Optional[float]) -> Optional[float]:
    if not peak_tflops:
        return None
    return tokens_per_s_per_gpu * flops_per_token / (peak_tflops * 1e12)
