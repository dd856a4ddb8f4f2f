"""The two loss implementations of the contract.

* standard: the LM head makes all logits, upcast to fp32, ``F.cross_entropy`` over every token:
  the ground truth's loss (shared/groundtruth/measure.py ``Decoder.forward``) and torchtitan's
  ``cross_entropy_loss`` (components/loss.py). With a vocabulary-parallel head the logits are a
  DTensor sharded on the vocabulary and the call runs under ``loss_parallel``.
* chunked: the tokens are split into 8 chunks (torchtitan ChunkedLossWrapper's num_chunks); each
  chunk's LM head + fp32 cross-entropy runs under a non-reentrant ``torch.utils.checkpoint``, so no
  chunk's logits are kept for backward and backward recomputes one chunk at a time: only one
  chunk of logits is alive in forward or backward (fused linear cross-entropy in chunks).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch.utils.checkpoint import checkpoint

CHUNKS = 8


def standard_loss(h: torch.Tensor, lm_head: torch.nn.Module, labels: torch.Tensor) -> torch.Tensor:
    logits = lm_head(h)
    return F.cross_entropy(logits.flatten(0, 1).float(), labels.flatten(0, 1))


def _chunk_loss_sum(h: torch.Tensor, labels: torch.Tensor, lm_head: torch.nn.Module) -> torch.Tensor:
    return F.cross_entropy(lm_head(h).float(), labels, reduction="sum")


def chunked_loss(h: torch.Tensor, lm_head: torch.nn.Module, labels: torch.Tensor, chunks: int = CHUNKS) -> torch.Tensor:
    flat_h = h.flatten(0, 1)
    flat_y = labels.flatten(0, 1)
    n = flat_y.numel()
    total = flat_h.new_zeros((), dtype=torch.float32)
    # Non-reentrant checkpoint: the LM head weight is reached through the module, so the
    # recomputation uses whatever FSDP has registered then (the unsharded weight in backward).
    for hc, yc in zip(flat_h.chunk(chunks), flat_y.chunk(chunks)):
        total = total + checkpoint(_chunk_loss_sum, hc, yc, lm_head, use_reentrant=False)
    return total / n
