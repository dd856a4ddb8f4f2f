"""Low-precision GEMMs of the decoder blocks (torchao 0.18.0), applied on the meta model before
parallelisation, in torchtitan's order (model converters, then TP, AC, compile, FSDP).

* fp8 / fp8-rowwise: ``torchao.float8.convert_to_float8_training(model, config=
  Float8LinearConfig.from_recipe_name("tensorwise" | "rowwise"), module_filter_fn=...)``
  (torchao/float8/float8_linear_utils.py, config.py); fp8_all_gather sets
  ``enable_fsdp_float8_all_gather=True`` (tensorwise only, config.py) and the step calls
  ``precompute_float8_dynamic_scale_for_fsdp`` (torchao/float8/fsdp_utils.py).
* mxfp8: ``torchao.quantization.quantize_(model, MXFP8TrainingOpConfig.from_recipe(
  MXFP8TrainingRecipe.MXFP8_RCEIL), filter_fn=...)`` (torchao/prototype/moe_training/config.py;
  docs/source/workflows/training.md "User API"). torchao asserts a PyTorch with the DTensor
  scaled_mm single-dim strategy (conversion_utils.py ``_get_tensor_cls_for_config``); the trainer
  checks the same attributes first and refuses with a reason (refusal T-mxfp8-torch).
* nvfp4: ``quantize_(model, NVFP4TrainingConfig(), filter_fn=...)`` swaps nn.Linear for
  NVFP4Linear (torchao/prototype/moe_training/nvfp4_training/nvfp4_training.py); its kernels need
  M, K, N divisible by 128 and take bf16, which ``nvfp4_mm_triton`` makes of an fp32 input or weight itself
  (nvfp4_linear.py), so it also runs under the fp32-master autocast recipe, except on a linear with a bias, whose
  fp32 bias makes the output and its gradient fp32, which the NVFP4 backward rejects (T-nvfp4-autocast-bias). mxfp8 does not: the weight
  wrapper's F.linear override hands the fp32 weight to a Triton cast that asserts bf16 (T-mxfp8-autocast), and
  it never adds the linear's bias, so a model with biased block linears is refused (T-mxfp8-bias).

Embeddings and the LM head stay bf16; blocks listed by bf16_layers stay bf16 (module filter).
"""

from __future__ import annotations

import dataclasses
import re
from typing import Any, Callable, Dict, List

import torch
import torch.nn as nn

from .model import Refusal, local_features

_LAYER = re.compile(r"^model\.layers\.([0-9]+)\.")

MIN_CAPABILITY = {"fp8": (8, 9), "fp8-rowwise": (8, 9), "mxfp8": (10, 0), "nvfp4": (10, 0)}
DIM_MULTIPLE = {"fp8": 16, "fp8-rowwise": 16, "mxfp8": 32, "nvfp4": 128}


def check_runtime(plan: Dict[str, Any], capability: tuple) -> None:
    """Refusals T-capability and T-mxfp8-torch, which need the GPU and the installed torch."""
    prec = plan["precision"]
    need = MIN_CAPABILITY.get(prec)
    if need and tuple(capability) < need:
        raise Refusal("precision", prec, "T-capability", f"needs compute capability >= {need[0]}.{need[1]}, this GPU has {capability[0]}.{capability[1]}")
    if prec == "mxfp8":
        from torch.distributed.tensor import _dispatch, _ops

        if not (hasattr(_ops, "scaled_mm_single_dim_strategy") and hasattr(_dispatch, "is_pinned_handler")):
            raise Refusal("precision", prec, "T-mxfp8-torch",
                          f"torchao MXFP8 training needs the DTensor scaled_mm single-dim strategy, absent from torch {torch.__version__}")


