"""Trainer modules that need torch, without torch: bwtrain.measure and bwtrain.parallel imported over a stand-in
torch (device memory that changes when the process group comes up, as NCCL's buffers change it; dtypes as names)."""

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
    torch.float32, torch.bfloat16 = "float32", "bfloat16"
    torch.nn = types.ModuleType("torch.nn")
    torch.nn.Module = object
    torch.version = types.SimpleNamespace(cuda="13.0")
    torch.cuda = types.SimpleNamespace(mem_get_info=dev.mem_get_info, memory_reserved=lambda device=None: 0,
                                       get_device_name=lambda device=None: "NVIDIA H200")
    distributed = types.ModuleType("torch.distributed")
    distributed.is_available = lambda: True
    distributed.is_initialized = lambda: dev.dist
    torch.distributed = distributed
    return torch, distributed


class StandInTorch(unittest.TestCase):
    """Imports `module` of bwtrain over the stand-in torch (self.mod) and restores sys.modules after."""

    module = ""

    def setUp(self):
        self.dev = FakeDevice()
        torch, distributed = stand_in_torch(self.dev)
        names = ("torch", "torch.distributed", "torch.nn", "bwtrain." + self.module)
        self.saved = {k: sys.modules.get(k) for k in names}
        sys.modules["torch"] = torch
        sys.modules["torch.distributed"] = distributed
        sys.modules["torch.nn"] = torch.nn
        sys.modules.pop("bwtrain." + self.module, None)
        self.mod = importlib.import_module("bwtrain." + self.module)

    def tearDown(self):
        for k, v in self.saved.items():
            if v is None:
                sys.modules.pop(k, None)
            else:
                sys.modules[k] = v


class EnvRecord(StandInTorch):
    module = "measure"

    def test_context_before_and_after_the_process_group(self):
        # a review found the trainer wrote context_used after init_process_group (NCCL's buffers in it) and no
        # context_used_after_dist: calibrate took the whole as the CUDA context and added its default NCCL on top
        before = self.mod.context_bytes("cuda:0")
        self.assertEqual(before, 600 << 20)
        self.dev.dist, self.dev.context = True, 1200 << 20
        rec = self.mod.env_record("cuda:0", before)
        self.assertEqual(rec["kind"], "env")
        self.assertEqual(rec["context_used"], 600 << 20)
        self.assertEqual(rec["context_used_after_dist"], 1200 << 20)

    def test_one_process_without_a_process_group(self):
        rec = self.mod.env_record("cuda:0")
        self.assertEqual(rec["context_used"], 600 << 20)
        self.assertNotIn("context_used_after_dist", rec)


class MixedPrecision(StandInTorch):
    module = "parallel"

    def test_bf16_masters_reduce_in_bf16(self):
        # a review found reduce_dtype fp32 for every plan: FSDP2 keeps an fp32 reduce_dtype when the parameters are
        # already bf16 (it compares it with param_dtype first), so bf16-master plans ran fp32 reduce-scatter copies
        # and fp32 traffic that bwplan's "everything bf16" plan does not count
        self.assertEqual(self.mod.mixed_precision_dtypes("bf16"), {"param_dtype": "bfloat16", "reduce_dtype": "bfloat16"})
        self.assertEqual(self.mod.mixed_precision_dtypes("fp32"), {"param_dtype": "bfloat16", "reduce_dtype": "float32"})


if __name__ == "__main__":
    unittest.main()
