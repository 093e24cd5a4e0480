"""DDP training over ringzip with compressed gradients reaches the accuracy of exact training.

Setup (one launch of WORLD = 4 ranks, all configurations inside it): Gaussian blobs (10 classes,
means ~ N(0, 0.7^2 I) in 20 dimensions, unit noise; 65536 train, 16384 test; Bayes accuracy
~88%, so a good model sits on a plateau and the comparison is about final quality, not speed); a student MLP 20-128-128-10 (ReLU,
~20k parameters, one DDP bucket) is trained with SGD + momentum (lr decayed to 0 for a stable
final accuracy) on batches drawn from a fixed training set, each rank taking its slice of the
global batch. Every configuration starts from the same initial weights and sees the same
batches; each runs on a fresh ringzip group (clean error-feedback and stats state) with
``min_numel=1024`` so the bucket is compressed. Checked:

* the model learned (exact run well above chance);
* each compressed run's test accuracy is within 1 percentage point of the exact run;
* compression happened (``ringzip.stats``: one call per step, ratio > 1; topk: residuals);
* parameters are bitwise identical on all ranks after training (DESIGN §3.2 at the model level);
* the same training through ``ringzip.hooks.compress`` on the gloo default group (HOOKED codecs)
  ends with the parameters of that codec's group run, bit for bit, so with its accuracy.

The measured numbers are printed (``-s``) and recorded by hand in bench/results/accuracy.md.
"""
from __future__ import annotations

import time

import torch
import torch.distributed as dist

from tests import mp

WORLD = 4
CODECS = ["none", "q8", "q4", "topk:0.01"]
HOOKED = ["q4"]
D_IN, N_CLASSES = 20, 10
N_TRAIN, N_TEST = 65536, 16384
STEPS, GLOBAL_BATCH, LR = 600, 128, 0.1


def make_data():
    """Gaussian blobs: 10 class means ~ N(0, 0.7^2 I) in 20 dimensions, unit-variance noise."""
    g = torch.Generator().manual_seed(1234)
    mu = torch.randn(N_CLASSES, D_IN, generator=g) * 0.7
    y = torch.randint(0, N_CLASSES, (N_TRAIN + N_TEST,), generator=g)
    x = mu[y] + torch.randn(N_TRAIN + N_TEST, D_IN, generator=g)
    return x[:N_TRAIN], y[:N_TRAIN], x[N_TRAIN:], y[N_TRAIN:], mu


def bayes_accuracy(data):
    """Equal priors, equal isotropic covariances: the nearest class mean is the Bayes classifier."""
    _, _, xte, yte, mu = data
    return (torch.cdist(xte, mu).argmin(1) == yte).float().mean().item()


def make_model():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(D_IN, 128), torch.nn.ReLU(), torch.nn.Linear(128, 128), torch.nn.ReLU(),
                               torch.nn.Linear(128, N_CLASSES))


def train_one(codec, rank, ws, data, ref, hook=False):
    import ringzip
    from torch.nn.parallel import DistributedDataParallel as DDP

    xtr, ytr, xte, yte, _ = data
    if hook:  # DDP stays on the gloo default group; the hook's own ringzip group compresses
        state = ringzip.hooks.State(codec=codec, options=ringzip.Options(min_numel=1024))
        model = DDP(make_model())
        model.register_comm_hook(state, ringzip.hooks.compress)
    else:
        pg = dist.new_group(backend="ringzip", pg_options=ringzip.Options(codec=codec, min_numel=1024))
        model = DDP(make_model(), process_group=pg)
    opt = torch.optim.SGD(model.parameters(), lr=LR, momentum=0.9)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: 1.0 - s / STEPS)
    g = torch.Generator().manual_seed(99)
    per = GLOBAL_BATCH // ws
    t0 = time.monotonic()
    for _ in range(STEPS):
        idx = torch.randint(0, N_TRAIN, (GLOBAL_BATCH,), generator=g)[rank * per:(rank + 1) * per]
        loss = torch.nn.functional.cross_entropy(model(xtr[idx]), ytr[idx])
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        sched.step()
    seconds = time.monotonic() - t0
    with torch.no_grad():
        acc = (model.module(xte).argmax(1) == yte).float().mean().item()
    st = ringzip.stats(state.group if hook else pg)
    flat = torch.cat([p.detach().reshape(-1) for p in model.parameters()])
    outs = [torch.empty_like(flat) for _ in range(ws)]
    dist.all_gather(outs, flat, group=ref)
    identical = all(torch.equal(o.view(torch.int32), outs[0].view(torch.int32)) for o in outs)
    return {"acc": acc, "seconds": seconds, "stats": {k: (dict(v) if isinstance(v, dict) else v) for k, v in st.items()},
            "identical": identical, "numel": flat.numel(), "flat": flat}