def block_filter(plan: Dict[str, Any], kept: List[int]) -> Callable[[nn.Module, str], bool]:
    """Which linears get the low-precision format: nn.Linear inside model.layers.<i> with i not
    kept bf16 and dimensions the format's kernels accept (fp8: multiples of 16, as torchtitan's
    float8 filter; mxfp8: 32). For nvfp4 a block linear that fails the 128 rule is a refusal
    (T-nvfp4-dims), not a silent skip."""
    prec, tp = plan["precision"], plan["tp"]
    mult = DIM_MULTIPLE[prec]
    autocast = plan["sharding"] == "none" and plan["master_weights"] == "fp32"  # engine.py's recipe without FSDP
    keep = set(kept)

    def fn(module: nn.Module, fqn: str) -> bool:
        if not isinstance(module, nn.Linear):
            return False
        m = _LAYER.match(fqn)
        if not m or int(m.group(1)) in keep:
            return False
        i, o = local_features(module, fqn, tp)
        if i % mult or o % mult:
            if prec == "nvfp4":
                raise Refusal("precision", prec, "T-nvfp4-dims", f"{fqn} has local in/out features {i}/{o}, not multiples of 128")
            return False
        if prec == "mxfp8" and module.bias is not None:
            raise Refusal("precision", prec, "T-mxfp8-bias",
                          f"{fqn} has a bias: torchao's MXFP8 linear override drops it (_to_mxfp8_then_scaled_mm(input, weight), "
                          "prototype/moe_training/tensor.py @v0.18.0), so it would train without it; use fp8 or bf16")
        if prec == "nvfp4" and autocast and module.bias is not None:
            raise Refusal("precision", prec, "T-nvfp4-autocast-bias",
                          f"{fqn} has a bias: under autocast its fp32 bias makes the output and the gradient NVFP4's backward gets fp32 "
                          "(torchao triton_rht_amax expects bfloat16); use master_weights bf16 or sharding full")
        return True

    return fn


def convert(hf: nn.Module, plan: Dict[str, Any], kept: List[int]) -> Dict[str, Any]:
    """Swap the block linears for the plan's format; returns a summary for the record."""
    prec = plan["precision"]
    if prec == "bf16":
        return {"converted": 0}
    fn = block_filter(plan, kept)
    names = [n for n, m in hf.named_modules() if fn(m, n)]
    if prec in ("fp8", "fp8-rowwise"):
        from torchao.float8 import Float8LinearConfig, convert_to_float8_training

        cfg = Float8LinearConfig.from_recipe_name("tensorwise" if prec == "fp8" else "rowwise")
        if plan["fp8_all_gather"]:
            cfg = dataclasses.replace(cfg, enable_fsdp_float8_all_gather=True)
        convert_to_float8_training(hf, config=cfg, module_filter_fn=fn)
    elif prec == "mxfp8":
        from torchao.prototype.moe_training.config import MXFP8TrainingOpConfig, MXFP8TrainingRecipe
        from torchao.quantization import quantize_

        quantize_(hf, MXFP8TrainingOpConfig.from_recipe(MXFP8TrainingRecipe.MXFP8_RCEIL), filter_fn=fn)
    elif prec == "nvfp4":
        from torchao.prototype.moe_training.nvfp4_training.nvfp4_training import NVFP4TrainingConfig
        from torchao.quantization import quantize_

        quantize_(hf, NVFP4TrainingConfig(), filter_fn=fn)
    return {"converted": len(names), "first": names[:1], "kept_bf16_blocks": kept}


@torch.no_grad()
def init_buffers(hf: nn.Module, seed: int, rank: int) -> None:
    """NVFP4Linear keeps two runtime buffers made on the meta device: ``_rht_sign_vector`` (a
    {-1, 1} vector of 16 for the random Hadamard transform; the same on every rank, as
    torchtitan's fixed sign vector, components/quantization/nvfp4.py) and ``_sr_seed`` (per-rank
    stochastic-rounding seed). Refill both after ``to_empty``."""
    from torchao.prototype.moe_training.nvfp4_training.nvfp4_training import NVFP4Linear

    g = torch.Generator().manual_seed(1234 + seed)
    signs = torch.where(torch.rand(16, generator=g) >= 0.5, 1, -1).to(torch.int8)
    local = torch.Generator().manual_seed(seed * 1000003 + rank)
    for m in hf.modules():
        if isinstance(m, NVFP4Linear):
            m._rht_sign_vector.copy_(signs.to(m._rht_sign_vector.device))
            m._sr_seed.copy_(torch.randint(-(2**62), 2**62, (1,), generator=local, dtype=torch.int64).to(m._sr_seed.device))
            m._refresh_rht_sign_vector_tuple()


def after_optimizer_step(train_module: nn.Module, plan: Dict[str, Any]) -> None:
    """Float8 all-gather: precompute the weights' dynamic scales for the next all-gather in one
    fused amax (torchao float8 README: call after each optimizer step)."""
    if plan["precision"] == "fp8" and plan["fp8_all_gather"]:
        from torchao.float8 import precompute_float8_dynamic_scale_for_fsdp

        precompute_float8_dynamic_scale_for_fsdp(train_module)
