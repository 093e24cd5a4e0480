"""Character-level transformer language model on the Python standard library's own source.

Data: the top-level `*.py` modules of the running interpreter's standard library
(sysconfig's 'stdlib' path), sorted by name; every tenth file (index % 10 == 5) is validation,
the rest training, so no file is in both. Characters outside ASCII become '?', so the
vocabulary is the 128 ASCII codes. Metric: validation bits per character over a fixed set of
windows spread evenly through the validation text.
"""
from __future__ import annotations

import math
import sysconfig
from pathlib import Path

import torch
import torch.nn as nn
import torch.nn.functional as F

from . import cosine_schedule, step_generator

VOCAB = 128
METRIC, HIGHER_IS_BETTER = "val_bpc", False
# Rows run with every seed by default: the exact run, the hooks and codecs that track it. A seed
# of this task costs minutes per row on 2 cores; the others run once (--seeds-for all: every row).
SEEDS_FOR = "gloo,gloo+bf16,gloo+powersgd4,ringzip:q8,ringzip:q4"
DEFAULTS = {"d_model": 384, "layers": 2, "heads": 6, "ctx": 64, "batch": 1, "steps": 200, "lr": 1e-3,
            "warmup": 10, "clip": 1.0, "eval_every": 10, "val_windows": 32}


def source_files() -> list[Path]:
    root = Path(sysconfig.get_paths()["stdlib"])
    return sorted(root.glob("*.py"))


def load(cfg) -> dict:
    parts = {"train": [], "val": []}
    for i, path in enumerate(source_files()):
        text = path.read_text(encoding="utf-8", errors="replace")
        parts["val" if i % 10 == 5 else "train"].append(text.encode("ascii", errors="replace"))
    if not parts["train"] or not parts["val"]:
        raise RuntimeError(f"no standard-library sources under {sysconfig.get_paths()['stdlib']}")
    data = {k: torch.frombuffer(bytearray(b"".join(v)), dtype=torch.uint8).long() for k, v in parts.items()}
    data["files"] = len(parts["train"]) + len(parts["val"])
    return data


class Block(nn.Module):
    def __init__(self, d: int, heads: int):
        super().__init__()
        self.heads = heads
        self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.qkv, self.proj = nn.Linear(d, 3 * d), nn.Linear(d, d)
        self.fc, self.out = nn.Linear(d, 4 * d), nn.Linear(4 * d, d)

    def forward(self, x):
        b, t, d = x.shape
        q, k, v = self.qkv(self.ln1(x)).view(b, t, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(a.transpose(1, 2).reshape(b, t, d))
        return x + self.out(F.gelu(self.fc(self.ln2(x))))


class CharLM(nn.Module):
    def __init__(self, d: int, layers: int, heads: int, ctx: int):
        super().__init__()
        self.tok = nn.Embedding(VOCAB, d)
        self.pos = nn.Parameter(0.02 * torch.randn(ctx, d))
        self.blocks = nn.Sequential(*(Block(d, heads) for _ in range(layers)))
        self.ln, self.head = nn.LayerNorm(d), nn.Linear(d, VOCAB)

    def forward(self, x):
        return self.head(self.ln(self.blocks(self.tok(x) + self.pos[: x.shape[1]])))


def model(cfg):
    return CharLM(cfg["d_model"], cfg["layers"], cfg["heads"], cfg["ctx"])


def optimizer(model, cfg, steps):
    opt = torch.optim.AdamW(model.parameters(), lr=cfg["lr"], betas=(0.9, 0.95), weight_decay=0.01, fused=True)
    return opt, cosine_schedule(opt, steps, cfg["warmup"])


def _windows(stream, starts, ctx):
    idx = starts[:, None] + torch.arange(ctx + 1)
    w = stream[idx]
    return w[:, :-1], w[:, 1:]


def batch(data, cfg, seed, step, rank, n):
    train, ctx = data["train"], cfg["ctx"]
    starts = torch.randint(0, len(train) - ctx - 1, (cfg["batch"],), generator=step_generator(seed, step, rank))
    return _windows(train, starts, ctx)


def loss(model, x, y):
    return F.cross_entropy(model(x).reshape(-1, VOCAB), y.reshape(-1))


def evaluate(model, data, cfg, rank, n):
    """Summed cross-entropy (nats) and token count over this rank's share of the fixed windows."""
    val, ctx = data["val"], cfg["ctx"]
    starts = torch.linspace(0, len(val) - ctx - 1, cfg["val_windows"]).long()[rank::n]
    if len(starts) == 0:
        return torch.zeros(2, dtype=torch.float64)
    x, y = _windows(val, starts, ctx)
    nats = F.cross_entropy(model(x).reshape(-1, VOCAB), y.reshape(-1), reduction="sum")
    return torch.tensor([float(nats), float(y.numel())], dtype=torch.float64)


def metric(num, den):
    return num / den / math.log(2)


def describe(cfg, data, model):
    p = sum(t.numel() for t in model.parameters())
    return (f"char transformer d{cfg['d_model']} x {cfg['layers']} layers, {cfg['heads']} heads, context {cfg['ctx']}, "
            f"{p / 1e6:.2f} M params ({p * 4 / 2**20:.1f} MiB fp32 gradients); data: {data['files']} top-level "
            f"stdlib modules of Python {sysconfig.get_python_version()} ({len(data['train']) / 1e6:.2f} M train / "
            f"{len(data['val']) / 1e3:.0f} K validation chars, split by file); {cfg['batch']} x {cfg['ctx']} chars "
            f"per rank per step; AdamW lr {cfg['lr']:g}, warm-up {cfg['warmup']}, cosine to 10 %, clip {cfg['clip']}; "
            f"validation: {cfg['val_windows']} fixed windows every {cfg['eval_every']} steps")
