"""tools/device_check.py without a GPU (issue 12, must-show 3): the dry run builds the ten plans
with bwplan, checks them with the trainer's contract parser and train.py --dry-run --probe, prints
the command; without CUDA it exits 77; earlier records are compared against the 5 % / 15 % bounds.
Needs the bwplan binary in $BWPLAN_BIN (ctest sets it); skipped without it. No torch."""

import json
import os
import subprocess
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.abspath(os.path.join(HERE, "..", ".."))
TOOL = os.path.join(ROOT, "tools", "device_check.py")
BWPLAN = os.environ.get("BWPLAN_BIN")
HEAVY = ("torch", "transformers", "torchao", "numpy", "accelerate", "peft")

# --python for the run path without a GPU: answers the CUDA query as an H200 would, passes
# --dry-run to the real train.py, and for --probe writes one record per plan at FAKE_MEM / FAKE_TPS
# times below bwplan's estimate (read from the estimate files device_check.py left in --output-dir).
FAKE = r'''"""A stand-in for the trainer's interpreter on a machine without CUDA (tests of device_check.py's run path)."""
import glob, json, os, subprocess, sys, time
args = sys.argv[1:]
if args[:1] == ["-c"]:
    print(json.dumps({"cuda": True, "gpu": os.environ.get("FAKE_GPU", "NVIDIA H200"), "torch": "2.11.0+fake", "cuda_version": "12.9",
                      "device_count": 1, "transformers": "4.57.1", "torchao": os.environ.get("FAKE_TORCHAO") or None}))
    sys.exit(0)
if "--dry-run" in args:
    sys.exit(subprocess.call([sys.executable] + args))
probe = args[args.index("--probe") + 1]
out = args[args.index("--output-dir") + 1]
ests = {}
for fn in glob.glob(os.path.join(out, "estimate-*.json")):
    e = json.load(open(fn)); c = e["config"]
    ests[(c["precision"], c["master_weights"], c["activation_checkpointing"], c["modules"], c["loss"], c.get("finetune", "full"), c.get("optimizer", "adamw"))] = (e["memory"]["peak_allocated_bytes"], e["throughput"]["tokens_per_s"], e["memory"]["peak_reserved_bytes"])
mem_f, tps_f = float(os.environ.get("FAKE_MEM", "1.02")), float(os.environ.get("FAKE_TPS", "0.93"))
with open(os.path.join(out, "measurements.jsonl"), "a") as f:
    f.write(json.dumps({"kind": "env", "gpu": "NVIDIA H200", "torch": "2.11.0+fake"}) + "\n")
    for i, p in enumerate(json.load(open(probe))["plans"]):
        time.sleep(float(os.environ.get("FAKE_SLEEP", "0")))
        m, t, res = ests[(p["precision"], p["master_weights"], p["activation_checkpointing"], p.get("modules", "fused"), p.get("loss", "standard"), p.get("finetune", "full"), p.get("optimizer", "adamw"))]
        f.write(json.dumps({"kind": "probe", "ok": True, "plan": p, "peak_allocated": int(m / mem_f), "tokens_per_s": t / tps_f,
                            "peak_reserved": int(res / mem_f),
                            "versions": {"transformers": "4.57.1"}}) + "\n")
        f.flush()
        print(f"probe {i + 1} {p['precision']} ok", flush=True)
'''


def fake_python(d):
    with open(os.path.join(d, "fake.py"), "w") as f:
        f.write(FAKE)
    sh = os.path.join(d, "py")
    with open(sh, "w") as f:
        f.write(f"#!/bin/sh\nexec {sys.executable} {os.path.join(d, 'fake.py')} \"$@\"\n")
    os.chmod(sh, 0o755)
    return sh


def run_tool(args, out, env_extra=None):
    """device_check.py where importing any heavy library raises ImportError (as on a CI machine)."""
    block = os.path.join(out, "block")
    for lib in HEAVY:
        os.makedirs(os.path.join(block, lib), exist_ok=True)
        with open(os.path.join(block, lib, "__init__.py"), "w") as f:
            f.write(f"raise ImportError('{lib} must not be imported here')\n")
    env = dict(os.environ, PYTHONPATH=block, **(env_extra or {}))
    env.pop("OUT", None)
    return subprocess.run([sys.executable, TOOL, "--bwplan", BWPLAN, "--out", os.path.join(out, "o")] + args,
                          capture_output=True, text=True, env=env, timeout=120)


