"""The trainer without a GPU: --help and --dry-run run with torch, transformers and torchao made
unimportable; static refusals exit 2 with one line naming the field; torch-free helpers."""

import ast
import glob
import json
import os
import subprocess
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.abspath(os.path.join(HERE, "..", ".."))
TRAIN = os.path.join(ROOT, "apps", "train", "train.py")
sys.path.insert(0, os.path.join(ROOT, "apps", "train"))
sys.path.insert(0, HERE)

from bwtrain import runtime  # noqa: E402

import test_contract  # noqa: E402

HEAVY = ("torch", "transformers", "torchao", "numpy", "accelerate", "peft")


def read(path):
    with open(path, encoding="utf-8") as f:
        return f.read()


def run_trainer(args, env_extra=None):
    """train.py in a subprocess where importing any heavy library raises ImportError."""
    with tempfile.TemporaryDirectory() as d:
        for lib in HEAVY:
            os.makedirs(os.path.join(d, lib))
            with open(os.path.join(d, lib, "__init__.py"), "w") as f:
                f.write(f"raise ImportError('{lib} must not be imported here')\n")
        env = dict(os.environ, PYTHONPATH=d, **(env_extra or {}))
        return subprocess.run([sys.executable, TRAIN] + args, capture_output=True, text=True, env=env, cwd=d)


