"""The trainer's env record without a GPU: bwtrain.measure imported over a stand-in torch whose device memory
changes when the process group comes up, as NCCL's buffers change it."""

import importlib
import os
import sys
import types
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.abspath(os.path.join(HERE, "..", ".."))
sys.path.insert(0, os.path.join(ROOT, "apps", "train"))

GIB = 1 << 30


class FakeDevice:
    """total - free - reserved is the context: 600 MiB, 1.2 GiB once NCCL is up (measured on H200: 648,871,936 and
    1,233,977,344 in shared/groundtruth/h200-calibration.jsonl)."""

    def __init__(self):
        self.total = 140 * GIB
        self.context = 600 << 20
        self.dist = False

    def mem_get_info(self, device=None):
        return self.total - self.context, self.total


def stand_in_torch(dev):
    torch = types.ModuleType("torch")
    torch.__version__ = "0.0-test"
    torch.version = types.SimpleNamespace(cuda="13.0")
    torch.cuda = types.SimpleNamespace(mem_get_info=dev.mem_get_info, memory_reserved=lambda device=None: 0,
                                       get_device_name=lambda device=None: "NVIDIA H200")
    distributed = types.ModuleType("torch.distributed")
    distributed.is_available = lambda: True
    distributed.is_initialized = lambda: dev.dist
    distributed.get_backend = lambda: "nccl"
    torch.distributed = distributed
    return torch, distributed


class EnvRecord(unittest.TestCase):
    def setUp(self):
        self.dev = FakeDevice()
        torch, distributed = stand_in_torch(self.dev)
        self.saved = {k: sys.modules.get(k) for k in ("torch", "torch.distributed", "bwtrain.measure")}
        sys.modules["torch"] = torch
        sys.modules["torch.distributed"] = distributed
        sys.modules.pop("bwtrain.measure", None)
        self.meas = importlib.import_module("bwtrain.measure")

    def tearDown(self):
        for k, v in self.saved.items():
            if v is None:
                sys.modules.pop(k, None)
            else:
                sys.modules[k] = v

    def test_context_before_and_after_the_process_group(self):
        # a review found the trainer wrote context_used after init_process_group (NCCL's buffers in it) and no
        # context_used_after_dist: calibrate took the whole as the CUDA context and added its default NCCL on top
        before = self.meas.context_bytes("cuda:0")
        self.assertEqual(before, 600 << 20)
        self.dev.dist, self.dev.context = True, 1200 << 20
        rec = self.meas.env_record("cuda:0", before)
        self.assertEqual(rec["kind"], "env")
        self.assertEqual(rec["context_used"], 600 << 20)
        self.assertEqual(rec["context_used_after_dist"], 1200 << 20)
        self.assertEqual(rec["dist"], "nccl")

    def test_one_process_without_a_process_group(self):
        rec = self.meas.env_record("cuda:0")
        self.assertEqual(rec["context_used"], 600 << 20)
        self.assertNotIn("context_used_after_dist", rec)


if __name__ == "__main__":
    unittest.main()
