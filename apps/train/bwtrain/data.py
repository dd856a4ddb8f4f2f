"""Training data: the packed token dataset of the input channel, or synthetic tokens.

Format (``data_format`` in configs/training-contract.json, docs/training-contract.md):
a directory with ``meta.json`` {"format": "bwplan-packed-tokens", "version": 1, "dtype": "uint16" |
"uint32", "vocab_size": N, "files": [...]} and token files (``.bin`` raw little-endian of that
dtype, or 1-D ``.npy``), read as one token stream through ``numpy.memmap`` / ``numpy.load(mmap_mode="r")``.
Sample i = tokens [i*seq, i*seq + seq + 1): inputs the first seq tokens, labels the last seq.
Which samples a rank reads depends only on (step, micro-batch, data-parallel rank), so a resumed
job continues where it stopped with no saved reader state.
"""

from __future__ import annotations

import bisect
import json
import os
from typing import Dict, List, Optional, Tuple

import numpy as np
import torch

FORMAT = "bwplan-packed-tokens"


class PackedTokens:
    def __init__(self, directory: str):
        meta_path = os.path.join(directory, "meta.json")
        if not os.path.isfile(meta_path):
            raise ValueError(f"data: {directory} has no meta.json (format {FORMAT})")
        with open(meta_path, encoding="utf-8") as f:
            meta = json.load(f)
        if meta.get("format") != FORMAT or meta.get("version") != 1:
            raise ValueError(f"data: {meta_path}: expected format {FORMAT} version 1")
        dtype = np.dtype(meta.get("dtype", "uint32")).newbyteorder("<")
        if dtype.kind != "u" or dtype.itemsize not in (2, 4):
            raise ValueError(f"data: {meta_path}: dtype must be uint16 or uint32")
        self.vocab_size = int(meta["vocab_size"])
        names = meta.get("files") or (sorted(n for n in os.listdir(directory) if n.endswith(".bin"))
                                      + sorted(n for n in os.listdir(directory) if n.endswith(".npy")))
        if not names:
            raise ValueError(f"data: {directory} has no .bin or .npy token files")
        self.arrays: List[np.ndarray] = []
        for n in names:
            p = os.path.join(directory, n)
            a = np.load(p, mmap_mode="r") if n.endswith(".npy") else np.memmap(p, dtype=dtype, mode="r")
            if a.ndim != 1:
                raise ValueError(f"data: {p} is not one-dimensional")
            self.arrays.append(a)
        self.starts = [0]
        for a in self.arrays:
            self.starts.append(self.starts[-1] + len(a))
        self.tokens = self.starts[-1]

    def samples(self, seq_len: int) -> int:
        return max(0, (self.tokens - 1) // seq_len)

    def window(self, start: int, length: int) -> np.ndarray:
        """``length`` tokens of the stream from ``start`` (spanning files)."""
        out = np.empty(length, dtype=np.int64)
        filled = 0
        while filled < length:
            pos = start + filled
            f = bisect.bisect_right(self.starts, pos) - 1
            off = pos - self.starts[f]
            take = min(length - filled, len(self.arrays[f]) - off)
            out[filled:filled + take] = self.arrays[f][off:off + take]
            filled += take
        return out


class Batches:
    """Micro-batches of shape [micro_batch_size, seq_len + 1] for this data-parallel rank."""

    def __init__(self, plan: Dict, vocab_size: int, dp_rank: int, dp_size: int, device: torch.device,
                 channel_dir: Optional[str]):
        self.mbs, self.seq, self.gbs = plan["micro_batch_size"], plan["seq_len"], plan["global_batch_size"]
        self.dp_rank, self.dp_size, self.device = dp_rank, dp_size, device
        self.vocab_size, self.seed = vocab_size, plan["seed"]
        self.packed = PackedTokens(channel_dir) if channel_dir else None
        if self.packed is not None:
            if self.packed.vocab_size > vocab_size:
                raise ValueError(f"data: the dataset's vocab_size {self.packed.vocab_size} exceeds the model's {vocab_size}")
            if self.packed.samples(self.seq) < 1:
                raise ValueError(f"data: {self.packed.tokens} tokens hold no sample of {self.seq + 1} tokens")

    @property
    def source(self) -> str:
        return "packed" if self.packed is not None else "synthetic"

    def get(self, step: int, micro: int) -> torch.Tensor:
        if self.packed is None:
            g = torch.Generator(device=self.device)
            g.manual_seed((self.seed * 1_000_003 + step) * 65_537 + micro * 257 + self.dp_rank)
            return torch.randint(0, self.vocab_size, (self.mbs, self.seq + 1), device=self.device, generator=g)
        n = self.packed.samples(self.seq)
        base = step * self.gbs + micro * self.mbs * self.dp_size + self.dp_rank * self.mbs
        rows = [self.packed.window(((base + j) % n) * self.seq, self.seq + 1) for j in range(self.mbs)]
        return torch.from_numpy(np.stack(rows)).to(self.device, non_blocking=True)


def channel_dir(data: str) -> Tuple[Optional[str], str]:
    """(directory or None, how it was chosen) for the ``data`` hyperparameter."""
    if data == "synthetic":
        return None, "synthetic"
    name = "train" if data == "auto" else data
    d = os.environ.get(f"SM_CHANNEL_{name.upper()}", os.path.join("/opt/ml/input/data", name))
    if os.path.isdir(d):
        return d, f"channel {name}"
    if data == "auto":
        return None, "synthetic (no train channel)"
    raise ValueError(f"hyperparameter 'data': input channel {name} not found at {d}")


def write_packed(directory: str, tokens: np.ndarray, vocab_size: int, dtype: str = "uint32", files: int = 1) -> None:
    """Write a packed dataset (for tests and small jobs): ``files`` .bin files + meta.json."""
    os.makedirs(directory, exist_ok=True)
    parts = np.array_split(np.asarray(tokens, dtype=np.dtype(dtype).newbyteorder("<")), files)
    names = []
    for i, part in enumerate(parts):
        n = f"tokens-{i:05d}.bin"
        part.tofile(os.path.join(directory, n))
        names.append(n)
    with open(os.path.join(directory, "meta.json"), "w", encoding="utf-8") as f:
        json.dump({"format": FORMAT, "version": 1, "dtype": dtype, "vocab_size": vocab_size, "files": names}, f, indent=1)