@unittest.skipUnless(BWPLAN and os.path.isfile(BWPLAN), "BWPLAN_BIN not set to a bwplan binary")
class DeviceCheckDryRunTest(unittest.TestCase):
    def test_dry_run(self):
        with tempfile.TemporaryDirectory() as d:
            r = run_tool(["--dry-run"], d)
            self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
            for name in ("bf16, fp32 master", "full checkpointing", "per-op selective", "fp8 (tensorwise)", "bf16 master",
                         "transformers' modules", "chunked loss", "LoRA r16 all-linear", "SGD", "Adafactor"):
                self.assertIn(f"| {name} |", r.stdout)
            self.assertIn("train.py --probe", r.stdout)
            with open(os.path.join(d, "o", "probe-plans.json")) as f:
                plans = json.load(f)["plans"]
            self.assertEqual(len(plans), 10)
            combos = {(p["precision"], p["master_weights"], p["activation_checkpointing"], p.get("modules", "fused"),
                       p.get("loss", "standard")) for p in plans}
            self.assertEqual(combos, {("bf16", "fp32", "none", "fused", "standard"), ("bf16", "fp32", "full", "fused", "standard"),
                                      ("bf16", "fp32", "selective-op", "fused", "standard"), ("fp8", "fp32", "none", "fused", "standard"),
                                      ("bf16", "bf16", "none", "fused", "standard"), ("bf16", "fp32", "none", "transformers", "standard"),
                                      ("bf16", "fp32", "none", "fused", "chunked")})
            for p in plans:
                self.assertEqual((p["model"], p["gpus"], p["sharding"], p["model_init"]), ("Llama-3.2-1B", 1, "none", "random"))
                self.assertEqual(p["measure_warmup"] + p["measure_steps"], 10)
            self.assertTrue(os.path.isfile(os.path.join(d, "o", "device_check.md")))

    def test_no_cuda_exits_77(self):
        with tempfile.TemporaryDirectory() as d:
            r = run_tool(["--plans", "bf16-master"], d)
            self.assertEqual(r.returncode, 77, r.stdout + r.stderr)
            self.assertIn("no CUDA device", r.stdout)

    def test_records_against_bounds(self):
        with tempfile.TemporaryDirectory() as d:
            r = run_tool(["--dry-run", "--plans", "bf16-fp32-master,bf16-master"], d)
            self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
            with open(os.path.join(d, "o", "probe-plans.json")) as f:
                plans = json.load(f)["plans"]
            ests = {}
            for s in ("bf16-fp32-master", "bf16-master"):
                with open(os.path.join(d, "o", f"estimate-{s}.json")) as f:
                    e = json.load(f)
                ests[e["config"]["master_weights"]] = (e["memory"]["peak_allocated_bytes"], e["throughput"]["tokens_per_s"],
                                                       e["memory"]["peak_reserved_bytes"])

            def write(path, mem_factor, tps_factor, res_factor=None):
                with open(path, "w") as f:
                    f.write(json.dumps({"kind": "env", "gpu": "NVIDIA H200", "torch": "2.11.0", "cuda": "12.9"}) + "\n")
                    for p in plans:
                        m, t, res = ests[p["master_weights"]]
                        rec = {"kind": "probe", "ok": True, "plan": p, "peak_allocated": int(m / mem_factor),
                               "tokens_per_s": t / tps_factor, "versions": {"transformers": "4.57.1"}}
                        if res_factor is not None:
                            rec["peak_reserved"] = int(res / res_factor)
                        f.write(json.dumps(rec) + "\n")

            good = os.path.join(d, "good.jsonl")
            write(good, 1.03, 1.10)
            r = run_tool(["--from-records", good, "--plans", "bf16-fp32-master,bf16-master"], d)
            self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
            self.assertIn("+3.0 %", r.stdout)
            self.assertIn("NVIDIA H200", r.stdout)
            bad = os.path.join(d, "bad.jsonl")
            write(bad, 1.0, 1.2)
            r = run_tool(["--from-records", bad, "--plans", "bf16-fp32-master,bf16-master"], d)
            self.assertEqual(r.returncode, 1, r.stdout + r.stderr)
            self.assertIn("✗ tokens/s", r.stdout)
            with open(os.path.join(d, "o", "device_check.md")) as f:
                self.assertIn("| bf16 master |", f.read())
            # peak reserved (issue 15): compared when the record carries it, against 6 %
            res_ok = os.path.join(d, "res_ok.jsonl")
            write(res_ok, 1.03, 1.10, 0.95)
            r = run_tool(["--from-records", res_ok, "--plans", "bf16-fp32-master,bf16-master"], d)
            self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
            self.assertIn("| \u22125.0 % |", r.stdout)  # measured = estimate / 0.95: error 0.95 - 1
            res_bad = os.path.join(d, "res_bad.jsonl")
            write(res_bad, 1.03, 1.10, 1.08)
            r = run_tool(["--from-records", res_bad, "--plans", "bf16-fp32-master,bf16-master"], d)
            self.assertEqual(r.returncode, 1, r.stdout + r.stderr)
            self.assertIn("✗ reserved", r.stdout)
            self.assertNotIn("✗ memory", r.stdout)

    def test_run_path_with_a_stand_in_trainer(self):
        with tempfile.TemporaryDirectory() as d:
            py = fake_python(d)
            r = run_tool(["--python", py], d)
            self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
            self.assertIn("skipped: torchao not installed", r.stdout)
            self.assertIn("9 of 10 plans measured", r.stdout)
            self.assertTrue(os.path.isfile(os.path.join(d, "o", "measurements.jsonl")))
            r = run_tool(["--python", py, "--separate", "--plans", "fp8-tensorwise,bf16-master"], d,
                         {"FAKE_TORCHAO": "0.18.0", "FAKE_MEM": "0.9"})
            self.assertEqual(r.returncode, 1, r.stdout + r.stderr)
            self.assertIn("| fp8 (tensorwise) |", r.stdout)
            self.assertIn("✗ memory", r.stdout)
            r = run_tool(["--python", py, "--timeout", "3", "--plans", "bf16-master,full-checkpointing"], d, {"FAKE_SLEEP": "2"})
            self.assertEqual(r.returncode, 1, r.stdout + r.stderr)
            self.assertIn("no record (timed out)", r.stdout)
            r = run_tool(["--python", py], d, {"FAKE_GPU": "NVIDIA H100 80GB HBM3"})
            self.assertEqual(r.returncode, 2, r.stdout + r.stderr)
            self.assertIn("pass --gpu h100", r.stderr)

    def test_bundle_then_estimates_without_the_binary(self):
        with tempfile.TemporaryDirectory() as d:
            b = os.path.join(d, "bundle")
            r = run_tool(["--bundle", b], d)
            self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
            for f in ("bwplan", "estimates/probe-plans.json", "estimates/estimate-bf16-master.json", "estimates/bwplan-version.txt"):
                self.assertTrue(os.path.isfile(os.path.join(b, f)), f)
            py = fake_python(d)
            env = dict(os.environ, PYTHONPATH=os.path.join(d, "block"))
            r = subprocess.run([sys.executable, TOOL, "--bwplan", os.path.join(d, "absent"), "--estimates", os.path.join(b, "estimates"),
                                "--out", os.path.join(d, "o2"), "--python", py], capture_output=True, text=True, env=env, timeout=120)
            self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
            self.assertIn("9 of 10 plans measured", r.stdout)
            r = subprocess.run([sys.executable, TOOL, "--bwplan", os.path.join(d, "absent"), "--estimates", os.path.join(b, "estimates"),
                                "--out", os.path.join(d, "o3"), "--mbs", "2", "--dry-run"], capture_output=True, text=True, env=env, timeout=120)
            self.assertEqual(r.returncode, 2, r.stdout + r.stderr)
            self.assertIn("micro_batch_size 4 (asked 2)", r.stderr)


if __name__ == "__main__":
    unittest.main()
