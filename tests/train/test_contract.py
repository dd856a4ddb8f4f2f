"""Tests of the training contract and its parser (standard library only; no torch).

Run from the repository root: ``python3 -m unittest discover -s tests/train -p "test_*.py"`` (ctest does).
"""

import itertools
import json
import os
import subprocess
import sys
import tempfile
import unittest

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
sys.path.insert(0, os.path.join(ROOT, "apps", "train"))

import contract as C  # noqa: E402

CONTRACT = C.load_contract(os.path.join(ROOT, "configs", "training-contract.json"))

# The plan-file keys the contract must carry (the list), and its own keys.
PLAN_KEYS = ["model", "instance", "gpu", "nodes", "gpus", "power_limit_w", "attention_kernel", "precision", "master_weights", "micro_batch_size", "seq_len",
             "global_batch_size", "grad_accum", "activation_checkpointing", "sharding", "shard_group", "tp", "cp", "ep", "pp", "pp_schedule", "vpp",
             "optimizer", "optimizer_impl", "loss", "finetune", "lora_rank", "lora_alpha", "lora_targets", "lora_dropout",
             "stack", "compile", "modules", "expandable_segments", "offload", "optimizer_in_backward", "sequence_parallel", "fsdp_embedding_units", "tp_comm_overlap", "moe_a2a_overlap", "bf16_layers", "fp8_all_gather", "headroom"]
CONTRACT_KEYS = ["contract_version", "max_steps", "data", "checkpoint_dir", "measure"]