class TorchFreeTest(unittest.TestCase):
    def test_help(self):
        r = run_trainer(["--help"])
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("--dry-run", r.stdout)

    def test_module_level_imports_are_light(self):
        light = [os.path.join(ROOT, "apps", "train", p) for p in
                 ("train.py", "contract.py", "bwtrain/__init__.py", "bwtrain/runtime.py", "bwtrain/calls.py",
                  "bwtrain/lora.py")]
        for path in light:
            tree = ast.parse(read(path))
            for node in tree.body:  # module level only; lazy imports inside functions are the point
                mods = []
                if isinstance(node, ast.Import):
                    mods = [a.name for a in node.names]
                elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                    mods = [node.module]
                for m in mods:
                    self.assertNotIn(m.split(".")[0], HEAVY, f"{path} imports {m} at module level")

    def test_dry_run_over_the_grid(self):
        C = test_contract.C
        contract = test_contract.CONTRACT
        n_ok = n_refused = 0
        for i, spec in enumerate(test_contract.grid()):
            if i % 17:  # a spread-out sample keeps the subprocess count small
                continue
            plan = C.plan_from_dict(spec, contract)
            hps = C.plan_to_hyperparameters(plan, "v2" if i % 2 else "v3", contract)
            r = run_trainer(["--dry-run"] + C.hyperparameters_to_argv(hps))
            refusals = C.static_refusals(plan, contract)
            if refusals:
                self.assertEqual(r.returncode, 2, r.stderr)
                err = r.stderr.strip().splitlines()
                self.assertEqual(len(err), 1, r.stderr)
                self.assertIn(f"{refusals[0][1]}=", err[0])
                n_refused += 1
            else:
                self.assertEqual(r.returncode, 0, r.stderr)
                n_ok += 1
            out = json.loads(r.stdout)
            for k, v in plan.items():
                if k not in ("instance", "nodes"):
                    self.assertEqual(out["plan"][k], v, k)
            self.assertTrue(out["calls"])
            if plan["sharding"] != "none":
                self.assertTrue(any("fully_shard" in c for c in out["calls"]))
            if plan["cp"] > 1:
                self.assertTrue(any("context_parallel" in c for c in out["calls"]))
        self.assertGreater(n_ok, 10)
        self.assertGreater(n_refused, 3)

    def test_dry_run_from_file_and_bad_value(self):
        with tempfile.TemporaryDirectory() as d:
            p = os.path.join(d, "hp.json")
            with open(p, "w") as f:
                json.dump({"contract_version": "1", "model": '"Llama-3.2-1B"', "gpus": "8", "activation_checkpointing": '"every-2"',
                           "sagemaker_program": '"train.py"'}, f)
            r = run_trainer(["--dry-run", "--hyperparameters", p])
            self.assertEqual(r.returncode, 0, r.stderr)
            self.assertEqual(json.loads(r.stdout)["plan"]["activation_checkpointing"], "every-2")
        r = run_trainer(["--dry-run", "--model", "m", "--gpus", "8", "--contract_version", "1", "--precision", "int4"])
        self.assertEqual(r.returncode, 2)
        self.assertIn("'precision'", r.stderr)

    def test_dry_run_offload(self):
        """offload optimizer,params dry-runs as FSDP2 CPUOffloadPolicy with a CPU-materialised model; the other sets exit
        2 with their refusal (T-offload-optimizer, T-offload-activations)."""
        base = ["--dry-run", "--model", "Llama-3.2-1B", "--gpus", "8", "--contract_version", "1", "--sharding", "full"]
        r = run_trainer(base + ["--offload", "optimizer,params"])
        self.assertEqual(r.returncode, 0, r.stderr)
        out = json.loads(r.stdout)
        self.assertEqual(out["plan"]["offload"], "optimizer,params")
        text = json.dumps(out)
        self.assertIn("offload_policy=CPUOffloadPolicy(pin_memory=True)", text)
        self.assertIn("to_empty(device=cpu)", text)
        for value, refusal in (("optimizer", "T-offload-optimizer"), ("optimizer,params,activations", "T-offload-activations")):
            r = run_trainer(base + ["--activation_checkpointing", "full", "--offload", value])
            self.assertEqual(r.returncode, 2, r.stdout)
            self.assertIn(refusal, r.stderr)
            self.assertIn("offload", r.stderr)
        r = run_trainer(base + ["--offload", "optimizer,params", "--precision", "fp8"])
        self.assertEqual(r.returncode, 2)
        self.assertIn("T-offload-precision", r.stderr)
        r = run_trainer(base + ["--offload", "disk"])
        self.assertEqual(r.returncode, 2)
        self.assertIn("'offload'", r.stderr)

    def test_probe_dry_run(self):
        with tempfile.TemporaryDirectory() as d:
            p = os.path.join(d, "probe.json")
            with open(p, "w") as f:
                json.dump([{"model": "Llama-3.2-1B", "micro_batch_size": 4, "seq_len": 4096, "sharding": "full"},
                           {"model": "Llama-3.2-1B", "micro_batch_size": 4, "seq_len": 4096, "activation_checkpointing": "full",
                            "master_weights": "bf16"}], f)
            r = run_trainer(["--dry-run", "--probe", p])
            self.assertEqual(r.returncode, 0, r.stderr)
            plans = [json.loads(x) for x in r.stdout.replace("}\n{", "}\x00{").split("\x00")]
            self.assertEqual(len(plans), 2)
            self.assertEqual(plans[0]["plan"]["data"], "synthetic")
            self.assertEqual(plans[0]["plan"]["checkpoint_dir"], "none")
            self.assertEqual(plans[0]["plan"]["max_steps"], 5)
            self.assertEqual(plans[0]["plan"]["model_init"], "random")
            # the request's settings beside the probe file apply to every probe plan (a review found them ignored)
            r = run_trainer(["--dry-run", "--probe", p, "--seed", "3", "--measure_warmup", "1", "--measure_steps", "6",
                             "--gpu", '"h200"', "--micro_batch_size", "8", "--max_steps", "9537"])
            self.assertEqual(r.returncode, 0, r.stderr)
            plans = [json.loads(x) for x in r.stdout.replace("}\n{", "}\x00{").split("\x00")]
            for q in plans:
                self.assertEqual(q["plan"]["seed"], 3)
                self.assertEqual(q["plan"]["measure_steps"], 6)
                self.assertEqual(q["plan"]["max_steps"], 7)
                self.assertEqual(q["plan"]["gpu"], "h200")
                self.assertEqual(q["plan"]["micro_batch_size"], 4)  # a plan field stays the probe file's


