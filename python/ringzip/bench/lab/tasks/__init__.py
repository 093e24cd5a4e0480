"""Training tasks on real data for `ringzip-bench train --task NAME` (time to accuracy, tta.py).

A task is a module with:
  DEFAULTS                    its configuration (every key can be overridden with --task-opt)
  METRIC, HIGHER_IS_BETTER    what the validation number means
  SEEDS_FOR                   rows that run with every seed by default ("all" or a list)
  load(cfg) -> data           the data set, read once per process (nothing is downloaded)
  model(cfg) -> nn.Module     built under torch.manual_seed(seed) by the caller
  optimizer(model, cfg, steps) -> (optimizer, lr scheduler)
  batch(data, cfg, seed, step, rank, n) -> (x, y)   this rank's share of the global batch of `step`
  loss(model, x, y) -> scalar tensor
  evaluate(model, data, cfg, rank, n) -> tensor([numerator, denominator])  this rank's share
  metric(numerator, denominator) -> float           of the sums over all ranks
  describe(cfg, data, model) -> str                 one line for the result header
Batches depend only on (seed, step, rank, n), so every row of a run sees the same data in the
same order, whatever it does to the gradients.
"""
from __future__ import annotations

import importlib
import math

import torch

NAMES = ("charlm", "digits")


def get(name: str):
    if name not in NAMES:
        raise ValueError(f"unknown task {name!r}; expected one of {', '.join(NAMES)}")
    return importlib.import_module(f"{__name__}.{name}")


def step_generator(seed: int, step: int, rank: int) -> torch.Generator:
    """A torch.Generator for one rank's batch of one step, independent of every other draw."""
    return torch.Generator().manual_seed(((seed * 1_000_003 + step) * 1009 + rank) & 0x7FFF_FFFF_FFFF)


def cosine_schedule(opt, steps: int, warmup: int, floor: float = 0.1):
    """Linear warm-up over `warmup` steps, then cosine decay to `floor` x the peak rate."""
    def factor(s):
        if s < warmup:
            return (s + 1) / warmup
        t = min(1.0, (s - warmup) / max(1, steps - warmup))
        return floor + (1 - floor) * 0.5 * (1 + math.cos(math.pi * t))

    return torch.optim.lr_scheduler.LambdaLR(opt, factor)
