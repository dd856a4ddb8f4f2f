"""The model: where it comes from, how it is built, initialised and loaded.

Construction follows torchtitan's meta-device flow (torchtitan/train.py: build under
``torch.device("meta")``, convert, parallelise, then ``to_empty`` and initialise), applied to a
Hugging Face causal LM as torchtitan's transformers_modeling_backend does
(experiments/transformers_modeling_backend/model/model.py):

* the config comes from ``transformers.AutoConfig`` (``from_pretrained`` for a hub id or a
  directory, ``for_model`` for a bare config.json), the module from
  ``transformers.AutoModelForCausalLM.from_config(config, attn_implementation="sdpa")``;
* pretrained weights are read on rank 0 only (``AutoModelForCausalLM.from_pretrained`` on CPU) and
  broadcast into the sharded model with ``torch.distributed.checkpoint.state_dict.set_model_state_dict``
  (``StateDictOptions(full_state_dict=True, broadcast_from_rank0=True)``), as torchtune does;
* a gated hub model needs ``HF_TOKEN`` in the job's Environment (huggingface_hub reads it).

The trainer forward is :class:`CausalLMTrainModule`: the base model (``hf.model``) gives the hidden
states, ``bwtrain.loss`` the loss; it is the FSDP root so FSDP2's root hooks run.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
from typing import Any, Dict, List, Optional

import torch
import torch.distributed as dist
import torch.nn as nn

from . import loss as loss_mod


class Refusal(RuntimeError):
    """The trainer cannot run this plan; ``field`` names the plan field."""

    def __init__(self, field: str, value: Any, rid: str, reason: str):
        super().__init__(f"refused: {field}={value} ({rid}): {reason}")
        self.field, self.value, self.rid, self.reason = field, value, rid, reason


# ---------------------------------------------------------------------------------------------
# Where the model comes from


def resolve_source(model: str, model_init: str, presets: Dict[str, str], script_dir: str) -> Dict[str, str]:
    """Classify the ``model`` hyperparameter: {'kind': preset-config | config-file | local-dir | hub
    | s3, 'path' or 'id'}. A preset with model_init random uses the bundled config.json (source
    dir ``models/`` or the repository's ``configs/models/``), else its hub id."""
    if model.startswith("s3://"):
        return {"kind": "s3", "id": model}
    for base in (None, script_dir, os.getcwd()):
        p = model if base is None else os.path.join(base, model)
        if os.path.isabs(p) or base is not None:
            if os.path.isdir(p):
                return {"kind": "local-dir", "path": os.path.abspath(p)}
            if os.path.isfile(p) and p.endswith(".json"):
                return {"kind": "config-file", "path": os.path.abspath(p)}
    key = model.lower()
    if key in presets:
        if model_init == "random":
            for d in (os.path.join(script_dir, "models"), os.path.join(script_dir, "..", "..", "configs", "models")):
                p = os.path.join(d, key + ".json")
                if os.path.isfile(p):
                    return {"kind": "preset-config", "path": os.path.abspath(p), "id": presets[key]}
        return {"kind": "hub", "id": presets[key]}
    if model.count("/") == 1 and not model.startswith((".", "/")):
        return {"kind": "hub", "id": model}
    raise Refusal("model", model, "T-model", "not a preset, hub id (org/name), s3:// URI, directory or config.json file")


def fetch_s3(uri: str, local_rank: int) -> str:
    """Copy an s3:// model prefix to local disk (local rank 0 of each node downloads; the others
    wait for its marker file). A ``model`` input channel holding the same files is used instead
    when present (SM_CHANNEL_MODEL), which spares the download."""
    chan = os.environ.get("SM_CHANNEL_MODEL")
    if chan and os.path.isfile(os.path.join(chan, "config.json")):
        return chan
    dest = os.path.join("/tmp", "bwplan-model-" + hashlib.sha1(uri.encode()).hexdigest()[:12])
    done = os.path.join(dest, ".complete")
    if local_rank == 0 and not os.path.exists(done):
        import boto3  # in the SageMaker images (sagemaker-training depends on it)

        bucket, _, prefix = uri[5:].partition("/")
        s3 = boto3.client("s3")
        for page in s3.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix):
            for obj in page.get("Contents", []):
                rel = obj["Key"][len(prefix):].lstrip("/")
                if not rel or rel.endswith("/"):
                    continue
                target = os.path.join(dest, rel)
                os.makedirs(os.path.dirname(target), exist_ok=True)
                s3.download_file(bucket, obj["Key"], target)
        open(done, "w").close()
    import time

    while not os.path.exists(done):
        time.sleep(2)
    return dest


