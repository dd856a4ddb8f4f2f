"""Runs one plan (or a list of probe plans): build, parallelise, train, checkpoint, measure.

The order of operations is torchtitan's (torchtitan/train.py): model on the meta device ->
low-precision conversion -> LoRA adapters (PEFT, ``finetune lora``: bwtrain.lora) -> tensor parallel ->
activation checkpointing -> compile -> FSDP -> ``to_empty`` + initialisation (or pretrained weights) ->
optimizer -> resume -> steps.
"""

from __future__ import annotations

import contextlib
import gc
import os
import signal
import time
import traceback
from typing import Any, Dict, List

import torch
import torch.distributed as dist

import contract as contract_mod

from . import checkpoint as ckpt
from . import data as data_mod
from . import measure as meas
from . import lora as lora_mod
from . import model as model_mod
from . import parallel, precision, records, runtime
from .model import Refusal


class _Stop:
    """SIGTERM (SageMaker StopTrainingJob gives 120 s before the kill) -> checkpoint and exit."""

    requested = False

    @classmethod
    def install(cls) -> None:
        def handler(signum, frame):
            cls.requested = True

        try:
            signal.signal(signal.SIGTERM, handler)
        except ValueError:  # not the main thread
            pass


class Session:
    """Process-wide state shared by the runs of one process (process group, meshes, env record)."""

    def __init__(self, opts):
        self.opts = opts
        self.rank = runtime.rank()
        self.world = runtime.world_size()
        self.local_rank = runtime.local_rank()
        if not torch.cuda.is_available():
            raise Refusal("gpu", None, "T-gpu", "no CUDA device: the trainer runs on NVIDIA GPUs")
        torch.cuda.set_device(self.local_rank)
        self.device = torch.device("cuda", self.local_rank)
        self.device_name = torch.cuda.get_device_name(self.device)
        self.capability = torch.cuda.get_device_capability(self.device)
        # the CUDA context before any process group: the env record's context_used (NCCL's buffers come after,
        # context_used_after_dist; calibrate reads the two apart)
        torch.zeros(1, device=self.device)  # the context is made (as measure.py does before it reads it)
        self.context_before_dist = meas.context_bytes(self.device)
        self.meshes: Dict[tuple, Any] = {}
        self.writer = None
        self.env_written = False

    def ensure_distributed(self) -> None:
        if dist.is_initialized():
            return
        if "MASTER_ADDR" not in os.environ:  # one process without torchrun
            os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=os.environ.get("MASTER_PORT", "29517"),
                              RANK="0", WORLD_SIZE="1", LOCAL_RANK="0")
        parallel.init_distributed(self.local_rank)

    def mesh(self, lay: Dict[str, int]):
        key = (lay["dp_replicate"], lay["dp_shard"], lay["cp"], lay["tp"])
        if key not in self.meshes:
            self.meshes[key] = parallel.build_mesh(lay)
        return self.meshes[key]

    def close(self, ok: bool = True) -> None:
        """Tear down the process group; after a failure without the barrier, which the other
        ranks may never reach (torchrun then stops the job)."""
        if dist.is_initialized():
            if ok:
                dist.barrier()
            dist.destroy_process_group()


def _check_process(plan: Dict[str, Any], contract: Dict[str, Any], s: Session) -> None:
    for rid, field, reason in contract_mod.static_refusals(plan, contract):
        raise Refusal(field, plan[field], rid, reason)
    if s.world != plan["gpus"]:
        raise Refusal("gpus", plan["gpus"], "T-world", f"torchrun started {s.world} processes (WORLD_SIZE); the plan needs {plan['gpus']}")
    if not runtime.gpu_matches(plan.get("gpu"), s.device_name) and not s.opts.allow_gpu_mismatch:
        raise Refusal("gpu", plan["gpu"], "T-gpu", f"this GPU is {s.device_name!r} (--allow-gpu-mismatch to run anyway)")
    precision.check_runtime(plan, s.capability)


