"""Parallelism and activation checkpointing on PyTorch's own APIs, in torchtitan's order
(torchtitan models/llama3/infra/parallelize.py ``parallelize_llama``): tensor/sequence parallel,
activation checkpointing, compile, then FSDP2 (or DDP).

* Mesh: ``torch.distributed.device_mesh.init_device_mesh("cuda", (dp_replicate, dp_shard, cp, tp))``
  with the flattened dims ``dp_shard_cp`` (FSDP shards over data and context ranks, as torchtitan
  does), ``dp`` (data loading) and ``dp_cp`` (loss and DDP); the same calls as accelerate's
  ParallelismConfig.build_device_mesh (accelerate/parallelism_config.py).
* Tensor parallel: ``parallelize_module`` with the plan torchtitan applies to Hugging Face
  decoder blocks (experiments/transformers_modeling_backend/infra/parallelize.py
  ``apply_non_moe_tp``): q/k/v and gate/up ``ColwiseParallel``, o/down ``RowwiseParallel(
  output_layouts=Shard(1))``, norms ``SequenceParallel``, ``PrepareModuleInput`` gathering the
  sequence before attention and MLP; embedding ``RowwiseParallel(output_layouts=Shard(1))``, LM
  head ``ColwiseParallel(output_layouts=Shard(-1))`` with ``loss_parallel``. Float8 tensorwise uses
  torchao's Float8ColwiseParallel / Float8RowwiseParallel / PrepareFloat8ModuleInput.
* Activation checkpointing: ``checkpoint_wrapper`` (torch.distributed.algorithms._checkpoint)
  per decoder block (full, every-K); per-op SAC with ``create_selective_checkpoint_contexts`` and
  torchtitan's save list (distributed/activation_checkpoint.py ``_apply_op_sac``); core-attention
  recompute by checkpointing only the SDPA call (registered through transformers'
  ``AttentionInterface``).
* FSDP2: ``fully_shard(block, mesh, mp_policy=MixedPrecisionPolicy(bf16, fp32),
  reshard_after_forward=True | False)`` per block, then the root; hybrid passes a 2-D mesh (HSDP);
  the plan's offload optimizer,params adds ``offload_policy=CPUOffloadPolicy(pin_memory=True)``.
* DDP: ``torch.nn.parallel.DistributedDataParallel`` over the dp x cp ranks.
* Context parallel: ``torch.distributed.tensor.experimental.context_parallel`` around forward and
  backward, sharding ids, labels and position ids along the sequence (load-balanced).
"""

from __future__ import annotations

import contextlib
from collections import defaultdict
from typing import Any, Dict, Optional

import torch
import torch.distributed as dist
import torch.nn as nn

# torchtitan's per-op SAC save list (models/llama3/infra/parallelize.py ``_op_sac_save_list``),
# by name so that ops a PyTorch build lacks are skipped instead of failing.
SAC_SAVE_OPS = [
    ("aten", "mm", "default"),
    ("aten", "_scaled_dot_product_efficient_attention", "default"),
    ("aten", "_scaled_dot_product_flash_attention", "default"),
    ("aten", "_scaled_dot_product_cudnn_attention", "default"),
    ("aten", "_scaled_dot_product_attention_math", "default"),
    ("aten", "_scaled_dot_product_fused_attention_overrideable", "default"),
    ("_c10d_functional", "reduce_scatter_tensor", "default"),
    ("aten", "max", "default"),  # amax of the low-precision scales
]


def _resolve_op(ns: str, name: str, overload: str):
    try:
        return getattr(getattr(getattr(torch.ops, ns), name), overload)
    except (AttributeError, RuntimeError):
        return None


# ---------------------------------------------------------------------------------------------
# Process group and mesh


def init_distributed(local_rank: int) -> None:
    """NCCL process group bound to this rank's GPU (torchrun sets MASTER_ADDR/PORT, RANK, WORLD_SIZE)."""
    if not dist.is_initialized():
        dist.init_process_group("nccl", device_id=torch.device("cuda", local_rank))


def build_mesh(lay: Dict[str, int]):
    from torch.distributed.device_mesh import init_device_mesh

    shape = (lay["dp_replicate"], lay["dp_shard"], lay["cp"], lay["tp"])
    mesh = init_device_mesh("cuda", shape, mesh_dim_names=("dp_replicate", "dp_shard", "cp", "tp"))
    mesh["dp_shard", "cp"]._flatten("dp_shard_cp")
    mesh["dp_replicate", "dp_shard"]._flatten("dp")
    mesh["dp_replicate", "dp_shard", "cp"]._flatten("dp_cp")
    return mesh


def fsdp_mesh(mesh, sharding: str):
    return mesh["dp_replicate", "dp_shard_cp"] if sharding == "hybrid" else mesh["dp_shard_cp"]


# ---------------------------------------------------------------------------------------------
# Tensor + sequence parallel