def load_config(src: Dict[str, str], local_rank: int):
    """transformers config for the source (no weights read)."""
    import transformers

    if src["kind"] in ("config-file", "preset-config"):
        with open(src["path"], encoding="utf-8") as f:
            d = json.load(f)
        model_type = d.pop("model_type", None)
        if not model_type:
            raise Refusal("model", src["path"], "T-model", "config.json has no model_type")
        return transformers.AutoConfig.for_model(model_type, **d)
    if src["kind"] == "s3":
        src["path"] = fetch_s3(src["id"], local_rank)
        src["kind"] = "local-dir"
    return transformers.AutoConfig.from_pretrained(src.get("path") or src["id"])


def check_config(config, plan: Dict[str, Any]) -> None:
    """Refusals that need the model's numbers (T-model, T-tp-heads)."""
    for k in ("num_experts", "num_local_experts", "n_routed_experts"):
        if getattr(config, k, 0):
            raise Refusal("model", plan["model"], "T-model", f"MoE model ({k}={getattr(config, k)}): the reference trainer runs dense models only")
    tp = plan["tp"]
    heads = getattr(config, "num_attention_heads", None)
    kv = getattr(config, "num_key_value_heads", None) or heads
    if tp > 1 and (heads is None or heads % tp or kv % tp):
        raise Refusal("tp", tp, "T-tp-heads", f"tp must divide the attention heads ({heads}) and KV heads ({kv})")


# ---------------------------------------------------------------------------------------------
# Building


def build_on_meta(config, master_dtype: torch.dtype):
    """The Hugging Face model on the meta device (no memory), parameters in the master dtype."""
    import transformers

    config.use_cache = False
    with torch.device("meta"):
        model = transformers.AutoModelForCausalLM.from_config(config, attn_implementation="sdpa")
    model.to(master_dtype)
    return model


def decoder_layers(hf) -> nn.ModuleList:
    return hf.model.layers


def check_structure(hf, plan: Dict[str, Any]) -> None:
    """The layout the trainer relies on (T-model); with tp > 1 also the projection names (T-tp-heads)."""
    base = getattr(hf, "model", None)
    for name in ("layers", "embed_tokens", "norm"):
        if base is None or not hasattr(base, name):
            raise Refusal("model", plan["model"], "T-model", f"{type(hf).__name__} has no model.{name}")
    if not isinstance(getattr(hf, "lm_head", None), nn.Linear):
        raise Refusal("model", plan["model"], "T-model", f"{type(hf).__name__} has no lm_head Linear")
    if plan["tp"] > 1:
        layer = base.layers[0]
        need = ["self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "self_attn.o_proj",
                "mlp.gate_proj", "mlp.up_proj", "mlp.down_proj", "input_layernorm", "post_attention_layernorm"]
        names = {n for n, _ in layer.named_modules()}
        missing = [n for n in need if n not in names]
        if missing:
            raise Refusal("tp", plan["tp"], "T-tp-heads", f"decoder block lacks {', '.join(missing)} for the tensor-parallel plan")


#: transformers' RMSNorm classes whose forward is Llama's formula, ``weight * (x.float() * rsqrt(mean(x²) + eps)).to(dtype)``
#: (modeling_llama.py ``LlamaRMSNorm``; Mistral, Qwen2, Qwen3 and Phi3 copy it): ``F.rms_norm`` computes the same function.
LLAMA_FORMULA_NORMS = ("LlamaRMSNorm", "MistralRMSNorm", "Qwen2RMSNorm", "Qwen3RMSNorm", "Phi3RMSNorm")


