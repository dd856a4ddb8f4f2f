"""Modules of the bwplan reference trainer (apps/train/train.py).

``runtime`` and ``calls`` import no torch; ``engine`` and the modules it uses (model, precision,
parallel, loss, data, checkpoint, measure) need PyTorch and are imported only when training runs.
"""