def train_all(ctx):
    torch.set_num_threads(1)
    import ringzip  # noqa: F401

    dist.init_process_group("gloo", rank=ctx.rank, world_size=ctx.world_size, init_method=ctx.init_method)
    ref = dist.group.WORLD
    data = make_data()
    out = {"bayes": bayes_accuracy(data)}
    for codec in CODECS:
        mp.progress(f"training {codec}")
        out[codec] = train_one(codec, ctx.rank, ctx.world_size, data, ref)
    for codec in HOOKED:
        mp.progress(f"training {codec} through the hook")
        out[f"{codec}/hook"] = train_one(codec, ctx.rank, ctx.world_size, data, ref, hook=True)
    dist.destroy_process_group()
    return out


def test_compressed_training_matches_exact():
    t0 = time.monotonic()
    res = mp.run(train_all, WORLD, timeout=150)
    wall = time.monotonic() - t0
    r0 = res[0]
    lines = [f"{WORLD} ranks, {STEPS} steps, global batch {GLOBAL_BATCH}, wall {wall:.1f} s (launch included); "
             f"Bayes accuracy {100 * r0['bayes']:.2f}%"]
    for name in CODECS + [f"{c}/hook" for c in HOOKED]:
        codec = name.split("/")[0]
        s = r0[name]["stats"]
        c = s.get(codec, {})
        lines.append(f"  {name:10s} acc {100 * r0[name]['acc']:.2f}%  train {r0[name]['seconds']:.1f} s  "
                     f"calls {c.get('calls', 0)}  ratio {c.get('ratio', float('nan')):.2f}  residual_bytes {s['residual_bytes']}")
    report = "\n".join(lines)
    print(report)
    exact = r0["none"]["acc"]
    assert exact > r0["bayes"] - 0.02, f"the exact run did not learn the task:\n{report}"
    problems = []
    for name in CODECS + [f"{c}/hook" for c in HOOKED]:
        codec = name.split("/")[0]
        for rank, r in enumerate(res):
            if not r[name]["identical"]:
                problems.append(f"{name}: parameters differ across ranks (seen on rank {rank})")
                break
            if name != codec and not torch.equal(r[name]["flat"], r[codec]["flat"]):
                problems.append(f"{name}: parameters differ from the {codec} group's run (seen on rank {rank})")
                break
        if codec == "none":
            assert "none" not in r0[codec]["stats"], "codec none counted as compressed"
            continue
        c = r0[name]["stats"].get(codec, {})
        if c.get("calls", 0) < STEPS or not c.get("ratio", 0) > 1:
            problems.append(f"{name}: gradients were not compressed (stats {c})")
        if codec.startswith("topk") and r0[name]["stats"]["residual_bytes"] < 4 * r0[name]["numel"]:
            problems.append(f"{name}: no error-feedback residual for the gradient bucket")
        if abs(r0[name]["acc"] - exact) > 0.01:
            problems.append(f"{name}: test accuracy {100 * r0[name]['acc']:.2f}% vs exact {100 * exact:.2f}% (> 1 pp)")
    assert not problems, "\n".join(problems) + "\n" + report
