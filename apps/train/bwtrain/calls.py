"""What ``train.py --dry-run`` prints: the library calls a plan leads to, in order (no torch).

Keep in step with bwtrain/engine.py and the modules it calls; tests/train/test_trainer_static.py
checks that every API named here is one the pinned snapshot lists.
"""

from __future__ import annotations

from typing import Any, Dict, List

import contract as C

from .lora import lora_settings


def describe(plan: Dict[str, Any], local_world_size: int = 8) -> List[str]:
    lay = C.layout(plan, local_world_size)
    tp, cp = plan["tp"], plan["cp"]
    fsdp = plan["sharding"] != "none"
    distributed = plan["gpus"] > 1 or fsdp or tp > 1 or cp > 1
    calls: List[str] = []
    add = calls.append
    if distributed:
        add('torch.distributed.init_process_group("nccl", device_id=cuda:LOCAL_RANK)')
        add(f'torch.distributed.device_mesh.init_device_mesh("cuda", ({lay["dp_replicate"]}, {lay["dp_shard"]}, {cp}, {tp}), '
            'mesh_dim_names=("dp_replicate", "dp_shard", "cp", "tp")); _flatten dp_shard_cp, dp, dp_cp')
    add(f'transformers.AutoConfig (model={plan["model"]!r}, model_init={plan["model_init"]})')
    add('transformers.AutoModelForCausalLM.from_config(config, attn_implementation="sdpa") under torch.device("meta"), '
        f'parameters {plan["master_weights"]}')
    prec = plan["precision"]
    if prec != "bf16":
        kept = f'blocks kept bf16: {plan["bf16_layers"]}'
        if prec in ("fp8", "fp8-rowwise"):
            recipe = "tensorwise" if prec == "fp8" else "rowwise"
            cfg = f'Float8LinearConfig.from_recipe_name("{recipe}")'
            if plan["fp8_all_gather"]:
                cfg = f"dataclasses.replace({cfg}, enable_fsdp_float8_all_gather=True)"
            add(f"torchao.float8.convert_to_float8_training(model, config={cfg}, module_filter_fn=decoder-block linears; {kept})")
        elif prec == "mxfp8":
            add('torchao.quantization.quantize_(model, MXFP8TrainingOpConfig.from_recipe(MXFP8TrainingRecipe.MXFP8_RCEIL), '
                f'filter_fn=decoder-block linears; {kept}) [needs SM100 and a torch with the DTensor scaled_mm strategy]')
        else:
            add(f'torchao.quantization.quantize_(model, NVFP4TrainingConfig(), filter_fn=decoder-block linears; {kept}) [needs SM100]')
    lora = plan.get("finetune", "full") == "lora"
    amp = not fsdp and plan["master_weights"] == "fp32" and not lora
    if lora:
        kw = lora_settings(plan)
        add(f'peft.inject_adapter_in_model(LoraConfig(r={kw["r"]}, lora_alpha={kw["lora_alpha"]:g}, '
            f'target_modules={kw["target_modules"]}, lora_dropout={kw["lora_dropout"]:g}, bias="none"), model, '
            f'low_cpu_mem_usage=True): base frozen and cast to bf16, adapters {plan["master_weights"]}')
    add("forward pre-hook on every self_attn: attention_mask=None, is_causal=True")
    if tp > 1:
        style = "Float8ColwiseParallel/Float8RowwiseParallel/PrepareFloat8ModuleInput" if prec == "fp8" else \
            "ColwiseParallel/RowwiseParallel/PrepareModuleInput"
        add(f"torch.distributed.tensor.parallel.parallelize_module(model, tp_mesh[{tp}]): embed_tokens RowwiseParallel"
            "(output Shard(1)), norm SequenceParallel, lm_head ColwiseParallel(output Shard(-1)) + loss_parallel; "
            f"per block q/k/v gate/up colwise, o/down rowwise(output Shard(1)), norms SequenceParallel ({style})")
    ac = plan["activation_checkpointing"]
    rng = "True" if lora and float(plan.get("lora_dropout") or 0) > 0 else "False"
    if ac == "full":
        add(f"checkpoint_wrapper(block, preserve_rng_state={rng}) for every decoder block")
    elif ac.startswith("every-"):
        add(f"checkpoint_wrapper(block) for blocks 0, {ac[6:]}, 2x{ac[6:]}, ...")
    elif ac == "selective-op":
        add("checkpoint_wrapper(block, context_fn=create_selective_checkpoint_contexts(torchtitan save list, every 2nd mm recomputed))")
    elif ac == "selective-attn":
        add('transformers.AttentionInterface.register("sdpa", checkpointed sdpa_attention_forward)')
    if plan.get("modules", "fused") == "fused":
        add("F.rms_norm as the forward of model.norm and every block's input_layernorm / post_attention_layernorm"
            + ("; rotary tables cast to bf16" if amp else "")
            + " (modules fused)")
    else:
        add("transformers' own RMSNorm and rotary tables (modules transformers)")
    if plan["compile"]:
        add("block.compile() for every decoder block")
    if plan.get("expandable_segments"):
        add("PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True (set before CUDA initialises)")
    offload = plan.get("offload", "none")
    if fsdp:
        mesh = "mesh[dp_replicate, dp_shard_cp] (HSDP)" if plan["sharding"] == "hybrid" else "mesh[dp_shard_cp]"
        add(f"torch.distributed.fsdp.fully_shard(block | root, mesh={mesh}, mp_policy=MixedPrecisionPolicy(param_dtype=bf16, "
            f"reduce_dtype=fp32), reshard_after_forward={plan['sharding'] != 'grad-op'}"
            + (", offload_policy=CPUOffloadPolicy(pin_memory=True))" if offload == "optimizer,params" else ")"))
    if offload == "optimizer,params":
        add("module.to_empty(device=cpu) (the sharded parameters live in host memory); re-tie embeddings; rebuild rotary buffers on "
            "cuda; initialise weights")
    else:
        add("module.to_empty(device=cuda); re-tie embeddings; rebuild rotary buffers; initialise weights"
            + ("; adapters: reset_lora_parameters (lora_A Kaiming-uniform, lora_B zeros)" if lora else ""))
    if plan["model_init"] == "pretrained":
        add("rank 0: AutoModelForCausalLM.from_pretrained(...) on CPU; torch.distributed.checkpoint.state_dict.set_model_state_dict("
            "full_state_dict=True, broadcast_from_rank0=True)")
    if not fsdp and lay["dp_cp"] > 1:
        add(f"torch.nn.parallel.DistributedDataParallel(module, process_group=mesh[dp_cp] ({lay['dp_cp']} ranks))")
    impl = "fused=True" if plan["optimizer_impl"] == "fused" else "foreach=True"
    if offload != "none":
        impl = "foreach=True (the step runs on the host's shards)"
    params = "the adapters" if lora else "params"
    opt = plan.get("optimizer", "adamw")
    if opt == "sgd":
        add(f"torch.optim.SGD({params}, lr={plan['learning_rate']}, momentum=0.9)")
    elif opt == "adafactor":
        add(f"torch.optim.Adafactor({params}, lr={plan['learning_rate']}) (single-tensor loop, torch's default)")
    else:
        add(f"torch.optim.AdamW({params}, lr={plan['learning_rate']}, {impl})")
    if plan["checkpoint_dir"] != "none":
        add(f"resume: torch.distributed.checkpoint.load from {plan['checkpoint_dir']}/latest when present")
    data = plan["data"]
    add(f"data: {data} (packed tokens of channel '{'train' if data == 'auto' else data}'"
        + (" when present, else synthetic)" if data == "auto" else ")") if data != "synthetic" else "data: synthetic random token ids")
    per_step = f"{plan['grad_accum']} micro-batch(es) of {plan['micro_batch_size']} x {plan['seq_len']} tokens"
    if amp:
        per_step += " under torch.autocast(bf16)"
    if cp > 1:
        per_step += f"; context_parallel(cp_mesh[{cp}], buffers=[ids, labels, position_ids], buffer_seq_dims=[1, 1, 1])"
    loss = "chunked (8 checkpointed chunks)" if plan["loss"] == "chunked" else "standard (fp32 logits)"
    step = {"sgd": "SGD", "adafactor": "Adafactor"}.get(plan.get("optimizer", "adamw"), "AdamW")
    add(f"each of {plan['max_steps']} steps: {per_step}; loss {loss}; {step} step"
        + ("; precompute_float8_dynamic_scale_for_fsdp" if plan["fp8_all_gather"] else ""))
    if plan["checkpoint_dir"] != "none":
        every = f"every {plan['checkpoint_every']} steps, " if plan["checkpoint_every"] else ""
        add(f"checkpoint: torch.distributed.checkpoint.save to {plan['checkpoint_dir']}/step-N ({every}at the end, on SIGTERM, "
            "and before SAGEMAKER_CURRENT_CAPACITY_BLOCK_EXPIRATION_TIMESTAMP - 30 min)")
    if plan["measure"]:
        add(f"measure: steps {plan['measure_warmup']}..{plan['measure_warmup'] + plan['measure_steps'] - 1} "
            "-> /opt/ml/output/data/measurements.jsonl")
    return calls