#: SGD's momentum: bwplan counts one momentum buffer per trained parameter (docs/finetune.md), which torch.optim.SGD
#: keeps only with momentum > 0; 0.9 is the customary value (torch.optim.SGD's default is 0, no buffer)
SGD_MOMENTUM = 0.9


def build_optimizer(plan: Dict[str, Any], params: List[Any], adamw_kw: Dict[str, Any]):
    """The plan's optimizer over ``params``, as bwplan models it (docs/finetune.md, optimizer states): AdamW with the
    plan's ``optimizer_impl`` (``adamw_kw``); SGD with momentum (one buffer per parameter; the foreach path on CUDA
    updates it in place, no temporaries); Adafactor with torch's defaults, whose single-tensor loop (the default unless
    ``foreach=True``, torch/optim/_adafactor.py) holds one parameter's variance estimate at a time. The contract refuses
    the others before this runs (T-bnb, T-optimizer)."""
    name, lr = plan.get("optimizer", "adamw"), plan["learning_rate"]
    if name == "adamw":
        return torch.optim.AdamW(params, lr=lr, **adamw_kw)
    if name == "sgd":
        return torch.optim.SGD(params, lr=lr, momentum=SGD_MOMENTUM)
    if name == "adafactor":
        return torch.optim.Adafactor(params, lr=lr)
    raise Refusal("optimizer", name, "T-optimizer", f"the reference trainer builds AdamW, SGD and Adafactor, not {name}")