SHARED = os.environ.get("BWPLAN_SHARED_DIR") or os.path.join(ROOT, "..", "shared")
FIXTURE = os.path.join(ROOT, "tests", "data", "probe-records.jsonl")
MEASURED = ["params", "params_nonembed", "bytes_params", "step_s", "tokens_per_s", "loss", "peak_allocated", "peak_reserved",
            "num_alloc_retries", "device_used", "steps_reserved", "steps_peak", "fwd_peak", "fwd_reserved", "after_fwd", "before_fwd",
            "bwd_peak", "bwd_reserved", "after_bwd", "opt_peak", "opt_reserved", "after_step", "peak_phase", "ok", "oom", "error"]


def probe_records_from_ground_truth():
    """The records the trainer's probe mode writes for the ground truth's llama3.2-1b rows (the harness's decoder
    is Llama-3.2-1B's architecture): the probe plans run through `train.py --dry-run --probe` (the probe's
    defaults and the contract parser), each record's head from bwtrain.records.record_head as engine.run_plan
    builds it, the measured fields from the H200 row. The env line is the ground truth's."""
    from bwtrain import records
    rows = [json.loads(x) for x in read(os.path.join(SHARED, "groundtruth", "h200-calibration.jsonl")).splitlines() if x.strip()]
    env = rows[0]
    chosen = [r for r in rows[1:] if r["model"] == "llama3.2-1b" and "impl" not in r]
    plans = []
    for r in chosen:
        ac = {"none": "none", "full": "full", "half": "every-2"}[r["ac"]]
        plans.append({"model": "Llama-3.2-1B", "gpus": 1, "micro_batch_size": r["mbs"], "seq_len": r["seq"],
                      "activation_checkpointing": ac, "sharding": "full" if r["recipe"] == "fsdp2" else "none",
                      "master_weights": "bf16" if r["recipe"] == "bf16" else "fp32", "optimizer_impl": r.get("optim", "fused"),
                      "loss": "standard"})
    with tempfile.TemporaryDirectory() as d:
        p = os.path.join(d, "probe.json")
        with open(p, "w") as f:
            json.dump(plans, f)
        r = run_trainer(["--dry-run", "--probe", p])
        assert r.returncode == 0, r.stderr
        parsed = [json.loads(x)["plan"] for x in r.stdout.replace("}\n{", "}\x00{").split("\x00")]
    lines = [json.dumps(env)]
    for plan, row in zip(parsed, chosen):
        rec = records.record_head(plan, env["gpu"], 1, True, {"torch": env["torch"]}, {})
        rec.update({k: row[k] for k in MEASURED if k in row})
        lines.append(json.dumps(rec))
    return "\n".join(lines) + "\n"


class ProbeRecordsTest(unittest.TestCase):
    """The probe's records are in the format `bwplan calibrate` reads (tests/calibration_test.cpp fits on the fixture)."""

    def test_fixture_is_what_the_probe_writes(self):
        if not os.path.isfile(os.path.join(SHARED, "groundtruth", "h200-calibration.jsonl")):
            self.skipTest("../shared/groundtruth is absent")
        text = probe_records_from_ground_truth()
        if os.environ.get("BWPLAN_UPDATE_FIXTURE"):
            with open(FIXTURE, "w", encoding="utf-8") as f:
                f.write(text)
        self.assertEqual(read(FIXTURE), text, "regenerate with BWPLAN_UPDATE_FIXTURE=1 python3 -m unittest tests/train/test_trainer_static.py")
        recs = [json.loads(x) for x in text.splitlines()]
        self.assertEqual(recs[0]["kind"], "env")
        self.assertTrue(all(r["kind"] == "probe" and r["plan"]["max_steps"] == 5 for r in recs[1:]))
        self.assertEqual(len(recs), 16)  # the env line and the 15 llama3.2-1b rows (12 amp, 3 fsdp2)

    def test_probe_file_forms(self):
        """--probe takes a file next to train.py (the job's source dir), the SDK's quoted form, or inline JSON."""
        plans = [{"model": "Llama-3.2-1B", "micro_batch_size": 2, "seq_len": 2048}]
        r = run_trainer(["--dry-run", "--probe", json.dumps(json.dumps(plans))])
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(json.loads(r.stdout)["plan"]["micro_batch_size"], 2)
        r = run_trainer(["--dry-run", "--probe", "no-such-probe.json"])
        self.assertEqual(r.returncode, 2)
        self.assertEqual(len(r.stderr.strip().splitlines()), 1, r.stderr)
        self.assertIn("no-such-probe.json", r.stderr)


