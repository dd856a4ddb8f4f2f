"""Pinned API facts: every library name the trainer uses is in tests/train/pinned_api_names.json for
the pinned version, and those versions are the ones apps/train/requirements.txt installs.

When this fails after an edit of apps/train: check the new name in the pinned version's source
and add it to the snapshot with where it was checked (or remove names no longer used).
"""

import glob
import json
import os
import re
import sys
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.abspath(os.path.join(HERE, "..", ".."))
sys.path.insert(0, HERE)

import api_names  # noqa: E402

SNAPSHOT = os.path.join(HERE, "pinned_api_names.json")
REQUIREMENTS = os.path.join(ROOT, "apps", "train", "requirements.txt")
SOURCES = sorted(glob.glob(os.path.join(ROOT, "apps", "train", "**", "*.py"), recursive=True))


def load_snapshot():
    with open(SNAPSHOT, encoding="utf-8") as f:
        return json.load(f)["libraries"]


def pins():
    """name -> version from requirements.txt; the image's torch from its '# torch==X' comment line."""
    out = {}
    with open(REQUIREMENTS, encoding="utf-8") as f:
        for line in f:
            m = re.match(r"^\s*#?\s*([A-Za-z0-9_.-]+)==([0-9][^\s;#]*)", line)
            if m:
                out[m.group(1).lower()] = m.group(2)
    return out


class PinnedApiTest(unittest.TestCase):
    def test_sources_found(self):
        names = {os.path.relpath(p, ROOT) for p in SOURCES}
        for p in ("apps/train/train.py", "apps/train/contract.py", "apps/train/bwtrain/engine.py"):
            self.assertIn(p, names)

    def test_every_used_name_is_pinned(self):
        snap = load_snapshot()
        used = api_names.collect_files(SOURCES)
        missing = []
        for path, names in used.items():
            for n in sorted(names):
                lib = n.split(".", 1)[0]
                if n not in snap[lib]["names"]:
                    missing.append(f"{os.path.relpath(path, ROOT)}: {n} (not in the {lib} {snap[lib]['version']} snapshot)")
        self.assertEqual(missing, [], "\n" + "\n".join(missing))

    def test_snapshot_has_no_stale_names(self):
        snap = load_snapshot()
        used = set()
        for names in api_names.collect_files(SOURCES).values():
            used |= names
        stale = [n for lib in snap.values() for n in lib["names"] if n not in used]
        self.assertEqual(stale, [], "names no longer used by apps/train: remove them from the snapshot")

    def test_every_name_has_evidence(self):
        for lib, entry in load_snapshot().items():
            self.assertTrue(entry["verification"], lib)
            for n, ev in entry["names"].items():
                self.assertTrue(n == lib or n.startswith(lib + "."), n)
                self.assertIsInstance(ev, str)
                self.assertGreater(len(ev), 5, n)

    def test_versions_equal_requirements(self):
        snap, req = load_snapshot(), pins()
        for lib, entry in snap.items():
            self.assertIn(lib, req, f"{lib} has no pin in requirements.txt")
            self.assertEqual(req[lib], entry["version"], f"{lib}: requirements.txt pins {req[lib]}, the snapshot was checked at {entry['version']}")

    def test_torch_is_not_installed_by_requirements(self):
        with open(REQUIREMENTS, encoding="utf-8") as f:
            active = [ln.split("==")[0].strip().lower() for ln in f if ln.strip() and not ln.lstrip().startswith("#")]
        self.assertNotIn("torch", active, "torch comes with the image; pinning it could replace the image's CUDA build")
        for lib in ("transformers", "accelerate", "peft", "torchao"):
            self.assertIn(lib, active)


class CollectorTest(unittest.TestCase):
    def test_aliases_and_function_imports(self):
        src = (
            "import torch\nimport torch.distributed as dist\nfrom torchao.float8 import Float8LinearConfig as F8\n"
            "def f():\n    from torch.utils.checkpoint import checkpoint\n    import transformers\n"
            "    dist.all_reduce(x); F8.from_recipe_name('rowwise'); checkpoint(g)\n"
            "    transformers.AutoConfig.for_model('llama').x()\n    torch.cuda.max_memory_allocated()\n    y = obj.torch.z\n"
        )
        names = api_names.collect(src)
        for n in ("torch.distributed.all_reduce", "torchao.float8.Float8LinearConfig.from_recipe_name",
                  "torch.utils.checkpoint.checkpoint", "transformers.AutoConfig.for_model", "torch.cuda.max_memory_allocated"):
            self.assertIn(n, names)
        # a call ends the chain (what it returns is no library path); other objects' attributes are not names
        self.assertFalse(any(n.endswith((".x", ".z")) for n in names))


if __name__ == "__main__":
    unittest.main()