def apply_module_kernels(hf, plan: Dict[str, Any]) -> Dict[str, Any]:
    """The norms of the plan's ``modules`` (docs/stacks.md#modules). ``fused``: every block norm (``input_layernorm``,
    ``post_attention_layernorm``) and the final norm (``model.norm``) run ``F.rms_norm`` (ATen's fused kernel: autograd
    saves the input and the rstd, where transformers' eager forward saves an fp32 copy and the normalized tensor too).
    Qwen3's per-head q/k norms keep transformers' forward, which bwplan's q/k-norm terms describe (under autocast their
    fp32 weights make q and k fp32, so its RoPE stays fp32 either way). ``transformers``: the modules as published.
    Installed before compile and FSDP (neither touches a norm's ``forward``); the rotary tables are
    apply_rotary_dtype's, after ``rebuild_buffers`` replaces the rotary modules. Returns what was installed, for the run
    record. Refuses (T-modules) a model whose block or final norm is not the Llama formula (Gemma's ``1 + weight``)."""
    if plan.get("modules", "fused") == "transformers":
        return {"modules": "transformers", "fused_norms": 0, "bf16_rotary_tables": False}
    import torch.nn.functional as F

    base = hf.model
    norms = [base.norm]
    for i, layer in enumerate(base.layers):
        for attr in ("input_layernorm", "post_attention_layernorm"):
            n = getattr(layer, attr, None)
            if n is None:
                raise Refusal("modules", "fused", "T-modules", f"decoder block {i} has no {attr}; use modules transformers")
            norms.append(n)
    for n in norms:
        cls = type(n).__name__
        if cls not in LLAMA_FORMULA_NORMS or not hasattr(n, "variance_epsilon"):
            raise Refusal("modules", "fused", "T-modules", f"{cls} is not transformers' Llama RMSNorm formula; use modules transformers")

        def forward(x, _n=n):
            return F.rms_norm(x, (x.shape[-1],), _n.weight, _n.variance_epsilon)

        n.forward = forward
    return {"modules": "fused", "fused_norms": len(norms), "bf16_rotary_tables": False}


def apply_rotary_dtype(hf, plan: Dict[str, Any], autocast: bool, record: Dict[str, Any]) -> None:
    """``modules fused`` under ``autocast`` (the trainer's fp32-master recipe without FSDP; engine.py): the rotary tables
    are cast to bf16, so RoPE runs in the projections' dtype as in the ground truth's decoder (``cos.to(q.dtype)``);
    transformers returns them in the residual's dtype, fp32 there. Elsewhere the residual, and so the tables, are bf16
    already. Called after ``rebuild_buffers``, which replaces the rotary modules; sets ``record["bf16_rotary_tables"]``."""
    if plan.get("modules", "fused") != "fused" or not autocast:
        return
    rotary = getattr(hf.model, "rotary_emb", None)
    if rotary is None:
        return
    inner = rotary.forward

    def rotary_forward(x, *args, **kwargs):
        cos, sin = inner(x, *args, **kwargs)
        return cos.to(torch.bfloat16), sin.to(torch.bfloat16)  # autocast's compute dtype (engine.py)

    rotary.forward = rotary_forward
    record["bf16_rotary_tables"] = True


def tie_embeddings(hf) -> None:
    """Re-tie the LM head to the embedding when the config says so (a meta -> device copy of a
    plain tensor makes new Parameter objects, nn.Module._apply; DTensor parameters are swapped in
    place and keep the tie)."""
    if getattr(hf.config, "tie_word_embeddings", False):
        hf.lm_head.weight = hf.model.embed_tokens.weight


def is_tied(hf) -> bool:
    return hf.lm_head.weight is hf.model.embed_tokens.weight