def apply_tp(hf: nn.Module, tp_mesh, float8_tensorwise: bool) -> None:
    from torch.distributed.tensor import Replicate, Shard
    from torch.distributed.tensor.parallel import (
        ColwiseParallel,
        PrepareModuleInput,
        RowwiseParallel,
        SequenceParallel,
        parallelize_module,
    )

    parallelize_module(hf, tp_mesh, {
        "model.embed_tokens": RowwiseParallel(input_layouts=Replicate(), output_layouts=Shard(1)),
        "model.norm": SequenceParallel(),
        "lm_head": ColwiseParallel(input_layouts=Shard(1), output_layouts=Shard(-1), use_local_output=False),
    })
    for block in hf.model.layers:
        # torchao's float8 styles need Float8Linear modules (float8_tensor_parallel.py asserts it):
        # blocks kept bf16 (bf16_layers) use the plain styles.
        if float8_tensorwise and all(type(m).__name__ == "Float8Linear" for n, m in block.named_modules()
                                     if n.endswith(("_proj",)) and isinstance(m, nn.Linear)):
            from torchao.float8.float8_tensor_parallel import (
                Float8ColwiseParallel as colwise,
                Float8RowwiseParallel as rowwise,
                PrepareFloat8ModuleInput as prepare_input,
            )
        else:
            colwise, rowwise, prepare_input = ColwiseParallel, RowwiseParallel, PrepareModuleInput
        plan = {
            "input_layernorm": SequenceParallel(),
            "self_attn": prepare_input(input_kwarg_layouts={"hidden_states": Shard(1)},
                                       desired_input_kwarg_layouts={"hidden_states": Replicate()}),
            "self_attn.q_proj": colwise(),
            "self_attn.k_proj": colwise(),
            "self_attn.v_proj": colwise(),
            "self_attn.o_proj": rowwise(output_layouts=Shard(1)),
            "post_attention_layernorm": SequenceParallel(),
            "mlp": prepare_input(input_layouts=(Shard(1),), desired_input_layouts=(Replicate(),)),
            "mlp.gate_proj": colwise(),
            "mlp.up_proj": colwise(),
            "mlp.down_proj": rowwise(output_layouts=Shard(1)),
        }
        attn = block.self_attn
        if hasattr(attn, "q_norm") and hasattr(attn, "k_norm"):  # Qwen3 per-head norms
            plan["self_attn.q_norm"] = SequenceParallel(sequence_dim=2, use_local_output=True)
            plan["self_attn.k_norm"] = SequenceParallel(sequence_dim=2, use_local_output=True)
        parallelize_module(block, tp_mesh, plan)


def loss_parallel_context(enabled: bool):
    """Cross-entropy on vocabulary-sharded logits; forward and backward both run inside it."""
    if not enabled:
        return contextlib.nullcontext()
    from torch.distributed.tensor.parallel import loss_parallel

    return loss_parallel()


# ---------------------------------------------------------------------------------------------
# Activation checkpointing


def _sac_context_fn():
    from torch.utils.checkpoint import CheckpointPolicy, create_selective_checkpoint_contexts

    save = {op for op in (_resolve_op(*o) for o in SAC_SAVE_OPS) if op is not None}
    mm = _resolve_op("aten", "mm", "default")
    meta = defaultdict(int)

    def policy(ctx, func, *args, **kwargs):
        mode = "recompute" if ctx.is_recompute else "forward"
        if func == mm:
            meta[mode] += 1
        # save every compute-intensive op's output except every second mm (torchtitan)
        if func in save and not (func == mm and meta[mode] % 2 == 0):
            return CheckpointPolicy.MUST_SAVE
        return CheckpointPolicy.PREFER_RECOMPUTE

    return create_selective_checkpoint_contexts(policy)


def enable_attention_recompute() -> None:
    """selective-attn: the SDPA call of every attention module runs under a non-reentrant
    ``torch.utils.checkpoint.checkpoint``, so only its inputs (q, k, v) are kept and the kernel's
    own saved outputs are recomputed in backward: Megatron's core-attention recompute. Registered
    as the "sdpa" attention function (transformers ``AttentionInterface.register``)."""
    from torch.utils.checkpoint import checkpoint
    from transformers import AttentionInterface
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    def recomputed_sdpa(module, query, key, value, attention_mask, **kwargs):
        def core(q, k, v):
            return sdpa_attention_forward(module, q, k, v, attention_mask, **kwargs)[0]

        return checkpoint(core, query, key, value, use_reentrant=False, preserve_rng_state=False), None

    AttentionInterface.register("sdpa", recomputed_sdpa)


def apply_ac(hf: nn.Module, mode: str, preserve_rng_state: bool = False) -> int:
    """Wrap decoder blocks; returns how many were wrapped. ``preserve_rng_state`` makes the recompute draw the
    forward's random numbers again (``torch.utils.checkpoint``: stash and restore the CPU and CUDA RNG states): needed
    when a block draws any, as LoRA's adapter dropout does; off otherwise (torchtitan's setting: nothing to replay)."""
    if mode in ("none", "selective-attn"):
        if mode == "selective-attn":
            enable_attention_recompute()
        return 0
    from torch.distributed.algorithms._checkpoint.checkpoint_wrapper import checkpoint_wrapper

    layers = hf.model.layers
    every = int(mode.split("-", 1)[1]) if mode.startswith("every-") else 1
    n = 0
    for i in range(len(layers)):
        if mode == "selective-op":
            layers[i] = checkpoint_wrapper(layers[i], context_fn=_sac_context_fn, preserve_rng_state=preserve_rng_state)
        elif i % every == 0:
            layers[i] = checkpoint_wrapper(layers[i], preserve_rng_state=preserve_rng_state)
        else:
            continue
        n += 1
    return n


