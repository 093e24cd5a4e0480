"""Keep gloo, compress the gradients: one line added to a gloo DDP training script.

    torchrun --nproc-per-node 4 examples/ddp_hook_gloo.py [--steps 30] [--codec q4]

The default group is gloo and stays gloo: every collective of the script (the loss average, the
final check) runs there, exact. ``ringzip.hooks.compress`` sends DDP's gradient buckets through a
ringzip group over the same ranks, which it creates at its first bucket, with the codec of its
state. Rank 0 prints the loss, the codec's counters and ``OK``; every rank holds the same
parameters, which the script checks.
"""
from __future__ import annotations

import argparse

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

import ringzip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--codec", default="q4", help="gradient codec, e.g. q8, q4, topk:0.01")
    args = parser.parse_args()

    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()

    torch.manual_seed(0)
    # 69,633 gradients in one bucket: above ringzip's min_numel, so the codec applies
    model = torch.nn.Sequential(torch.nn.Linear(32, 2048), torch.nn.ReLU(), torch.nn.Linear(2048, 1))
    ddp = DDP(model)
    state = ringzip.hooks.State(codec=args.codec)
    ddp.register_comm_hook(state, ringzip.hooks.compress)  # the one line
    opt = torch.optim.Adam(ddp.parameters(), lr=1e-2)
    w_true = torch.randn(32, 1, generator=torch.Generator().manual_seed(123))

    gen = torch.Generator().manual_seed(1 + rank)
    first = last = None
    for step in range(args.steps):
        x = torch.randn(64, 32, generator=gen)
        y = x @ w_true + 0.01 * torch.randn(64, 1, generator=gen)
        loss = torch.nn.functional.mse_loss(ddp(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        avg = loss.detach().clone()
        dist.all_reduce(avg)  # on gloo, exact
        avg /= world
        first = avg.item() if first is None else first
        last = avg.item()
        if rank == 0 and (step % 5 == 0 or step == args.steps - 1):
            print(f"step {step:3d}  loss {last:.5f}", flush=True)

    flat = torch.cat([p.detach().reshape(-1) for p in model.parameters()])
    copies = [torch.empty_like(flat) for _ in range(world)]
    dist.all_gather(copies, flat)
    assert all(torch.equal(c, copies[0]) for c in copies), "replicas diverged"
    assert last < first, f"loss did not decrease ({first:.4f} -> {last:.4f})"
    if rank == 0:
        st = ringzip.stats(state.group)[args.codec]
        print(f"OK: {world} ranks over gloo, loss {first:.4f} -> {last:.4f}; {st['calls']} buckets sent with "
              f"{args.codec}, {st['ratio']:.1f}x fewer bytes", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
