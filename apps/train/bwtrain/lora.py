"""LoRA (plan ``finetune lora``): PEFT adapters on a frozen bf16 base, as bwplan plans them (docs/finetune.md).

What the trainer runs, and where bwplan's terms come from:

* :func:`apply_lora` injects PEFT's LoRA layers into the Hugging Face model in place
  (``peft.inject_adapter_in_model``, src/peft/mapping.py @v0.20.0), on the meta device before tensor
  parallelism, checkpointing, compile and FSDP2 wrap the blocks, as torchtune and accelerate wrap a PEFT model
  before sharding it. ``LoraConfig(r=lora_rank, lora_alpha=lora_alpha, target_modules=…, lora_dropout=lora_dropout,
  bias="none")``: ``lora_A`` is ``nn.Linear(d_in, r, bias=False)`` and ``lora_B`` ``nn.Linear(r, d_out, bias=False)``
  (src/peft/tuners/lora/layer.py ``LoraLayer.update_layer``). Injection marks only the adapters trainable
  (``BaseTuner.inject_adapter`` → ``_mark_only_adapters_as_trainable``, src/peft/tuners/tuners_utils.py): the
  embedding, norms, block linears and LM head keep no gradient and no optimizer state.
* The frozen base is cast to bf16 and the adapters stay in the master dtype (fp32 or bf16): bwplan's parameters
  ``2·P + w·Pt`` (``terms::model_state_bytes``). Without FSDP the step runs without autocast (the residual stream is
  bf16, as a base loaded in bf16 gives it), so with fp32 adapters PEFT casts each adapted linear's input to fp32
  (``LoraLayer._cast_input_dtype``) and the adapter GEMMs run in fp32: the ``4·d_in`` copies bwplan counts
  (``terms::adapter_saved_delta``). Under FSDP2 the adapters are gathered in bf16 (``MixedPrecisionPolicy``) and
  the copies vanish, as bwplan counts them. FSDP2 requires one dtype among a group's trainable parameters only
  (the adapters), so the bf16 base shards beside them.
* :func:`init_adapters` gives every adapter PEFT's own initialisation after the model is materialised
  (``reset_lora_parameters(adapter, True)``: ``lora_A`` Kaiming-uniform, ``lora_B`` zeros, so step 0's model is the
  base model); it runs on FSDP2's DTensor shards as torchtitan's initialisation does.
* :func:`base_layer_key` maps a pretrained checkpoint's names to the wrapped ones
  (``q_proj.weight`` → ``q_proj.base_layer.weight``, PEFT's ``BaseTunerLayer.base_layer``).

Only the helpers that need them import torch and peft (the module is imported by torch-free tests).
"""

from __future__ import annotations

from typing import Any, Dict, Iterable, List

#: PEFT's adapter name for the one adapter the trainer injects.
ADAPTER = "default"

#: The plan's ``lora_targets`` groups, as bwplan names the linears (training.hpp ``lora_target``).
ATTENTION = ("q_proj", "k_proj", "v_proj", "o_proj")
MLP = ("gate_proj", "up_proj", "down_proj")


def target_modules(spec: str) -> List[str]:
    """PEFT ``target_modules`` of the plan's ``lora_targets``: ``attention``, ``mlp``, ``all-linear`` (the seven
    block linears; never the LM head, as PEFT's own ``all-linear`` excludes the output layer) or a comma list of
    ``q``/``q_proj`` … ``down``/``down_proj`` (the contract's pattern). Raises ValueError for anything else."""
    spec = (spec or "all-linear").strip()
    if spec == "attention":
        return list(ATTENTION)
    if spec == "mlp":
        return list(MLP)
    if spec == "all-linear":
        return list(ATTENTION + MLP)
    out: List[str] = []
    for part in spec.split(","):
        name = part.strip()
        name = name if name.endswith("_proj") else name + "_proj"
        if name not in ATTENTION + MLP:
            raise ValueError(f"lora_targets {spec!r}: {part!r} is not one of q, k, v, o, gate, up, down (_proj)")
        if name not in out:
            out.append(name)
    return out


def _given(plan: Dict[str, Any], key: str, default: Any) -> Any:
    """The plan's value of ``key``, ``default`` only where it is absent or None (a falsy 0 is a value: alpha 0 ran as 32)."""
    v = plan.get(key)
    return default if v is None else v


def lora_settings(plan: Dict[str, Any]) -> Dict[str, Any]:
    """The ``LoraConfig`` keyword arguments of a plan (the contract's defaults where a key is absent: r 16,
    alpha 32, all-linear, dropout 0)."""
    return {
        "r": int(_given(plan, "lora_rank", 16)),
        "lora_alpha": float(_given(plan, "lora_alpha", 32)),
        "target_modules": target_modules(_given(plan, "lora_targets", "all-linear")),
        "lora_dropout": float(_given(plan, "lora_dropout", 0.0)),
        "bias": "none",
    }


