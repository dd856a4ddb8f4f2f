"""Facts about the process and the SageMaker job that need no torch.

* torchrun's environment (RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE: set by torchrun itself,
  shared/reference/sagemaker-run.md section 2.3);
* the reserved-capacity deadline ``SAGEMAKER_CURRENT_CAPACITY_BLOCK_EXPIRATION_TIMESTAMP``
  (section 3: training plans terminate instances 30 minutes before the reservation ends);
* GPU catalog ids and their dense bf16 peak (configs/hardware/catalog.json) for the MFU figure;
* installed library versions (importlib.metadata, so torch need not be imported).
"""

from __future__ import annotations

import os
import re
import time
from importlib import metadata
from typing import Dict, Optional

# Dense bf16 TFLOP/s per GPU, copied from configs/hardware/catalog.json (dense_tflop_per_s.bf16).
PEAK_BF16_TFLOPS = {"h100": 989.0, "h200": 989.0, "b200": 2250.0, "b300": 2250.0, "gb200": 2500.0, "gb300": 2500.0,
                    "a100-40gb": 312.0, "a100-80gb": 312.0, "l40s": 362.05, "a10g": 70.0, "h100-96gb": 989.0, "h800": 989.0}

# Training plans start terminating instances this long before the reservation's end
# (https://docs.aws.amazon.com/sagemaker/latest/dg/training-plan-utilization-for-training-jobs.html).
RECLAIM_LEAD_S = 30 * 60

LIBRARIES = ("torch", "transformers", "torchao", "accelerate", "peft", "numpy")


def env_int(name: str, default: int) -> int:
    v = os.environ.get(name)
    return int(v) if v not in (None, "") else default


def rank() -> int:
    return env_int("RANK", 0)


def world_size() -> int:
    return env_int("WORLD_SIZE", 1)


def local_rank() -> int:
    return env_int("LOCAL_RANK", 0)


def local_world_size() -> int:
    return env_int("LOCAL_WORLD_SIZE", world_size())


def capacity_deadline(environ: Optional[Dict[str, str]] = None) -> Optional[float]:
    """Epoch seconds at which the capacity block (training plan) ends, or None when the job does
    not run on reserved capacity. The AWS example treats the default '0' as unset; verl parses
    the value as integer epoch seconds; milliseconds (> 1e12) are accepted defensively."""
    env = os.environ if environ is None else environ
    raw = env.get("SAGEMAKER_CURRENT_CAPACITY_BLOCK_EXPIRATION_TIMESTAMP", "").strip()
    if not raw:
        return None
    try:
        v = float(raw)
    except ValueError:
        return None
    if v <= 0:
        return None
    if v > 1e12:
        v /= 1000.0
    return v


def must_stop_for_capacity(deadline: Optional[float], step_s: float, checkpoint_s: float,
                           margin_s: float = 60.0, now: Optional[float] = None) -> bool:
    """True when another step plus a checkpoint would run into the reclaim window:
    ``deadline - 30 min - now < step_s + checkpoint_s + margin_s``."""
    if deadline is None:
        return False
    now = time.time() if now is None else now
    return deadline - RECLAIM_LEAD_S - now < step_s + checkpoint_s + margin_s


def gpu_id_of(device_name: str) -> Optional[str]:
    """Catalog id of a CUDA device name ('NVIDIA H200' -> 'h200', 'NVIDIA GB200' -> 'gb200')."""
    up = device_name.upper()
    for gid in sorted(PEAK_BF16_TFLOPS, key=len, reverse=True):
        if re.search(rf"(?<![A-Z0-9]){gid.upper()}(?![0-9])", up):
            return gid
    return None


def gpu_matches(plan_gpu: Optional[str], device_name: str) -> bool:
    return plan_gpu is None or gpu_id_of(device_name) == plan_gpu


def versions() -> Dict[str, Optional[str]]:
    out: Dict[str, Optional[str]] = {}
    for lib in LIBRARIES:
        try:
            out[lib] = metadata.version(lib)
        except metadata.PackageNotFoundError:
            out[lib] = None
    return out


def allocator_conf_var(environ: Optional[Dict[str, str]] = None) -> str:
    """The variable PyTorch reads the allocator's settings from: ``PYTORCH_ALLOC_CONF`` when it is set (torch 2.9 and
    later read it first and then ignore the older name: c10/core/AllocatorConfig.cpp), else
    ``PYTORCH_CUDA_ALLOC_CONF``."""
    env = os.environ if environ is None else environ
    return "PYTORCH_ALLOC_CONF" if "PYTORCH_ALLOC_CONF" in env else "PYTORCH_CUDA_ALLOC_CONF"


def allocator_conf(expandable_segments: bool, environ: Optional[Dict[str, str]] = None) -> Optional[str]:
    """The value of :func:`allocator_conf_var` the plan's ``expandable_segments`` asks for, given the current
    environment: the value to set (the current one with ``expandable_segments:True`` appended), or None when nothing
    needs to change. Raises ValueError when the environment already sets expandable_segments the other way. PyTorch
    reads the variable when the caching allocator initialises, so it must be set before CUDA is first used
    (c10/cuda/CUDAAllocatorConfig.cpp)."""
    env = os.environ if environ is None else environ
    conf = env.get(allocator_conf_var(env), "")
    low = conf.lower().replace(" ", "")
    says = None
    if "expandable_segments:true" in low:
        says = True
    elif "expandable_segments:false" in low:
        says = False
    if says is not None and says != expandable_segments:
        raise ValueError(f"{allocator_conf_var(env)}={conf} sets expandable_segments {'on' if says else 'off'}, but the plan's "
                         f"expandable_segments is {'true' if expandable_segments else 'false'}")
    if expandable_segments and says is None:
        return (conf + "," if conf else "") + "expandable_segments:True"
    return None


def sagemaker_env() -> Dict[str, str]:
    """The SageMaker facts worth recording with a measurement."""
    keys = ("TRAINING_JOB_NAME", "SM_CURRENT_INSTANCE_TYPE", "SM_CURRENT_HOST", "SM_HOSTS", "SM_NUM_GPUS",
            "SAGEMAKER_CURRENT_CAPACITY_BLOCK_EXPIRATION_TIMESTAMP", "SM_DLC_TORCH_VERSION", "PYTORCH_CUDA_ALLOC_CONF",
            "PYTORCH_ALLOC_CONF")
    return {k: os.environ[k] for k in keys if k in os.environ}
