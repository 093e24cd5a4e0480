"""Train a small model with DistributedDataParallel over the ringzip backend.

Run (CPU, 4 processes on one machine):

    torchrun --nproc-per-node 4 examples/ddp_train.py [--steps 30] [--algorithm auto|ring|rd] [--codec q4]

or on several machines (README, "Several machines"), the same on each of them:

    torchrun --nnodes 2 --nproc-per-node 2 --rdzv-backend c10d --rdzv-endpoint HOST:PORT examples/ddp_train.py

torchrun sets RANK, WORLD_SIZE, MASTER_ADDR and MASTER_PORT; ``import ringzip`` registers the
backend, and ``init_process_group("ringzip")`` is the only change from a gloo training script.
Each rank trains on its own shard of a synthetic regression task; DDP averages gradients through
ringzip's all-reduce, so every rank holds identical parameters, which the script checks at the end.
Rank 0 prints the loss every few steps and ``OK`` at the end; every rank prints a hash of its
parameters (equal on all ranks), so runs across machines can be compared by eye or by a script.
"""
from __future__ import annotations

import argparse
import datetime
import hashlib
import socket

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

import ringzip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--algorithm", default="auto", choices=["auto", "ring", "rd"])
    parser.add_argument("--codec", default="none", help="gradient codec, e.g. q8, q4, topk:0.01")
    parser.add_argument("--link-gbit", type=float, default=0.0,
                        help="each machine's link to the others, Gbit/s, where you know it (ringzip.Options(link_gbit=...))")
    args = parser.parse_args()

    torch.set_num_threads(1)
    dist.init_process_group(
        "ringzip",
        pg_options=ringzip.Options(algorithm=args.algorithm, codec=args.codec, link_gbit=args.link_gbit,
                                   timeout=datetime.timedelta(seconds=120)),
    )
    rank, world = dist.get_rank(), dist.get_world_size()
    assert dist.get_backend() == "ringzip"

    torch.manual_seed(0)  # same initial model on every rank (DDP would broadcast rank 0's anyway)
    # 2048 wide: the 69,633 gradients (one DDP bucket) exceed ringzip's min_numel, so --codec applies
    model = torch.nn.Sequential(torch.nn.Linear(32, 2048), torch.nn.ReLU(), torch.nn.Linear(2048, 1))
    ddp = DDP(model)
    opt = torch.optim.Adam(ddp.parameters(), lr=1e-2)
    w_true = torch.randn(32, 1, generator=torch.Generator().manual_seed(123))

    gen = torch.Generator().manual_seed(1 + rank)  # each rank: its own data shard
    first = last = None
    for step in range(args.steps):
        x = torch.randn(64, 32, generator=gen)
        y = x @ w_true + 0.01 * torch.randn(64, 1, generator=gen)
        loss = torch.nn.functional.mse_loss(ddp(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        avg = loss.detach().clone()
        dist.all_reduce(avg, op=dist.ReduceOp.AVG)
        first = avg.item() if first is None else first
        last = avg.item()
        if rank == 0 and (step % 5 == 0 or step == args.steps - 1):
            print(f"step {step:3d}  loss {last:.5f}", flush=True)

    # every replica must hold the same parameters
    flat = torch.cat([p.detach().reshape(-1) for p in model.parameters()])
    digest = hashlib.sha256(flat.numpy().tobytes()).hexdigest()[:16]
    print(f"rank {rank} of {world} on {socket.gethostname()}: parameters sha256 {digest}", flush=True)
    copies = [torch.empty_like(flat) for _ in range(world)]
    dist.all_gather(copies, flat)
    assert all(torch.equal(c, copies[0]) for c in copies), "replicas diverged"
    assert last < first, f"loss did not decrease ({first:.4f} -> {last:.4f})"
    if rank == 0:
        topo = ringzip.stats()["topology"]
        how = "node-aware" if topo["node_aware"] else f"flat ({topo['flat_reason']})"
        print(f"OK: {world} ranks, loss {first:.4f} -> {last:.4f}; {topo['layout']}, {how}, "
              f"transport {topo['transport']}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