def install_causal_hooks(hf) -> None:
    """Every ``*self_attn`` module is called without a mask and with is_causal=True: the packed
    data has no padding, and context parallelism supports SDPA only without a mask. Same hook as
    accelerate's ``_attach_context_parallel_hooks`` (accelerate/big_modeling.py); the HF SDPA path
    then calls F.scaled_dot_product_attention(is_causal=True) (transformers
    integrations/sdpa_attention.py)."""

    def hook(_module, args, kwargs):
        if "attention_mask" in kwargs:
            kwargs["attention_mask"] = None
            kwargs["is_causal"] = True
        return args, kwargs

    for name, module in hf.named_modules():
        if name.endswith("self_attn"):
            module.register_forward_pre_hook(hook, with_kwargs=True, prepend=True)


@torch.no_grad()
def init_weights(hf, seed: int) -> None:
    """Random initialisation after ``to_empty``: normal(0, initializer_range) for linears and
    embeddings, ones for norms (zeros for Gemma's 1 + weight norms), zero biases. Works on
    DTensor parameters (random ops on DTensor follow the mesh's RNG tracker)."""
    std = float(getattr(hf.config, "initializer_range", 0.02))
    torch.manual_seed(seed)
    for name, m in hf.named_modules():
        w = getattr(m, "weight", None)
        if not isinstance(w, torch.Tensor):
            continue
        cls = type(m).__name__
        if isinstance(m, (nn.Linear, nn.Embedding)) or "Linear" in cls:
            w.normal_(0.0, std)
            b = getattr(m, "bias", None)
            if isinstance(b, torch.Tensor):
                b.zero_()
        elif "Norm" in cls:
            w.fill_(0.0 if cls.startswith("Gemma") else 1.0)
            b = getattr(m, "bias", None)
            if isinstance(b, torch.Tensor):
                b.zero_()


def rebuild_buffers(hf, device: torch.device) -> None:
    """Buffers made on the meta device hold nothing after ``to_empty``: rebuild the rotary
    embeddings (non-persistent ``inv_freq``) with their own constructor
    (``<Model>RotaryEmbedding(config, device)``, transformers modeling_llama.py); refuse any other
    unknown buffer rather than train with garbage."""
    replaced = set()
    for name, m in list(hf.named_modules()):
        if type(m).__name__.endswith("RotaryEmbedding") and hasattr(m, "config"):
            parent_name, _, attr = name.rpartition(".")
            parent = hf.get_submodule(parent_name) if parent_name else hf
            setattr(parent, attr, type(m)(config=m.config, device=device))
            replaced.add(name)
    for name, _ in hf.named_buffers():
        owner = name.rpartition(".")[0]
        if any(owner == r or owner.startswith(r + ".") for r in replaced):
            continue
        if name.rpartition(".")[2] in ("_sr_seed", "_rht_sign_vector"):
            continue  # NVFP4Linear, handled by bwtrain.precision.init_buffers
        raise Refusal("model", hf.config.model_type, "T-model", f"buffer {name} cannot be rebuilt after meta-device construction")


def load_pretrained(train_module, src: Dict[str, str], rank: int) -> None:
    """Rank 0 reads the checkpoint on CPU; ``set_model_state_dict`` broadcasts it into the sharded
    (FSDP/TP DTensor) or plain parameters. Keys are the HF names under the ``hf.`` prefix; a LoRA-adapted
    linear's weight goes to its ``base_layer`` (bwtrain.lora.base_layer_key) and its adapters, which no base
    checkpoint holds, keep their initialisation."""
    from torch.distributed.checkpoint.state_dict import StateDictOptions, set_model_state_dict
    import transformers

    from .lora import base_layer_key

    def expected(k: str) -> bool:  # keys no base checkpoint holds: NVFP4's buffers, LoRA's adapters
        return not k.endswith(("_sr_seed", "_rht_sign_vector")) and ".lora_A." not in k and ".lora_B." not in k

    full: Dict[str, torch.Tensor] = {}
    missing: List[str] = []
    if rank == 0:
        m = transformers.AutoModelForCausalLM.from_pretrained(src.get("path") or src["id"], attn_implementation="sdpa")
        keys = set(train_module.state_dict().keys())
        full = {base_layer_key("hf." + k, keys): v for k, v in m.state_dict().items()}
        del m
        # what the model holds and the checkpoint does not: decided on rank 0, which alone reads the checkpoint
        # (set_model_state_dict's broadcast path reports no missing keys: it fills them from the local state)
        missing = sorted(k for k in keys - set(full) if expected(k))
    if dist.is_available() and dist.is_initialized():
        box = [missing]
        dist.broadcast_object_list(box, src=0)
        missing = box[0]
        if not missing:
            opts = StateDictOptions(full_state_dict=True, broadcast_from_rank0=True, strict=False)
            set_model_state_dict(train_module, full, options=opts)
    elif not missing:  # one process: a plain copy (CheckpointWrapper's load hooks map the names)
        result = train_module.load_state_dict(full, strict=False)
        missing = [k for k in getattr(result, "missing_keys", []) if expected(k)]
    if missing:
        raise Refusal("model", src.get("id") or src.get("path"), "T-model", f"checkpoint lacks {len(missing)} weights, e.g. {missing[0]}")