def is_lora(plan: Dict[str, Any]) -> bool:
    return plan.get("finetune", "full") == "lora"


def unmatched_targets(targets: Iterable[str], adapted: Iterable[str]) -> List[str]:
    """The ``targets`` (PEFT ``target_modules`` names) that no adapted module's name ends with, in order."""
    leaves = {name.rpartition(".")[2] for name in adapted}
    return [t for t in targets if t not in leaves]


def base_layer_key(key: str, model_keys: Iterable[str]) -> str:
    """The model's name for a checkpoint key: ``….q_proj.weight`` becomes ``….q_proj.base_layer.weight`` when only
    that one is in ``model_keys`` (an adapted linear); other keys are returned unchanged."""
    keys = model_keys if isinstance(model_keys, (set, frozenset, dict)) else set(model_keys)
    if key in keys:
        return key
    head, dot, leaf = key.rpartition(".")
    wrapped = f"{head}.base_layer.{leaf}" if dot else key
    return wrapped if wrapped in keys else key


def apply_lora(hf, plan: Dict[str, Any], master_dtype) -> Dict[str, Any]:
    """Inject the plan's LoRA adapters into ``hf`` (on the meta device), cast every frozen parameter to bf16 and
    the adapters to ``master_dtype`` (PEFT creates them in torch's default fp32 on the meta device, where
    ``_move_adapter_to_device_of_base_layer`` leaves them). A parameter shared by two modules (tied embedding and LM
    head) stays shared. Returns the run record's ``lora`` entry: the settings, the adapted linears and the trainable
    parameter count. Raises ValueError when a target matches no linear (unmatched_targets)."""
    import torch
    import torch.nn as nn
    from peft import LoraConfig, inject_adapter_in_model

    kw = lora_settings(plan)
    config = LoraConfig(**kw)
    inject_adapter_in_model(config, hf, adapter_name=ADAPTER, low_cpu_mem_usage=True)
    adapted = [name for name, m in hf.named_modules() if hasattr(m, "lora_A") and ADAPTER in getattr(m, "lora_A", {})]
    if not adapted:
        raise ValueError(f"lora_targets {plan.get('lora_targets')!r} matched no linear of the model")
    # every target must match: the plan prices adapters on each of them in every block. A fused layout (Phi-3's
    # qkv_proj and gate_up_proj) matches only some, and PEFT injects the rest silently (a review: 8.9 M trainable
    # parameters where the plan counted 29.9 M)
    missing = unmatched_targets(kw["target_modules"], adapted)
    if missing:
        raise ValueError(f"lora_targets {plan.get('lora_targets')!r}: {', '.join(missing)} matched no linear of the model "
                         f"({type(hf).__name__}; a fused projection such as qkv_proj or gate_up_proj is not one the plan prices)")
    cast: Dict[int, Any] = {}  # id(old parameter) -> (old, replacement): tied parameters stay tied; old kept alive
    trainable = 0
    for module in hf.modules():
        for name, p in list(module._parameters.items()):
            if p is None:
                continue
            if id(p) not in cast:
                dtype = master_dtype if p.requires_grad else torch.bfloat16
                if p.requires_grad:
                    trainable += p.numel()
                cast[id(p)] = (p, p if p.dtype == dtype else nn.Parameter(p.to(dtype), requires_grad=p.requires_grad))
            module._parameters[name] = cast[id(p)][1]
    return {"r": kw["r"], "lora_alpha": kw["lora_alpha"], "target_modules": kw["target_modules"],
            "lora_dropout": kw["lora_dropout"], "adapted_linears": len(adapted), "params_trainable": trainable}


def init_adapters(hf, seed: int) -> int:
    """PEFT's initialisation of every adapter (``lora_A`` Kaiming-uniform, ``lora_B`` zeros) after ``to_empty`` and
    the base's initialisation; returns how many adapted linears were initialised."""
    import torch

    torch.manual_seed(seed + 1)
    n = 0
    with torch.no_grad():
        for m in hf.modules():
            if hasattr(m, "reset_lora_parameters") and ADAPTER in getattr(m, "lora_A", {}):
                m.reset_lora_parameters(ADAPTER, True)
                n += 1
    return n


def trainable_parameters(module) -> List[Any]:
    """The parameters the optimizer steps: those that require a gradient (all of them for a full fine-tune)."""
    return [p for p in module.parameters() if p.requires_grad]