def grid():
    """Valid plans over every precision, checkpointing mode, sharding mode and tp/cp/ep value."""
    precisions = ["bf16", "fp8", "fp8-rowwise", "mxfp8", "nvfp4"]
    acs = ["none", "full", "every-2", "every-3", "every-12", "selective-op", "selective-attn"]
    shardings = ["none", "full", "hybrid", "grad-op"]
    degrees = [(1, 1, 1), (2, 1, 1), (1, 2, 1), (2, 2, 1), (1, 1, 2), (4, 2, 2)]
    bf16_layers = ["none", "last:2", "first:1", "first:1,last:3", "0.15", "1", "0"]
    for i, (prec, ac, sh, (tp, cp, ep)) in enumerate(itertools.product(precisions, acs, shardings, degrees)):
        plan = {
            "model": ["Llama-3.2-1B", "meta-llama/Llama-3.1-8B", "s3://bucket/models/qwen3-8b/", "/opt/ml/input/data/model",
                      "configs/models/llama-3.2-1b.json"][i % 5],
            "instance": "ml.p6-b200.48xlarge", "gpu": "b200", "nodes": 2, "gpus": 16,
            "precision": prec, "master_weights": ["fp32", "bf16"][i % 2],
            "micro_batch_size": 1 + i % 3, "seq_len": 8192,
            "activation_checkpointing": ac, "sharding": sh, "tp": tp, "cp": cp, "ep": ep, "pp": 1,
            "optimizer": "adamw", "optimizer_impl": ["fused", "foreach"][i % 2], "loss": ["standard", "chunked"][i % 2],
            "bf16_layers": bf16_layers[i % len(bf16_layers)],
            "fp8_all_gather": prec == "fp8" and sh == "full" and i % 2 == 0,
            "max_steps": 10 + i, "data": ["auto", "synthetic", "train"][i % 3], "checkpoint_dir": "/opt/ml/checkpoints",
            "measure": i % 2 == 0, "learning_rate": 1e-4 * (1 + i % 5), "compile": i % 7 == 0,
            "expandable_segments": i % 3 == 0,
        }
        dp = 16 // (tp * cp)
        plan["grad_accum"] = 1 + i % 4
        plan["global_batch_size"] = plan["micro_batch_size"] * dp * plan["grad_accum"]
        if sh == "hybrid":
            plan["shard_group"] = 4 * cp if (16 // tp) % (4 * cp) == 0 else cp
        yield plan


class ContractFileTest(unittest.TestCase):
    def test_every_plan_key_is_in_the_contract(self):
        keys = {f["key"] for f in CONTRACT["fields"]}
        for k in PLAN_KEYS + CONTRACT_KEYS:
            self.assertIn(k, keys, k)
        plan_kind = {f["key"] for f in CONTRACT["fields"] if f["kind"] == "plan"}
        self.assertEqual(plan_kind, set(PLAN_KEYS))

    def test_plan_schema_properties_are_covered(self):
        """Every property of the C++ plan schema (docs/plan.schema.json) maps to the contract:
        directly, or ac_every through every-K; file metadata is not a training setting."""
        with open(os.path.join(ROOT, "docs", "plan.schema.json"), encoding="utf-8") as f:
            schema = json.load(f)
        keys = {f["key"] for f in CONTRACT["fields"]}
        for prop in schema["properties"]:
            if prop in ("$schema", "schema_version", "name", "check", "ac_every"):
                continue
            self.assertIn(prop, keys, f"plan.schema.json property {prop} missing from the contract")

    def test_field_entries_are_complete(self):
        types = {"int", "float", "bool", "string", "enum"}
        refusals = {r["id"] for r in CONTRACT["trainer_refusals"]}
        for f in CONTRACT["fields"]:
            with self.subTest(field=f["key"]):
                for m in ("key", "kind", "hyperparameter", "source", "type", "unit", "required", "default", "description", "trainer"):
                    self.assertIn(m, f)
                self.assertIn(f["type"], types)
                self.assertIn(f["kind"], ("plan", "contract"))
                self.assertIn(f["source"], ("hyperparameter", "resource-config", "planning-only"))
                self.assertEqual(f["hyperparameter"] is None, f["source"] != "hyperparameter")
                if f["type"] == "enum":
                    self.assertTrue(f["values"])
                if f["default"] is not None:
                    # the default survives encode -> decode
                    self.assertEqual(C.decode_value(f, C.encode_value(f, f["default"])), f["default"])
                t = f["trainer"]
                if isinstance(t, str):
                    self.assertIn(t, ("supported", "not-sent", "resource-config"))
                else:
                    for u in t.get("unsupported", []):
                        self.assertTrue("value" in u or "minimum" in u)
                        self.assertTrue(u["reason"])
                        self.assertIn(u["refusal"], refusals)
        self.assertEqual(next(f for f in CONTRACT["fields"] if f["key"] == "headroom")["trainer"], "not-sent")
        for k in ("instance", "nodes"):
            f = next(f for f in CONTRACT["fields"] if f["key"] == k)
            self.assertIsNone(f["hyperparameter"])
            self.assertIn("ResourceConfig", f["description"])

    def test_refusals_reference_fields(self):
        keys = {f["key"] for f in CONTRACT["fields"]}
        for r in CONTRACT["trainer_refusals"]:
            with self.subTest(refusal=r["id"]):
                self.assertIn(r["scope"], ("static", "runtime"))
                for k in r["fields"]:
                    self.assertIn(k, keys)
                for k in r["when"]:
                    self.assertIn(k, keys | {"dp", "dp_cp"})

    def test_bundled_copy_is_identical(self):
        with open(os.path.join(ROOT, "configs", "training-contract.json"), "rb") as a, \
                open(os.path.join(ROOT, "apps", "train", "training-contract.json"), "rb") as b:
            self.assertEqual(a.read(), b.read(), "copy configs/training-contract.json to apps/train/")

    def test_documented(self):
        """docs/training-contract.md names every field, rule and refusal of the contract."""
        with open(os.path.join(ROOT, "docs", "training-contract.md"), encoding="utf-8") as f:
            doc = f.read()
        for f_ in CONTRACT["fields"]:
            self.assertIn(f"| `{f_['key']}` |", doc, f_["key"])
        for r in CONTRACT["rules"] + CONTRACT["trainer_refusals"]:
            self.assertIn(r["id"], doc, r["id"])

    def test_presets_match_the_bundled_model_configs(self):
        names = {os.path.splitext(n)[0] for n in os.listdir(os.path.join(ROOT, "configs", "models"))}
        self.assertTrue(set(CONTRACT["presets"]) <= names | {"llama-3.2-1b"})


class RoundTripTest(unittest.TestCase):
    def test_grid_round_trip_all_encodings(self):
        n = 0
        for spec in grid():
            plan = C.plan_from_dict(spec, CONTRACT)
            rc = {"current_instance_type": spec["instance"], "hosts": ["algo-1", "algo-2"]}
            for style in ("v3", "v2", "v2-json"):
                hps = C.plan_to_hyperparameters(plan, style, CONTRACT)
                for v in hps.values():
                    self.assertIsInstance(v, str)
                if style == "v2-json":
                    # the CreateTrainingJob map as SDK v2 writes it, read from hyperparameters.json
                    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
                        json.dump(dict(hps, sagemaker_program='"train.py"'), f)
                    try:
                        got = C.parse_hyperparameters(C.read_hyperparameters_file(f.name), CONTRACT, rc)
                    finally:
                        os.unlink(f.name)
                else:
                    got = C.parse_hyperparameters(C.argv_pairs(C.hyperparameters_to_argv(hps)), CONTRACT, rc)
                for k in plan:
                    self.assertEqual(got[k], plan[k], f"{style} {k}: {spec}")
                self.assertEqual(set(got), set(plan))
                n += 1
        self.assertGreater(n, 2000)

    def test_boolean_spellings(self):
        base = {"contract_version": "1", "model": "x", "gpus": "8", "precision": "fp8"}
        for s, want in (("True", True), ("true", True), ("TRUE", True), ('"true"', True), ("False", False), ("false", False)):
            plan = C.parse_hyperparameters(dict(base, fp8_all_gather=s), CONTRACT)
            self.assertIs(plan["fp8_all_gather"], want, s)

    def test_sdk_v2_quoted_strings_and_nulls(self):
        hps = {"contract_version": "1", "model": '"meta-llama/Llama-3.1-8B"', "gpus": "8", "gpu": '"b200"',
               "seq_len": "2048", "shard_group": "null", "grad_accum": ""}
        plan = C.parse_hyperparameters(hps, CONTRACT)
        self.assertEqual(plan["model"], "meta-llama/Llama-3.1-8B")
        self.assertEqual(plan["gpu"], "b200")
        self.assertIsNone(plan["shard_group"])
        self.assertEqual(plan["grad_accum"], 1)

    def test_derived_values(self):
        plan = C.parse_hyperparameters({"contract_version": "1", "model": "x", "gpus": "16", "tp": "2", "cp": "2",
                                        "micro_batch_size": "2", "global_batch_size": "64", "seq_len": "8192"}, CONTRACT)
        self.assertEqual(plan["grad_accum"], 8)
        self.assertEqual(plan["sharding"], "full")
        self.assertEqual(C.layout(plan)["dp"], 4)
        one = C.parse_hyperparameters({"contract_version": "1", "model": "x", "gpus": "1"}, CONTRACT)
        self.assertEqual(one["sharding"], "none")
        self.assertEqual(one["global_batch_size"], 1)
        self.assertEqual(C.parse_hyperparameters({"contract_version": "1", "model": "x", "gpus": "8",
                                                  "precision": "nvfp4"}, CONTRACT)["bf16_layers"], "0.15")

    def test_plan_file_ac_every(self):
        with open(os.path.join(ROOT, "configs", "examples", "llama-3.1-8b-p6-b200.json"), encoding="utf-8") as f:
            spec = json.load(f)
        spec["gpus"] = 8
        plan = C.plan_from_dict(spec, CONTRACT)
        self.assertEqual(plan["activation_checkpointing"], "every-2")
        self.assertEqual(plan["instance"], "ml.p6-b200.48xlarge")
        self.assertNotIn("headroom", plan)

    def test_layout(self):
        p = C.parse_hyperparameters({"contract_version": "1", "model": "x", "gpus": "32", "tp": "2", "cp": "2",
                                     "sharding": "hybrid", "shard_group": "8", "seq_len": "8192"}, CONTRACT)
        lay = C.layout(p)
        self.assertEqual((lay["dp_replicate"], lay["dp_shard"], lay["cp"], lay["tp"]), (2, 4, 2, 2))
        self.assertEqual(lay["dp_replicate"] * lay["dp_shard"] * lay["cp"] * lay["tp"], 32)

    def test_bf16_layers(self):
        self.assertEqual(C.parse_bf16_layers("0.15", 32), [27, 28, 29, 30, 31])
        self.assertEqual(C.parse_bf16_layers("first:1,last:2", 6), [0, 4, 5])
        self.assertEqual(C.parse_bf16_layers("none", 6), [])
        self.assertEqual(C.parse_bf16_layers("1", 3), [0, 1, 2])
        self.assertEqual(C.parse_bf16_layers("0", 3), [])


class BadHyperparameterTest(unittest.TestCase):
    BASE = {"contract_version": "1", "model": "m", "gpus": "8"}
    CASES = [
        ({"seq_len": "4k"}, "seq_len"),
        ({"seq_len": "0"}, "seq_len"),
        ({"micro_batch_size": "1.5"}, "micro_batch_size"),
        ({"precision": "fp16"}, "precision"),
        ({"precision": "FP8"}, "precision"),
        ({"activation_checkpointing": "every-1"}, "activation_checkpointing"),
        ({"activation_checkpointing": "every-x"}, "activation_checkpointing"),
        ({"activation_checkpointing": "half"}, "activation_checkpointing"),
        ({"sharding": "zero3"}, "sharding"),
        ({"fp8_all_gather": "yes"}, "fp8_all_gather"),
        ({"fp8_all_gather": "true"}, "fp8_all_gather"),  # precision is bf16
        ({"fp8_all_gather": "true", "precision": "fp8", "sharding": "none"}, "fp8_all_gather"),
        # hybrid and grad-op: bwplan estimates the FP8 gather of full sharding only (BWP010; a helper's audit found
        # the trainer accepting what bwplan's check refuses)
        ({"fp8_all_gather": "true", "precision": "fp8", "sharding": "hybrid", "shard_group": "8"}, "fp8_all_gather"),
        ({"fp8_all_gather": "true", "precision": "fp8", "sharding": "grad-op"}, "fp8_all_gather"),
        ({"bf16_layers": "last:x"}, "bf16_layers"),
        ({"bf16_layers": "1.5"}, "bf16_layers"),
        ({"gpus": "6", "tp": "4"}, "gpus"),
        ({"global_batch_size": "12", "micro_batch_size": "1"}, "global_batch_size"),
        ({"global_batch_size": "16", "grad_accum": "3"}, "global_batch_size"),
        ({"sharding": "hybrid", "shard_group": "3"}, "shard_group"),
        ({"cp": "2", "seq_len": "4098"}, "seq_len"),
        ({"contract_version": "2"}, "contract_version"),
        ({"learning_rate": "nan"}, "learning_rate"),
        ({"checkpoint_dir": "relative/dir"}, "checkpoint_dir"),
        ({"headroom": "0.05"}, "headroom"),
        ({"instance": "ml.p5.48xlarge"}, "instance"),
        ({"nodes": "2"}, "nodes"),
        ({"batch": "2"}, "batch"),
        ({"optimizer": "adam"}, "optimizer"),
        ({"finetune": "dora"}, "finetune"),
        ({"lora_targets": "lm_head"}, "lora_targets"),
        ({"lora_dropout": "1"}, "lora_dropout"),
        ({"gpu": "a100"}, "gpu"),
        ({"ep": "0"}, "ep"),
    ]

    def test_one_line_error_naming_the_hyperparameter(self):
        for extra, name in self.CASES:
            with self.subTest(extra=extra):
                with self.assertRaises(C.ContractError) as cm:
                    C.parse_hyperparameters(dict(self.BASE, **extra), CONTRACT)
                msg = str(cm.exception)
                self.assertNotIn("\n", msg)
                self.assertIn(f"'{name}'", msg)

    def test_missing_required(self):
        for k in ("model", "gpus", "contract_version"):
            hps = dict(self.BASE)
            del hps[k]
            with self.assertRaises(C.ContractError) as cm:
                C.parse_hyperparameters(hps, CONTRACT)
            self.assertIn(f"'{k}'", str(cm.exception))

    def test_required_null_spellings(self):
        """"", "null" and "None" mean "not given": a required hyperparameter is then missing (bwplan's check refuses
        it the same way: plan_from_job)."""
        for k in ("gpus", "contract_version", "model"):
            for v in ("", "null", "None"):
                with self.subTest(key=k, value=v):
                    with self.assertRaises(C.ContractError) as cm:
                        C.parse_hyperparameters(dict(self.BASE, **{k: v}), CONTRACT)
                    self.assertIn(f"'{k}'", str(cm.exception))

    def test_numbers_as_bwplan_reads_them(self):
        """Decimal notation only, as bwplan's decode_hyperparameter reads it; lora_alpha above 0 (a helper's sweep:
        bwplan read "0x4" as 4, Python reads "1_0" as 10, and alpha 0 passed the contract)."""
        for bad in ("0", "-1", "0x4", "1_0", "inf", "nan", "4e"):
            with self.subTest(lora_alpha=bad):
                with self.assertRaises(C.ContractError):
                    C.parse_hyperparameters(dict(self.BASE, finetune="lora", lora_alpha=bad), CONTRACT)
        for good, v in (("0.5", 0.5), ("16", 16.0), ("1e-3", 1e-3), ("4.", 4.0), ('"8"', 8.0)):
            with self.subTest(lora_alpha=good):
                self.assertEqual(C.parse_hyperparameters(dict(self.BASE, finetune="lora", lora_alpha=good), CONTRACT)["lora_alpha"], v)

    def test_argv_errors(self):
        with self.assertRaises(C.ContractError):
            C.argv_pairs(["--model"])
        with self.assertRaises(C.ContractError):
            C.argv_pairs(["model", "x"])
        self.assertEqual(C.argv_pairs(["--a=1", "-b", "2", "--c", "--d"]), {"a": "1", "b": "2", "c": "--d"})


class RefusalTest(unittest.TestCase):
    def ids(self, **hps):
        plan = C.parse_hyperparameters(dict({"contract_version": "1", "model": "m", "gpus": "16", "seq_len": "8192"},
                                            **{k: str(v) for k, v in hps.items()}), CONTRACT)
        return {r[0] for r in C.static_refusals(plan, CONTRACT)}

    def test_static_refusals(self):
        self.assertEqual(self.ids(), set())
        self.assertEqual(self.ids(pp=2), {"T-pp"})
        self.assertEqual(self.ids(pp=2, pp_schedule="interleaved", vpp=2, grad_accum=2), {"T-pp"})
        self.assertEqual(self.ids(sharding="optimizer"), {"T-zero1"})
        self.assertEqual(self.ids(ep=2), {"T-ep"})
        self.assertEqual(self.ids(precision="nvfp4", tp=2), {"T-nvfp4-tp"})
        self.assertEqual(self.ids(precision="nvfp4", sharding="none", gpus=1), set())  # nvfp4_mm_triton converts fp32 to bf16
        self.assertEqual(self.ids(precision="nvfp4", sharding="none", gpus=1, master_weights="bf16"), set())
        self.assertEqual(self.ids(precision="mxfp8", sharding="none", gpus=1), {"T-mxfp8-autocast"})
        self.assertEqual(self.ids(precision="mxfp8", sharding="none", gpus=1, master_weights="bf16"), set())
        self.assertEqual(self.ids(precision="mxfp8", sharding="full", gpus=1), set())  # FSDP2 gathers bf16 parameters
        self.assertEqual(self.ids(sharding="none", tp=2), {"T-ddp-tp"})
        self.assertEqual(self.ids(sharding="none", tp=2, gpus=2), set())
        self.assertEqual(self.ids(loss="chunked", tp=2), {"T-chunked-tp"})
        self.assertEqual(self.ids(loss="chunked", cp=2), set())
        self.assertEqual(self.ids(loss="liger"), {"T-liger"})
        self.assertEqual(self.ids(stack="hf"), set())
        for s in ("torchtitan", "torchtune", "megatron"):
            self.assertEqual(self.ids(stack=s), {"T-stack"})
        self.assertEqual(self.ids(compile="True", expandable_segments="True"), set())


class CommandLineTest(unittest.TestCase):
    def test_pipeline_rule(self):
        base = {"contract_version": "1", "model": "m", "gpus": "16", "seq_len": "8192"}
        with self.assertRaisesRegex(C.ContractError, r"'vpp'.*R-pipeline"):
            C.parse_hyperparameters(dict(base, vpp="2"), CONTRACT)
        with self.assertRaisesRegex(C.ContractError, r"'pp_schedule'.*R-pipeline"):
            C.parse_hyperparameters(dict(base, pp="4", pp_schedule="interleaved", vpp="2", grad_accum="3"), CONTRACT)
        plan = C.parse_hyperparameters(dict(base, pp="4", pp_schedule="interleaved", vpp="2", grad_accum="4"), CONTRACT)
        self.assertEqual((plan["pp"], plan["pp_schedule"], plan["vpp"]), (4, "interleaved", 2))

    def test_to_hyperparameters_reads_bwplan_instance_plans(self):
        """bwplan leaves gpus out of an instance plan file (every GPU of its nodes): --to-hyperparameters counts them
        from the hardware catalog (a helper's sweep: "hyperparameter 'gpus': required")."""
        for name, gpus, gpu in (("llama-3.1-8b-p6-b200.json", 8, "b200"), ("qwen3-8b-p5en-2nodes.json", 16, "h200")):
            with self.subTest(plan=name):
                path = os.path.join(ROOT, "configs", "examples", name)
                out = subprocess.run([sys.executable, os.path.join(ROOT, "apps", "train", "contract.py"), "--to-hyperparameters", path],
                                     capture_output=True, text=True)
                self.assertEqual(out.returncode, 0, out.stderr)
                hps = json.loads(out.stdout)
                self.assertEqual(hps["gpus"], str(gpus))
                self.assertEqual(hps["gpu"], gpu)
        with self.assertRaises(C.ContractError) as cm:
            C.plan_from_dict({"model": "Llama-3.2-1B", "instance": "ml.nope.1xlarge"}, CONTRACT)
        self.assertIn("'instance'", str(cm.exception))

    def test_planning_only_gpu_settings_are_not_sent(self):
        """A plan file records bwplan's --power-limit and --attention-kernel (power_limit_w, attention_kernel): the
        trainer reads such a plan without them and refuses them as hyperparameters (a job cannot carry them)."""
        plan = C.plan_from_dict({"model": "Llama-3.2-1B", "gpu": "h100", "gpus": 8, "power_limit_w": 500, "attention_kernel": "fa2"}, CONTRACT)
        self.assertNotIn("power_limit_w", plan)
        self.assertNotIn("attention_kernel", plan)
        self.assertNotIn("power_limit_w", C.plan_to_hyperparameters({"model": "Llama-3.2-1B", "gpus": 8, "power_limit_w": 500}, contract=CONTRACT))
        for name in ("power_limit_w", "attention_kernel"):
            with self.subTest(name=name), self.assertRaises(C.ContractError) as cm:
                C.parse_hyperparameters({"contract_version": "1", "model": "Llama-3.2-1B", "gpus": "8", name: "500"}, CONTRACT)
            self.assertIn("planning-only", str(cm.exception))

    def test_main_prints_the_plan(self):
        hps = {"contract_version": "1", "model": "Llama-3.2-1B", "gpus": "8", "precision": "fp8", "fp8_all_gather": "True"}
        with tempfile.TemporaryDirectory() as d:
            p = os.path.join(d, "hp.json")
            with open(p, "w") as f:
                json.dump(hps, f)
            rc_path = os.path.join(d, "rc.json")
            with open(rc_path, "w") as f:
                json.dump({"current_host": "algo-1", "hosts": ["algo-1"], "current_instance_type": "ml.p5.48xlarge"}, f)
            out = subprocess.run([sys.executable, os.path.join(ROOT, "apps", "train", "contract.py"), "--hyperparameters", p,
                                  "--resource-config", rc_path], capture_output=True, text=True, check=True)
            plan = json.loads(out.stdout)
            self.assertEqual(plan, C.parse_hyperparameters(hps, CONTRACT, {"hosts": ["algo-1"], "current_instance_type": "ml.p5.48xlarge"}))
            self.assertEqual(plan["nodes"], 1)
            bad = subprocess.run([sys.executable, os.path.join(ROOT, "apps", "train", "contract.py"), "--", "--model", "m",
                                  "--gpus", "x", "--contract_version", "1"], capture_output=True, text=True)
            self.assertEqual(bad.returncode, 2)
            self.assertEqual(len(bad.stderr.strip().splitlines()), 1)
            self.assertIn("'gpus'", bad.stderr)


if __name__ == "__main__":
    unittest.main()