def count_params(hf) -> Dict[str, int]:
    """params (tied embeddings once) and params_nonembed (minus embedding and LM head), as the
    ground truth counts them (shared/groundtruth/measure.py)."""
    seen = set()
    total = 0
    for p in hf.parameters():
        if id(p) in seen:
            continue
        seen.add(id(p))
        total += p.numel()
    v, h = hf.config.vocab_size, hf.config.hidden_size
    nonembed = total - v * h * (1 if is_tied(hf) else 2)
    return {"params": total, "params_nonembed": nonembed}


def flops_per_token(hf, seq_len: int, params_nonembed: int, params_trainable: Optional[int] = None) -> float:
    """Training FLOPs per token: 6 x (non-embedding parameters + LM head) + 12 x layers x heads x
    head_dim x seq_len (torchtitan's get_num_flop_per_token, the LM head counted once). With LoRA
    (``params_trainable``, the adapters) the frozen weights cost forward and input gradient only, 4 x
    (non-embedding parameters - adapters + LM head), and the adapters 6 x theirs: bwplan's MFU of a frozen
    base (docs/finetune.md "MFU counts the FLOPs the step needs")."""
    c = hf.config
    heads = c.num_attention_heads
    head_dim = getattr(c, "head_dim", None) or c.hidden_size // heads
    attention = 12.0 * c.num_hidden_layers * heads * head_dim * seq_len
    if params_trainable is None:
        return 6.0 * (params_nonembed + c.vocab_size * c.hidden_size) + attention
    return 4.0 * (params_nonembed - params_trainable + c.vocab_size * c.hidden_size) + 6.0 * params_trainable + attention


class CausalLMTrainModule(nn.Module):
    """input ids -> loss. The base model gives the last hidden states; the loss (standard or
    chunked, ``bwtrain.loss``) applies the LM head. Being one module makes it the FSDP root."""

    def __init__(self, hf, loss: str, loss_parallel: bool):
        super().__init__()
        self.hf = hf
        self.loss_kind = loss
        self.loss_parallel = loss_parallel

    def forward(self, input_ids: torch.Tensor, labels: torch.Tensor, position_ids: torch.Tensor) -> torch.Tensor:
        out = self.hf.model(input_ids=input_ids, position_ids=position_ids, use_cache=False)
        h = out.last_hidden_state if hasattr(out, "last_hidden_state") else out[0]
        if self.loss_kind == "chunked":
            return loss_mod.chunked_loss(h, self.hf.lm_head, labels)
        return loss_mod.standard_loss(h, self.hf.lm_head, labels)


def bf16_kept(plan: Dict[str, Any], layers: int) -> List[int]:
    import contract

    return contract.parse_bf16_layers(plan["bf16_layers"], layers)


def local_features(linear: nn.Module, fqn: str, tp: int) -> tuple:
    """(in, out) features one tensor-parallel rank multiplies: q/k/v/gate/up are split on out,
    o/down on in (the tensor-parallel plan in bwtrain.parallel)."""
    i, o = linear.in_features, linear.out_features
    if tp > 1:
        leaf = fqn.rsplit(".", 1)[-1]
        if leaf in ("o_proj", "down_proj"):
            i = math.ceil(i / tp)
        else:
            o = math.ceil(o / tp)
    return i, o