class RuntimeTest(unittest.TestCase):
    def test_capacity_deadline(self):
        key = "SAGEMAKER_CURRENT_CAPACITY_BLOCK_EXPIRATION_TIMESTAMP"
        self.assertIsNone(runtime.capacity_deadline({}))
        self.assertIsNone(runtime.capacity_deadline({key: "0"}))
        self.assertIsNone(runtime.capacity_deadline({key: "soon"}))
        self.assertEqual(runtime.capacity_deadline({key: "1900000000"}), 1900000000.0)
        self.assertEqual(runtime.capacity_deadline({key: "1900000000000"}), 1900000000.0)
        deadline = 1_000_000.0
        # 30 min reclaim lead: at deadline - 30 min - 10 min there is room for a 60 s step + 120 s checkpoint
        self.assertFalse(runtime.must_stop_for_capacity(deadline, 60, 120, now=deadline - 40 * 60))
        self.assertTrue(runtime.must_stop_for_capacity(deadline, 60, 120, now=deadline - 32 * 60))
        self.assertFalse(runtime.must_stop_for_capacity(None, 60, 120))

    def test_allocator_conf(self):
        """expandable_segments reaches PYTORCH_CUDA_ALLOC_CONF before CUDA initialises; a contradiction is refused."""
        self.assertEqual(runtime.allocator_conf(True, {}), "expandable_segments:True")
        self.assertEqual(runtime.allocator_conf(True, {"PYTORCH_CUDA_ALLOC_CONF": "max_split_size_mb:512"}),
                         "max_split_size_mb:512,expandable_segments:True")
        self.assertIsNone(runtime.allocator_conf(True, {"PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True"}))
        self.assertIsNone(runtime.allocator_conf(False, {}))
        # torch 2.9+ reads PYTORCH_ALLOC_CONF first and ignores the older name: the setting goes where it is read
        self.assertEqual(runtime.allocator_conf_var({"PYTORCH_ALLOC_CONF": "max_split_size_mb:512"}), "PYTORCH_ALLOC_CONF")
        self.assertEqual(runtime.allocator_conf_var({}), "PYTORCH_CUDA_ALLOC_CONF")
        with self.assertRaises(ValueError):
            runtime.allocator_conf(False, {"PYTORCH_ALLOC_CONF": "expandable_segments:True", "PYTORCH_CUDA_ALLOC_CONF": ""})
        self.assertIsNone(runtime.allocator_conf(False, {"PYTORCH_CUDA_ALLOC_CONF": "max_split_size_mb:512"}))
        with self.assertRaises(ValueError):
            runtime.allocator_conf(False, {"PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True"})
        with self.assertRaises(ValueError):
            runtime.allocator_conf(True, {"PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:False"})

    def test_gpu_ids(self):
        self.assertEqual(runtime.gpu_id_of("NVIDIA H200"), "h200")
        self.assertEqual(runtime.gpu_id_of("NVIDIA H100 80GB HBM3"), "h100")
        self.assertEqual(runtime.gpu_id_of("NVIDIA B200"), "b200")
        self.assertEqual(runtime.gpu_id_of("NVIDIA GB200"), "gb200")
        self.assertIsNone(runtime.gpu_id_of("NVIDIA A100-SXM4-80GB"))
        self.assertTrue(runtime.gpu_matches("h200", "NVIDIA H200"))
        self.assertFalse(runtime.gpu_matches("b200", "NVIDIA GB200"))

    def test_peaks_match_the_catalog(self):
        with open(os.path.join(ROOT, "configs", "hardware", "catalog.json"), encoding="utf-8") as f:
            cat = json.load(f)
        for g in cat["gpus"]:
            self.assertEqual(runtime.PEAK_BF16_TFLOPS[g["id"]], g["dense_tflop_per_s"]["bf16"], g["id"])

    def test_module_kernels_installed_where_they_last(self):
        """modules fused: the norms' F.rms_norm goes in before compile and FSDP; the bf16 rotary tables after
        rebuild_buffers, which replaces the rotary modules (a wrapper installed before it was thrown away)."""
        src = read(os.path.join(ROOT, "apps", "train", "bwtrain", "engine.py"))
        self.assertLess(src.index("model_mod.apply_module_kernels("), src.index("parallel.apply_compile("))
        self.assertLess(src.index("model_mod.apply_module_kernels("), src.index("parallel.apply_fsdp("))
        self.assertLess(src.index("model_mod.rebuild_buffers("), src.index("model_mod.apply_rotary_dtype("))
        self.assertLess(src.index("model_mod.apply_rotary_dtype("), src.index("model_mod.init_weights("))

    def test_lora_targets_and_settings(self):
        """finetune lora: the plan's lora_targets as PEFT target_modules (bwplan's groups, never the LM head), the
        LoraConfig arguments with the contract's defaults, and a checkpoint key's way to an adapted linear's base."""
        from bwtrain import lora

        self.assertEqual(lora.target_modules("attention"), ["q_proj", "k_proj", "v_proj", "o_proj"])
        self.assertEqual(lora.target_modules("mlp"), ["gate_proj", "up_proj", "down_proj"])
        self.assertEqual(len(lora.target_modules("all-linear")), 7)
        self.assertNotIn("lm_head", lora.target_modules("all-linear"))
        # a fused layout matches only some targets: each one must match (Phi-3: qkv_proj, gate_up_proj)
        phi3 = ["model.layers.0.self_attn.o_proj", "model.layers.0.mlp.down_proj"]
        self.assertEqual(lora.unmatched_targets(lora.target_modules("all-linear"), phi3),
                         ["q_proj", "k_proj", "v_proj", "gate_proj", "up_proj"])
        llama = [f"model.layers.{i}.{n}" for i in range(2) for n in ("self_attn.q_proj", "self_attn.v_proj")]
        self.assertEqual(lora.unmatched_targets(["q_proj", "v_proj"], llama), [])
        self.assertEqual(lora.target_modules("q,v_proj,q_proj"), ["q_proj", "v_proj"])
        with self.assertRaises(ValueError):
            lora.target_modules("lm_head")
        kw = lora.lora_settings({"finetune": "lora", "lora_rank": 8, "lora_alpha": 16.0, "lora_targets": "q,v",
                                 "lora_dropout": 0.05})
        self.assertEqual(kw, {"r": 8, "lora_alpha": 16.0, "target_modules": ["q_proj", "v_proj"], "lora_dropout": 0.05,
                              "bias": "none"})
        self.assertEqual(lora.lora_settings({"finetune": "lora"})["r"], 16)
        self.assertEqual(lora.lora_settings({"finetune": "lora"})["lora_alpha"], 32.0)
        # a falsy value is a value (a helper's sweep: alpha 0 ran as 32, `or 32`); only an absent or None key defaults
        self.assertEqual(lora.lora_settings({"finetune": "lora", "lora_alpha": 0.0})["lora_alpha"], 0.0)
        self.assertEqual(lora.lora_settings({"finetune": "lora", "lora_alpha": None, "lora_dropout": None})["lora_alpha"], 32.0)
        keys = {"hf.model.layers.0.self_attn.q_proj.base_layer.weight", "hf.model.layers.0.self_attn.q_proj.lora_A.default.weight",
                "hf.model.layers.0.self_attn.k_proj.weight", "hf.lm_head.weight"}
        self.assertEqual(lora.base_layer_key("hf.model.layers.0.self_attn.q_proj.weight", keys),
                         "hf.model.layers.0.self_attn.q_proj.base_layer.weight")
        self.assertEqual(lora.base_layer_key("hf.model.layers.0.self_attn.k_proj.weight", keys),
                         "hf.model.layers.0.self_attn.k_proj.weight")
        self.assertEqual(lora.base_layer_key("hf.lm_head.weight", keys), "hf.lm_head.weight")
        self.assertTrue(lora.is_lora({"finetune": "lora"}))
        self.assertFalse(lora.is_lora({"finetune": "qlora"}))

    def test_dry_run_lora(self):
        """finetune lora is no longer refused: the dry run injects PEFT adapters before FSDP, runs without autocast
        (the frozen base is bf16), preserves the RNG state of checkpointed blocks when the adapters use dropout and
        steps the adapters only; qlora is still refused (T-qlora)."""
        base = ["--dry-run", "--model", "Llama-3.2-1B", "--gpus", "1", "--contract_version", "1", "--sharding", "none",
                "--activation_checkpointing", "full", "--finetune", "lora", "--lora_rank", "8", "--lora_targets", "attention",
                "--lora_dropout", "0.1"]
        r = run_trainer(base)
        self.assertEqual(r.returncode, 0, r.stderr)
        out = json.loads(r.stdout)
        self.assertEqual(out["plan"]["finetune"], "lora")
        calls = out["calls"]
        inject = [i for i, c in enumerate(calls) if c.startswith("peft.inject_adapter_in_model")]
        self.assertEqual(len(inject), 1, calls)
        self.assertIn("r=8", calls[inject[0]])
        self.assertIn("['q_proj', 'k_proj', 'v_proj', 'o_proj']", calls[inject[0]])
        self.assertIn("lora_dropout=0.1", calls[inject[0]])
        self.assertTrue(any("preserve_rng_state=True" in c for c in calls), calls)
        self.assertFalse(any("autocast" in c for c in calls), calls)
        self.assertTrue(any(c.startswith("torch.optim.AdamW(the adapters") for c in calls), calls)
        fsdp = run_trainer(["--dry-run", "--model", "Llama-3.2-1B", "--gpus", "8", "--contract_version", "1", "--sharding", "full",
                            "--finetune", "lora"])
        self.assertEqual(fsdp.returncode, 0, fsdp.stderr)
        calls = json.loads(fsdp.stdout)["calls"]
        first = lambda prefix: next(i for i, c in enumerate(calls) if c.startswith(prefix))  # noqa: E731
        self.assertLess(first("peft.inject_adapter_in_model"), first("torch.distributed.fsdp.fully_shard"))
        q = run_trainer(["--dry-run", "--model", "Llama-3.2-1B", "--gpus", "1", "--contract_version", "1", "--finetune", "qlora"])
        self.assertEqual(q.returncode, 2, q.stdout)
        self.assertIn("T-qlora", q.stderr)
        src = read(os.path.join(ROOT, "apps", "train", "bwtrain", "engine.py"))
        self.assertLess(src.index("lora_mod.apply_lora("), src.index("parallel.apply_ac("))
        self.assertLess(src.index("model_mod.init_weights("), src.index("lora_mod.init_adapters("))

    def test_dry_run_optimizers(self):
        """sgd and adafactor run (torch.optim.SGD with momentum, torch.optim.Adafactor with torch's defaults); lion is
        refused (T-optimizer: PyTorch 2.11 has none), the 8-bit AdamWs too (T-bnb)."""
        base = ["--dry-run", "--model", "Llama-3.2-1B", "--gpus", "1", "--contract_version", "1", "--optimizer"]
        for name, call in (("sgd", "torch.optim.SGD(params, lr=0.0003, momentum=0.9)"), ("adafactor", "torch.optim.Adafactor(params")):
            r = run_trainer(base + [name])
            self.assertEqual(r.returncode, 0, r.stderr)
            calls = json.loads(r.stdout)["calls"]
            self.assertTrue(any(c.startswith(call) for c in calls), calls)
            self.assertFalse(any("AdamW" in c for c in calls), calls)
        for name, rid in (("lion", "T-optimizer"), ("adamw-8bit", "T-bnb")):
            r = run_trainer(base + [name])
            self.assertEqual(r.returncode, 2, r.stdout)
            self.assertIn(rid, r.stderr)
        src = read(os.path.join(ROOT, "apps", "train", "bwtrain", "engine.py"))
        self.assertIn("torch.optim.SGD(params, lr=lr, momentum=SGD_MOMENTUM)", src)
        self.assertIn("torch.optim.Adafactor(params, lr=lr)", src)

    def test_all_trainer_sources_parse(self):
        for p in glob.glob(os.path.join(ROOT, "apps", "train", "**", "*.py"), recursive=True):
            ast.parse(read(p), p)


if __name__ == "__main__":
    unittest.main()