def apply_compile(hf: nn.Module) -> None:
    """torch.compile each decoder block in place (after AC, before FSDP: torchtitan apply_compile)."""
    for layer in hf.model.layers:
        layer.compile()


# ---------------------------------------------------------------------------------------------
# Data parallel


def offload_policy(offload: str) -> Optional[Any]:
    """The FSDP2 offload policy of the plan's ``offload``: ``CPUOffloadPolicy(pin_memory=True)``
    for ``optimizer,params`` (sharded parameters, their gradients and the optimizer step on the
    host: torch/distributed/fsdp/_fully_shard/_fsdp_api.py), None for ``none``. The other sets
    are refused by the contract (T-offload-optimizer, T-offload-activations) before this runs."""
    if offload == "none":
        return None
    if offload != "optimizer,params":
        raise ValueError(f"offload {offload}: the reference trainer runs optimizer,params only (FSDP2 CPUOffloadPolicy)")
    from torch.distributed.fsdp import CPUOffloadPolicy

    return CPUOffloadPolicy(pin_memory=True)


def mixed_precision_dtypes(master_weights: str) -> Dict[str, Any]:
    """FSDP2's ``MixedPrecisionPolicy`` arguments for the plan's master weights: fp32 masters compute in bf16 and
    reduce gradients in fp32 (the ground truth's fsdp2 recipe); bf16 masters are "everything bf16"
    (docs/training-contract.md), so gradients reduce in bf16 too. FSDP2 keeps a ``reduce_dtype`` that differs from
    ``param_dtype`` even when the parameters are already bf16 (``FSDPParam.init_dtype_attrs``,
    torch/distributed/fsdp/_fully_shard/_fsdp_param.py): an fp32 ``reduce_dtype`` there would add an fp32
    reduce-scatter copy and fp32 traffic that bwplan's bf16 plan does not count."""
    reduce = torch.float32 if master_weights == "fp32" else torch.bfloat16
    return {"param_dtype": torch.bfloat16, "reduce_dtype": reduce}


def apply_fsdp(train_module: nn.Module, hf: nn.Module, mesh, sharding: str, offload: str = "none",
               master_weights: str = "fp32") -> None:
    """FSDP2 per decoder block, then the root (embedding, final norm and LM head stay in the
    root's group), as the ground truth's fsdp2 recipe (shared/groundtruth/measure.py), with
    :func:`mixed_precision_dtypes` of ``master_weights``. With
    ``offload`` optimizer,params every unit gets ``offload_policy=CPUOffloadPolicy(pin_memory=True)``
    (torchtitan's ``training.enable_cpu_offload`` does the same); the caller then materialises the
    parameters on the CPU (:func:`materialise_device`)."""
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

    mp = MixedPrecisionPolicy(**mixed_precision_dtypes(master_weights))
    reshard = sharding != "grad-op"
    kw: Dict[str, Any] = {}
    policy = offload_policy(offload)
    if policy is not None:
        kw["offload_policy"] = policy
    for layer in hf.model.layers:
        fully_shard(layer, mesh=mesh, mp_policy=mp, reshard_after_forward=reshard, **kw)
    fully_shard(train_module, mesh=mesh, mp_policy=mp, reshard_after_forward=reshard, **kw)


def materialise_device(offload: str, device: torch.device) -> torch.device:
    """Where ``to_empty`` puts the parameters: the CPU under FSDP2 CPU offload (the sharded
    parameters live in host memory and are copied to the GPU before each all-gather, as
    torchtitan's ``init_device = "cpu"`` when ``enable_cpu_offload``), else the GPU. Buffers
    (rotary embeddings) are rebuilt on the GPU either way."""
    return torch.device("cpu") if offload == "optimizer,params" else device


def apply_ddp(train_module: nn.Module, mesh, local_rank: int) -> nn.Module:
    from torch.nn.parallel import DistributedDataParallel

    return DistributedDataParallel(train_module, device_ids=[local_rank], process_group=mesh["dp_cp"].get_group(),
                                   broadcast_buffers=False)


def context_parallel_context(cp_mesh, buffers) -> Any:
    """Shard ``buffers`` ([batch, seq] tensors) along dim 1 over the cp ranks for the forward and
    backward inside; they stay sharded afterwards (no_restore_buffers)."""
    if cp_mesh is None:
        return contextlib.nullcontext()
    from torch.distributed.tensor.experimental import context_parallel

    return context_parallel(cp_mesh, buffers=list(buffers), buffer_seq_dims=[1] * len(buffers),
                            no_restore_buffers=set(buffers))


def group_of(mesh: Optional[Any], dim: str):
    return None if mesh is None else mesh[dim].get_group()