def run_plan(plan: Dict[str, Any], contract: Dict[str, Any], s: Session, probe: bool = False) -> Dict[str, Any]:
    """Train ``plan``; return its measurement record (also written by rank 0)."""
    t_wall = time.time()
    rec: Dict[str, Any] = records.record_head(plan, s.device_name, s.world, probe, runtime.versions(), runtime.sagemaker_env())
    objs: Dict[str, Any] = {}
    restore_attention = None
    try:
        _check_process(plan, contract, s)
        lay = contract_mod.layout(plan, runtime.local_world_size())
        needs_dist = s.world > 1 or plan["sharding"] != "none" or plan["tp"] > 1 or plan["cp"] > 1
        mesh = None
        if needs_dist:
            s.ensure_distributed()
            mesh = s.mesh(lay)
        if s.writer is None:
            s.writer = meas.RecordWriter(s.opts.output_dir, True)
        if not s.env_written and s.writer.enabled:
            s.writer.write(meas.env_record(s.device, s.context_before_dist))
            s.env_written = True
        torch.manual_seed(plan["seed"])

        # ---- model on meta, low precision, parallelism
        src = model_mod.resolve_source(plan["model"], plan["model_init"], contract["presets"], s.opts.script_dir)
        if plan["model_init"] == "pretrained" and src["kind"] in ("config-file", "preset-config"):
            raise Refusal("model_init", "pretrained", "T-model", f"{plan['model']} is a config without weights; use model_init random")
        config = model_mod.load_config(src, s.local_rank)
        model_mod.check_config(config, plan)
        master = torch.float32 if plan["master_weights"] == "fp32" else torch.bfloat16
        hf = model_mod.build_on_meta(config, master)
        objs["hf"] = hf
        model_mod.check_structure(hf, plan)
        layers = len(hf.model.layers)
        kept = model_mod.bf16_kept(plan, layers) if plan["precision"] != "bf16" else []
        rec["conversion"] = precision.convert(hf, plan, kept)
        lora = lora_mod.is_lora(plan)
        if lora:  # PEFT adapters on the meta model, before TP, checkpointing, compile and FSDP wrap the blocks
            try:
                rec["lora"] = lora_mod.apply_lora(hf, plan, master)
            except ValueError as e:  # PEFT: "Target modules {...} not found in the base model"; ours: "matched no linear"
                if "not found in the base model" not in str(e) and "matched no linear" not in str(e):
                    raise
                raise Refusal("lora_targets", plan.get("lora_targets"), "T-lora-targets", str(e)) from None
        # autocast over fp32 weights: the full fine-tune without FSDP (LoRA's base is bf16 and runs without it)
        amp = plan["sharding"] == "none" and plan["master_weights"] == "fp32" and not lora
        model_mod.install_causal_hooks(hf)
        rec["module_kernels"] = model_mod.apply_module_kernels(hf, plan)
        tp, cp = plan["tp"], plan["cp"]
        fsdp = plan["sharding"] != "none"
        train_module = model_mod.CausalLMTrainModule(hf, plan["loss"], loss_parallel=tp > 1)
        objs["train_module"] = train_module
        if tp > 1:
            parallel.apply_tp(hf, mesh["tp"], float8_tensorwise=plan["precision"] == "fp8")
            model_mod.tie_embeddings(hf)
        if plan["activation_checkpointing"] == "selective-attn":
            from transformers import AttentionInterface
            from transformers.integrations.sdpa_attention import sdpa_attention_forward

            restore_attention = lambda: AttentionInterface.register("sdpa", sdpa_attention_forward)  # noqa: E731
        # LoRA dropout draws random masks: the recompute must draw the same ones (preserve_rng_state)
        rec["checkpointed_blocks"] = parallel.apply_ac(hf, plan["activation_checkpointing"],
                                                       preserve_rng_state=lora and float(plan.get("lora_dropout") or 0) > 0)
        if plan["compile"]:
            parallel.apply_compile(hf)
        if fsdp:
            parallel.apply_fsdp(train_module, hf, parallel.fsdp_mesh(mesh, plan["sharding"]), plan["sharding"],
                                plan.get("offload", "none"), plan["master_weights"])

        # ---- materialise
        gc.collect()
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()
        base = torch.cuda.memory_allocated()
        # CPU offload (optimizer,params): the sharded parameters are materialised in host memory
        train_module.to_empty(device=parallel.materialise_device(plan.get("offload", "none"), s.device))
        model_mod.tie_embeddings(hf)
        model_mod.rebuild_buffers(hf, s.device)
        # after rebuild_buffers, which replaces the rotary modules
        model_mod.apply_rotary_dtype(hf, plan, amp, rec["module_kernels"])
        model_mod.init_weights(hf, plan["seed"])
        if lora:
            lora_mod.init_adapters(hf, plan["seed"])
        if plan["precision"] == "nvfp4":
            precision.init_buffers(hf, plan["seed"], s.rank)
        if plan["model_init"] == "pretrained":
            model_mod.load_pretrained(train_module, src, s.rank)
        rec.update(model_mod.count_params(hf))
        rec["bytes_params"] = torch.cuda.memory_allocated() - base
        rec["tied_embeddings"] = model_mod.is_tied(hf)

        ddp = (not fsdp) and mesh is not None and lay["dp_cp"] > 1
        step_module = parallel.apply_ddp(train_module, mesh, s.local_rank) if ddp else train_module
        objs["step_module"] = step_module
        kw = {"fused": True} if plan["optimizer_impl"] == "fused" else {"foreach": True}
        if plan.get("offload", "none") != "none":
            # the step runs on the host's sharded DTensors (CPUOffloadPolicy): the multi-tensor CPU path; its
            # temporaries are host memory, which is why bwplan's GPU terms drop the optimizer's under offload
            kw = {"foreach": True}
        # the parameters that train: every one for a full fine-tune, the adapters under LoRA (no state for the base)
        optimizer = build_optimizer(plan, lora_mod.trainable_parameters(train_module), kw)
        objs["optimizer"] = optimizer

        # ---- resume
        step0 = 0
        ckpt_dir = None if plan["checkpoint_dir"] == "none" or probe else plan["checkpoint_dir"]
        if ckpt_dir:
            os.makedirs(ckpt_dir, exist_ok=True)
            last = ckpt.latest(ckpt_dir)
            if last:
                old = ckpt.saved_plan(last)
                if old and old != plan and s.rank == 0:
                    changed = sorted(k for k in set(old) | set(plan) if old.get(k) != plan.get(k))
                    print(f"train.py: resuming {last} written under another plan (changed: {', '.join(changed)})", flush=True)
                step0 = ckpt.load(last, train_module, optimizer)
                rec["resumed_from"] = last
        rec["resumed_step"] = step0

        # ---- data
        chan, how = data_mod.channel_dir(plan["data"])
        dp_rank = mesh["dp"].get_local_rank() if mesh is not None else 0
        batches = data_mod.Batches(plan, config.vocab_size, dp_rank, lay["dp"], s.device, chan)
        rec["data"] = how
        cp_mesh = mesh["cp"] if cp > 1 else None
        loss_group = mesh["dp_cp"].get_group() if mesh is not None and lay["dp_cp"] > 1 else None
        autocast = torch.autocast("cuda", dtype=torch.bfloat16, enabled=amp)
        ga, seq = plan["grad_accum"], plan["seq_len"]
        meter = meas.Meter(True)

        def train_step(step: int, phases: bool) -> torch.Tensor:
            factor = min(1.0, (step + 1) / plan["warmup_steps"]) if plan["warmup_steps"] else 1.0
            for g in optimizer.param_groups:
                g["lr"] = plan["learning_rate"] * factor
            losses: List[torch.Tensor] = []
            for m in range(ga):
                batch = batches.get(step, m)
                ids = batch[:, :-1].contiguous()
                labels = batch[:, 1:].contiguous()
                pos = torch.arange(seq, device=s.device).unsqueeze(0)
                no_sync = step_module.no_sync() if ddp and m < ga - 1 else contextlib.nullcontext()
                with no_sync, parallel.loss_parallel_context(tp > 1), parallel.context_parallel_context(cp_mesh, [ids, labels, pos]):
                    with autocast:
                        loss = step_module(ids, labels, pos)
                    if phases:
                        meter.end_phase("fwd")
                    (loss / ga).backward()
                    if phases:
                        meter.end_phase("bwd")
                losses.append(loss.detach().float())
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
            precision.after_optimizer_step(train_module, plan)
            if phases:
                meter.end_phase("opt")
            return torch.stack(losses).mean()

        # ---- steps
        _Stop.install()
        deadline = runtime.capacity_deadline()
        warm, nmeas = plan["measure_warmup"], plan["measure_steps"]
        window_end = warm + nmeas  # relative to step0
        measure_on = plan["measure"] or probe
        t0 = None
        step_s_est, ckpt_s_est = 0.0, 60.0
        loss = None
        stopped = None
        last_tick = time.perf_counter()
        step = step0
        for step in range(step0, plan["max_steps"]):
            i = step - step0
            in_window = measure_on and warm <= i < window_end
            if measure_on and i == warm:
                meter.window_start()
                t0 = meas.now()
            last_measured = measure_on and i == window_end - 1
            if last_measured:
                meter.last_step_start()
            loss = train_step(step, last_measured)
            if last_measured:
                torch.cuda.synchronize()
                rec["step_s"] = (meas.now() - t0) / nmeas
            now = time.perf_counter()
            step_s_est, last_tick = now - last_tick, now
            if probe and i + 1 >= window_end:
                break
            if in_window:
                continue
            # collective decisions (SIGTERM, capacity block) and periodic checkpoints
            stop = _Stop.requested or runtime.must_stop_for_capacity(deadline, step_s_est, ckpt_s_est)
            if dist.is_initialized():
                flag = torch.tensor([int(stop)], device=s.device)
                dist.all_reduce(flag, op=dist.ReduceOp.MAX)
                stop = bool(flag.item())
            if stop:
                if ckpt_dir:
                    ckpt_s_est = ckpt.save(ckpt_dir, step + 1, train_module, optimizer, plan)
                stopped = "sigterm" if _Stop.requested else "capacity-block-expiring"
                break
            if ckpt_dir and plan["checkpoint_every"] and (step + 1) % plan["checkpoint_every"] == 0:
                ckpt_s_est = ckpt.save(ckpt_dir, step + 1, train_module, optimizer, plan)
            if s.rank == 0 and ((step + 1) % 10 == 0 or step + 1 == plan["max_steps"]):
                print(f"step {step + 1}/{plan['max_steps']} loss {loss.item():.4f} ({step_s_est:.3f} s)", flush=True)
        if ckpt_dir and stopped is None and plan["max_steps"] > step0:
            ckpt.save(ckpt_dir, plan["max_steps"], train_module, optimizer, plan)
        if stopped:
            rec["stopped"] = stopped

        # ---- the record
        if loss is not None:
            if loss_group is not None:
                dist.all_reduce(loss, op=dist.ReduceOp.AVG, group=loss_group)
            rec["loss"] = float(loss.item())
        meter.finish(rec)
        if "step_s" in rec:
            tokens = plan["global_batch_size"] * seq
            rec["tokens_per_s"] = tokens / rec["step_s"]
            rec["tokens_per_s_per_gpu"] = rec["tokens_per_s"] / plan["gpus"]
            rec["flops_per_token"] = model_mod.flops_per_token(hf, seq, rec["params_nonembed"],
                                                               rec["lora"]["params_trainable"] if lora else None)
            gid = runtime.gpu_id_of(s.device_name)
            rec["peak_flops"] = runtime.PEAK_BF16_TFLOPS.get(gid, 0) * 1e12 or None
            rec["mfu"] = meas.mfu(rec["tokens_per_s_per_gpu"], rec["flops_per_token"], runtime.PEAK_BF16_TFLOPS.get(gid))
        else:
            rec["note"] = f"no measurement: {plan['max_steps'] - step0} steps run, the window needs {window_end}"
        meas.max_over_ranks(rec, s.device)
        rec["ok"] = True
    except Refusal as e:
        rec.update(ok=False, error=str(e), refusal=e.rid, field=e.field)
        if not probe:
            raise
    except torch.cuda.OutOfMemoryError as e:
        rec.update(ok=False, oom=True, error=str(e).splitlines()[0][:300])
        if not probe:
            raise
    except Exception as e:  # noqa: BLE001 - a probe records the failure and goes on
        rec.update(ok=False, error=f"{type(e).__name__}: {e}"[:500])
        if not probe:
            raise
        traceback.print_exc()
    finally:
        if restore_attention is not None:
            restore_attention()
        objs.clear()
        gc.collect()
        torch.cuda.empty_cache()
        rec["wall_s"] = round(time.time() - t_wall, 1)
        if s.writer is None:
            s.writer = meas.RecordWriter(s.opts.output_dir, True)
        if plan.get("measure", True) or probe:
            s.writer.write(rec)
    return rec


def run(plan: Dict[str, Any], contract: Dict[str, Any], opts) -> Dict[str, Any]:
    s = Session(opts)
    ok = False
    try:
        rec = run_plan(plan, contract, s)
        ok = True
        return rec
    finally:
        s.close(ok)


def probe(plans: List[Dict[str, Any]], contract: Dict[str, Any], opts) -> List[Dict[str, Any]]:
    """Run each plan for measure_warmup + measure_steps steps, one record each, in order."""
    s = Session(opts)
    out = []
    ok = False
    try:
        for i, plan in enumerate(plans):
            rec = run_plan(plan, contract, s, probe=True)
            if s.rank == 0:
                status = "ok" if rec.get("ok") else ("OOM" if rec.get("oom") else "failed")
                peak = rec.get("peak_allocated")
                peak_txt = f" peak_alloc={peak / 2**30:.3f} GiB" if peak else ""
                tps = rec.get("tokens_per_s")
                tps_txt = f" tok/s={tps:.0f}" if tps else ""
                print(f"probe {i + 1}/{len(plans)} {plan['model']} {status}{peak_txt}{tps_txt} {rec.get('error', '')}", flush=True)
            out.append(rec)
        ok = True
    finally:
        s.close(ok)
    return out
