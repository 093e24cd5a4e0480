"""Handwritten digits: scikit-learn's bundled `load_digits` (1 797 real 8x8 scans, 16 grey
levels) with a small CNN. A fixed permutation (its own seed, not the run's) puts a third of the
images in validation (599) and the rest in training (1 198). Metric: validation accuracy in %.
scikit-learn is an optional dependency of the benchmarks (`pip install ringzip[bench]`).
"""
from __future__ import annotations

import torch
import torch.nn as nn
import torch.nn.functional as F

from . import cosine_schedule

METRIC, HIGHER_IS_BETTER = "val_acc", True
SEEDS_FOR = "all"  # seconds per row: every row gets every seed
DEFAULTS = {"channels": 32, "hidden": 128, "batch": 16, "steps": 200, "lr": 0.05, "warmup": 10,
            "clip": 0.0, "eval_every": 10}
SPLIT_SEED = 20_240_601


def load(cfg) -> dict:
    try:
        from sklearn.datasets import load_digits
    except ImportError:
        raise RuntimeError("task 'digits' needs scikit-learn (bundled digits data): "
                           "pip install scikit-learn, or install ringzip[bench]") from None
    d = load_digits()
    x = torch.tensor(d.images, dtype=torch.float32).unsqueeze(1) / 8.0 - 1.0  # 0..16 -> -1..1
    y = torch.tensor(d.target, dtype=torch.long)
    perm = torch.randperm(len(y), generator=torch.Generator().manual_seed(SPLIT_SEED))
    n_val = len(y) // 3
    val, train = perm[:n_val], perm[n_val:]
    return {"x": x[train], "y": y[train], "val_x": x[val], "val_y": y[val]}


def model(cfg):
    c, h = cfg["channels"], cfg["hidden"]
    return nn.Sequential(nn.Conv2d(1, c, 3, padding=1), nn.ReLU(), nn.Conv2d(c, 2 * c, 3, padding=1), nn.ReLU(),
                         nn.MaxPool2d(2), nn.Flatten(), nn.Linear(2 * c * 16, h), nn.ReLU(), nn.Linear(h, 10))


def optimizer(model, cfg, steps):
    opt = torch.optim.SGD(model.parameters(), lr=cfg["lr"], momentum=0.9, nesterov=True, weight_decay=5e-4)
    return opt, cosine_schedule(opt, steps, cfg["warmup"], floor=0.0)


def batch(data, cfg, seed, step, rank, n):
    """Epochs of the training set in an order drawn from (seed, epoch); the global batch of a
    step is the next batch*n images of that stream, rank r takes the r-th slice."""
    size, b = len(data["y"]), cfg["batch"]
    first = (step * n + rank) * b
    idx = []
    for pos in range(first, first + b):
        epoch, i = divmod(pos, size)
        if data.get("_epoch") != (seed, epoch):  # one permutation per epoch, drawn once
            g = torch.Generator().manual_seed(seed * 1_000_003 + epoch)
            data["_epoch"], data["_order"] = (seed, epoch), torch.randperm(size, generator=g)
        idx.append(int(data["_order"][i]))
    return data["x"][idx], data["y"][idx]


def loss(model, x, y):
    return F.cross_entropy(model(x), y)


def evaluate(model, data, cfg, rank, n):
    """Correct predictions and image count over this rank's share of the validation set."""
    x, y = data["val_x"][rank::n], data["val_y"][rank::n]
    correct = (model(x).argmax(1) == y).sum() if len(y) else 0
    return torch.tensor([float(correct), float(len(y))], dtype=torch.float64)


def metric(num, den):
    return 100.0 * num / den


def describe(cfg, data, model):
    p = sum(t.numel() for t in model.parameters())
    c = cfg["channels"]
    return (f"CNN conv{c}-conv{2 * c}-pool-fc{cfg['hidden']}-10, {p / 1e3:.0f} K params; data: sklearn load_digits, "
            f"{len(data['y'])} train / {len(data['val_y'])} validation images (fixed split); batch {cfg['batch']} "
            f"per rank; SGD nesterov momentum 0.9, lr {cfg['lr']:g}, warm-up {cfg['warmup']}, cosine to 0; "
            f"validation every {cfg['eval_every']} steps")
