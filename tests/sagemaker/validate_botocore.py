#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Validates every SageMaker payload bwplan emits with botocore's own ParamValidator.

For each instance type of configs/hardware/catalog.json, on 1, 2 and 4 nodes, with and without a
Flexible Training Plan, and for the README's `--emit sagemaker` commands, the CreateTrainingJob request
printed by the `bwplan` binary must pass:
  1. botocore.validate.ParamValidator against the SageMaker model botocore ships (required members,
     unknown members, types, min);
  2. the same validator against the bundled shapes file configs/sagemaker/createtrainingjob-shapes.json
     loaded as a botocore ServiceModel;
  3. the rules ParamValidator leaves to the service (enum, pattern, max), walked here in Python over the
     shapes file with Python's `re` (which has the lookbehind std::regex lacks), and the enum of the
     installed botocore model;
and the SDK forms must agree with the request (`--format estimator`: json.dumps of every hyperparameter
equals the request's value; `--format modeltrainer`: same compute and stopping condition). With --trainer,
every request's hyperparameters must also be read by the reference trainer's own contract parser
(apps/train/contract.py, standard library only) to the plan bwplan was asked for, with no static refusal.
Plans of every mode the trainer runs (fp8, fp8-rowwise, nvfp4, tp, cp, hybrid and grad-op sharding, every
checkpointing mode) are part of the matrix.

Exit 0: all valid; 1: a payload is invalid; 77: skipped (botocore missing or older than 1.38.30, the first
release whose model knows ml.p6-b200.48xlarge).
"""
import argparse
import json
import re
import shlex
import subprocess
import sys

SKIP = 77
MIN_BOTOCORE = (1, 38, 30)
ROLE = "arn:aws:iam::111122223333:role/SageMakerTrainingExecutionRole"
PLAN_ARN = "arn:aws:sagemaker:us-west-2:111122223333:training-plan/bwplan-test-plan"


def version_tuple(v):
    return tuple(int(x) for x in re.findall(r"\d+", v)[:3])


def skip(reason):
    print(f"SKIP: {reason}")
    sys.exit(SKIP)


try:
    import botocore
    import botocore.session
    from botocore.model import ServiceModel
    from botocore.validate import ParamValidator
except Exception as e:  # noqa: BLE001 - any import failure means "cannot check here"
    skip(f"botocore is not importable by {sys.executable} ({e.__class__.__name__}: {e})")

if version_tuple(botocore.__version__) < MIN_BOTOCORE:
    skip(f"botocore {botocore.__version__} is older than 1.38.30 and does not know ml.p6-b200.48xlarge")


def java_pattern_to_python(p):
    # The model's patterns are Java regexes; Python's re lacks \p{..}. Same approximation as the C++ side.
    letters = "a-zA-Z\u00aa\u00b5\u00ba\u00c0-\u00d6\u00d8-\u00f6\u00f8-\u1fff\u2c00-\ud7ff\uf900-\uffef\U00010000-\U000effff"
    classes = {
        r"\p{L}": letters,
        r"\p{Z}": " \u00a0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000",
        r"\p{N}": "0-9\u00b2\u00b3\u00b9\u00bc-\u00be",
        r"\p{Alnum}": "a-zA-Z0-9",
    }
    for k, v in classes.items():
        p = p.replace(k, v)
    return re.compile(p)


class Strict:
    """enum, pattern and max (and min) over the shapes, the checks ParamValidator does not make."""

    def __init__(self, shapes, installed_enum):
        self.shapes = shapes
        self.installed_enum = installed_enum
        self.notes = set()

    def check(self, value, shape, path=""):
        errs = []
        self._walk(value, shape, path, errs)
        return errs

    def _range(self, n, sh, path, what, errs):
        if "min" in sh and n < sh["min"]:
            errs.append(f"{path}: {what} {n} < min {sh['min']}")
        if "max" in sh and n > sh["max"]:
            errs.append(f"{path}: {what} {n} > max {sh['max']}")

    def _string(self, s, name, path, errs):
        sh = self.shapes[name]
        if "enum" in sh:
            if s not in sh["enum"]:
                errs.append(f"{path}: {s!r} not in enum {name}")
            installed = self.installed_enum.get(name)
            if installed is not None and s not in installed:
                self.notes.add(f"{path}: {s!r} is not in the enum of the installed botocore {botocore.__version__} model")
        self._range(len(s), sh, path, "length", errs)
        if "pattern" in sh and not java_pattern_to_python(sh["pattern"]).fullmatch(s):
            errs.append(f"{path}: {s!r} does not match {sh['pattern']}")

    def _walk(self, v, name, path, errs):
        sh = self.shapes[name]
        t = sh["type"]
        expected = {"structure": dict, "map": dict, "list": list, "string": str, "integer": int, "long": int}.get(t)
        if expected is not None and (not isinstance(v, expected) or (expected is int and isinstance(v, bool))):
            return  # a type error, reported by ParamValidator
        if t == "structure":
            for k, x in v.items():
                if k in sh["members"]:  # unknown members are ParamValidator's
                    self._walk(x, sh["members"][k]["shape"], f"{path}.{k}" if path else k, errs)
        elif t == "list":
            self._range(len(v), sh, path, "list length", errs)
            for i, x in enumerate(v):
                self._walk(x, sh["member"]["shape"], f"{path}[{i}]", errs)
        elif t == "map":
            self._range(len(v), sh, path, "map size", errs)
            for k, x in v.items():
                self._string(k, sh["key"]["shape"], f"{path}<key {k}>", errs)
                self._walk(x, sh["value"]["shape"], f"{path}.{k}", errs)
        elif t == "string":
            self._string(v, name, path, errs)
        elif t in ("integer", "long"):
            self._range(v, sh, path, "value", errs)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--bwplan", required=True, help="the bwplan binary")
    ap.add_argument("--configs", required=True, help="the configs/ directory (catalog and shapes)")
    ap.add_argument("--readme", required=True, help="README.md whose --emit sagemaker commands are run")
    ap.add_argument("--trainer", help="apps/train: parse every request's hyperparameters with its contract.py")
    args = ap.parse_args()
    contract = None
    if args.trainer:
        sys.path.insert(0, args.trainer)
        import contract as contract_mod  # noqa: E402 - the trainer's stdlib-only parser
        contract = (contract_mod, contract_mod.load_contract(f"{args.configs}/training-contract.json"))

    with open(f"{args.configs}/sagemaker/createtrainingjob-shapes.json") as f:
        bundle = json.load(f)
    with open(f"{args.configs}/hardware/catalog.json") as f:
        catalog = json.load(f)

    installed = botocore.session.get_session().get_service_model("sagemaker")
    bundled = ServiceModel({k: bundle[k] for k in ("version", "metadata", "operations", "shapes")}, service_name="sagemaker")
    inputs = {
        f"installed botocore {botocore.__version__} model": installed.operation_model("CreateTrainingJob").input_shape,
        "bundled shapes file": bundled.operation_model("CreateTrainingJob").input_shape,
    }
    installed_enum = {}
    for name in ("TrainingInstanceType", "TrainingInputMode", "OutputCompressionType", "S3DataType", "S3DataDistribution"):
        try:
            installed_enum[name] = set(installed.shape_for(name).enum)
        except Exception:  # noqa: BLE001 - older models may lack a shape
            pass
    strict = Strict(bundle["shapes"], installed_enum)
    failures = []
    checked = 0

    def run(cmd):
        p = subprocess.run(cmd, capture_output=True, text=True)
        if p.returncode != 0:
            failures.append(f"{shlex.join(cmd)}: exit {p.returncode}: {p.stderr.strip()}")
            return None
        return json.loads(p.stdout)

    def trainer_reads(req, label, expect=None):
        """The trainer's contract parser reads the hyperparameters (as SageMaker stores them) to a plan it runs."""
        if contract is None:
            return
        mod, k = contract
        rc = {"current_instance_type": req["ResourceConfig"]["InstanceType"],
              "hosts": [f"algo-{i + 1}" for i in range(req["ResourceConfig"]["InstanceCount"])]}
        # `probe` is a trainer option (train.py --probe FILE, taken by its argparse before the contract sees the rest)
        hps = {key: v for key, v in req["HyperParameters"].items() if key != "probe"}
        try:
            plan = mod.parse_hyperparameters(hps, k, rc)
        except mod.ContractError as e:
            failures.append(f"{label}: the trainer's contract parser rejects the hyperparameters: {e}")
            return
        refusals = mod.static_refusals(plan, k)
        if refusals:
            failures.append(f"{label}: the trainer refuses the plan: {refusals}")
        for key, want in (expect or {}).items():
            if plan.get(key) != want:
                failures.append(f"{label}: the trainer reads {key}={plan.get(key)!r}, bwplan was asked for {want!r}")

    def validate(req, label):
        nonlocal checked
        checked += 1
        trainer_reads(req, label)
        for model_name, shape in inputs.items():
            report = ParamValidator().validate(req, shape)
            if report.has_errors():
                failures.append(f"{label}: ParamValidator ({model_name}): {report.generate_report()}")
        for e in strict.check(req, "CreateTrainingJobRequest"):
            failures.append(f"{label}: {e}")

    def estimator_agrees(req, est, label):
        hp = est["estimator"]["hyperparameters"]
        for k, v in hp.items():
            if json.dumps(v) != req["HyperParameters"].get(k):
                failures.append(f"{label}: estimator hyperparameter {k}: json.dumps({v!r}) != request {req['HyperParameters'].get(k)!r}")
        sdk_added = {k for k in req["HyperParameters"] if k.startswith("sagemaker_") or k == "mp_parameters"}
        if set(req["HyperParameters"]) - sdk_added != set(hp):
            failures.append(f"{label}: estimator hyperparameters {sorted(hp)} differ from the request's non-SDK keys")
        e = est["estimator"]
        pairs = [(e["instance_type"], req["ResourceConfig"]["InstanceType"]), (e["instance_count"], req["ResourceConfig"]["InstanceCount"]),
                 (e["volume_size"], req["ResourceConfig"]["VolumeSizeInGB"]), (e["max_run"], req["StoppingCondition"]["MaxRuntimeInSeconds"]),
                 (e["role"], req["RoleArn"]), (e["image_uri"], req["AlgorithmSpecification"]["TrainingImage"]),
                 (e["output_path"], req["OutputDataConfig"]["S3OutputPath"]), (json.dumps(e["source_dir"]), req["HyperParameters"]["sagemaker_submit_directory"]),
                 (json.dumps(e["entry_point"]), req["HyperParameters"]["sagemaker_program"]),
                 (e.get("training_plan"), req["ResourceConfig"].get("TrainingPlanArn")), (est["fit"]["job_name"], req["TrainingJobName"])]
        for got, want in pairs:
            if got != want:
                failures.append(f"{label}: estimator {got!r} != request {want!r}")

    def modeltrainer_agrees(req, mt, label):
        m = mt["model_trainer"]
        pairs = [(m["compute"]["instance_type"], req["ResourceConfig"]["InstanceType"]), (m["compute"]["instance_count"], req["ResourceConfig"]["InstanceCount"]),
                 (m["compute"].get("training_plan_arn"), req["ResourceConfig"].get("TrainingPlanArn")),
                 (m["stopping_condition"]["max_runtime_in_seconds"], req["StoppingCondition"]["MaxRuntimeInSeconds"]),
                 (m["training_image"], req["AlgorithmSpecification"]["TrainingImage"])]
        for got, want in pairs:
            if got != want:
                failures.append(f"{label}: modeltrainer {got!r} != request {want!r}")
        for k, v in m["hyperparameters"].items():  # what the script receives after the toolkit's json.loads
            if json.loads(req["HyperParameters"][k]) != v:
                failures.append(f"{label}: modeltrainer hyperparameter {k}={v!r} != request {req['HyperParameters'][k]!r}")

    # 1. the matrix: every catalog instance, 1/2/4 nodes, with and without a training plan. --force: the matrix
    # checks the payloads, not the fit (Llama-3.1-8B does not fit one 8x A10G ml.g5.48xlarge node).
    for inst in catalog["instances"]:
        for nodes in (1, 2, 4):
            for plan in (None, PLAN_ARN):
                base = [args.bwplan, "sagemaker", "Llama-3.1-8B", "--instance", inst["id"], "--nodes", str(nodes),
                        "--force", "--ac", "full", "--role-arn", ROLE, "--output-s3", "s3://amzn-s3-demo-bucket/bwplan/output/",
                        "--train-s3", "train=s3://amzn-s3-demo-bucket/data/train/", "--train-s3", "validation=s3://amzn-s3-demo-bucket/data/val/",
                        "--checkpoint-s3", "s3://amzn-s3-demo-bucket/bwplan/checkpoints/", "--tag", "project=bwplan", "--retries", "1",
                        "--job-name", f"bwplan-test-{nodes}n"]
                if plan:
                    base += ["--training-plan-arn", plan, "--max-pending", "7200"]
                label = f"{inst['id']} x {nodes}{' (training plan)' if plan else ''}"
                req = run(base)
                if req is None:
                    continue
                validate(req, label)
                if plan and req["ResourceConfig"].get("TrainingPlanArn") != plan:
                    failures.append(f"{label}: TrainingPlanArn missing")
                if req["ResourceConfig"]["InstanceCount"] != nodes or req["ResourceConfig"]["InstanceType"] != inst["id"]:
                    failures.append(f"{label}: ResourceConfig {req['ResourceConfig']}")
                est = run(base + ["--format", "estimator"])
                if est is not None:
                    estimator_agrees(req, est, label)
                mt = run(base + ["--format", "modeltrainer"])
                if mt is not None:
                    modeltrainer_agrees(req, mt, label)

    # 2. plans of every mode the trainer runs, on two P6-B200 nodes (what bwplan was asked for must reach the trainer)
    modes = [
        ({"--precision": "fp8", "--ac": "selective-op", "--fp8-all-gather": None}, {"precision": "fp8", "activation_checkpointing": "selective-op", "fp8_all_gather": True}),
        ({"--precision": "fp8-rowwise", "--ac": "every-2", "--master": "bf16"}, {"precision": "fp8-rowwise", "activation_checkpointing": "every-2", "master_weights": "bf16"}),
        ({"--precision": "nvfp4", "--ac": "full"}, {"precision": "nvfp4", "bf16_layers": "0.15", "activation_checkpointing": "full"}),
        ({"--tp": "2", "--cp": "2", "--seq": "16384", "--ac": "selective-attn"}, {"tp": 2, "cp": 2, "seq_len": 16384, "activation_checkpointing": "selective-attn"}),
        ({"--sharding": "hybrid", "--shard-group": "4", "--tp": "2"}, {"sharding": "hybrid", "shard_group": 4, "tp": 2}),
        ({"--sharding": "grad-op", "--tp": "4", "--loss": "standard", "--optimizer-impl": "foreach"}, {"sharding": "grad-op", "tp": 4, "optimizer_impl": "foreach"}),
        ({"--sharding": "none", "--loss": "chunked", "--mbs": "1"}, {"sharding": "none", "loss": "chunked"}),
    ]
    for flags, expect in modes:
        cmd = [args.bwplan, "sagemaker", "Llama-3.1-8B", "--instance", "ml.p6-b200.48xlarge", "--nodes", "2", "--force",
               "--role-arn", ROLE, "--output-s3", "s3://amzn-s3-demo-bucket/bwplan/output/",
               "--train-s3", "train=s3://amzn-s3-demo-bucket/data/train/", "--job-name", "bwplan-test-modes"]
        for f, v in flags.items():
            cmd += [f] if v is None else [f, v]
        label = "modes: " + " ".join(f"{f} {v or ''}".strip() for f, v in flags.items())
        req = run(cmd)
        if req is None:
            continue
        validate(req, label)
        trainer_reads(req, label, expect)
        est = run(cmd + ["--format", "estimator"])
        if est is not None:
            estimator_agrees(req, est, label)
        mt = run(cmd + ["--format", "modeltrainer"])
        if mt is not None:
            modeltrainer_agrees(req, mt, label)

    # 2b. the probe (issue 16): a short one-node job of the trainer's probe mode; probe.json in the source dir is
    # read by the trainer's own probe reader, and the job is sized to cost little
    import tempfile
    with tempfile.TemporaryDirectory() as src:
        for model, inst in (("Llama-3.2-1B", "ml.p5.48xlarge"), ("Llama-3.1-8B", "ml.p6-b200.48xlarge")):
            cmd = [args.bwplan, "sagemaker", model, "--instance", inst, "--probe", "--source-dir", src, "--role-arn", ROLE,
                   "--output-s3", "s3://amzn-s3-demo-bucket/bwplan/output/", "--job-name", "bwplan-test-probe"]
            label = f"probe: {model} on {inst}"
            req = run(cmd)
            if req is None:
                continue
            validate(req, label)
            if req["HyperParameters"].get("probe") != '"probe.json"':
                failures.append(f"{label}: HyperParameters.probe is {req['HyperParameters'].get('probe')!r}")
            if req["ResourceConfig"]["InstanceCount"] != 1 or req["StoppingCondition"]["MaxRuntimeInSeconds"] > 3600:
                failures.append(f"{label}: not a small one-node job: {req['ResourceConfig']} {req['StoppingCondition']}")
            if contract is not None:
                import train as train_mod  # noqa: E402 - train.py imports no torch at module level
                try:
                    plans = train_mod.read_probe(f"{src}/probe.json",
                                                 contract[1])
                except Exception as e:  # noqa: BLE001
                    failures.append(f"{label}: the trainer cannot read probe.json: {e}")
                    continue
                if not 1 <= len(plans) <= 4 or any(p["max_steps"] != 5 or p["model"] != model for p in plans):
                    failures.append(f"{label}: probe plans {[(p['model'], p['max_steps']) for p in plans]}")
            est = run(cmd + ["--format", "estimator"])
            if est is not None:
                estimator_agrees(req, est, label)

    # 3. the README's commands, run as written (with the built binary)
    with open(args.readme) as f:
        readme = f.read()
    commands = [line.strip() for line in readme.splitlines()
                if line.strip().startswith("bwplan ") and "--emit sagemaker" in line]
    if not any("--nodes 1" in c for c in commands) or not any("--nodes 2" in c for c in commands):
        failures.append(f"README.md: expected `bwplan recommend ... --emit sagemaker` examples with --nodes 1 and --nodes 2, found {commands}")
    for c in commands:
        argv = shlex.split(c.split(">")[0])
        req = run([args.bwplan] + argv[1:])
        if req is not None:
            validate(req, f"README: {c}")

    for n in sorted(strict.notes):
        print(f"note: {n}")
    if failures:
        print(f"{len(failures)} problem(s) in {checked} payloads:")
        for f in failures:
            print(f"  {f}")
        return 1
    print(f"OK: {checked} CreateTrainingJob payloads ({len(catalog['instances'])} instance types x 1/2/4 nodes x with/without a "
          f"training plan, {len(modes)} plan modes, and {len(commands)} README commands) pass botocore {botocore.__version__} "
          f"ParamValidator against the installed model and the bundled shapes, plus enum, pattern and max checks; estimator and "
          f"modeltrainer forms agree" + ("; the trainer's contract parser reads every plan and refuses none" if contract else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
