"""Same bits every run? Runs one script several times and compares the hashes of its results.

Each run starts N local ranks (default options unless --codec / --algorithm are given), which
all-reduce (SUM) float32 tensors of 1 K to 4 M elements from fixed seeds, several calls per
size so that ringzip's tuner measures and chooses, and hash every result. A run prints one hash
per rank (equal on all ranks) and the dense algorithms the tuner chose; the runs' hashes must be
equal. --nodes 2 emulates two machines (RINGZIP_NODE_ID), so calls from 1 MiB run node-aware.

    python -m ringzip.bench.lab.repro_check --runs 3 --nproc 3
    python -m ringzip.bench.lab.repro_check --runs 3 --nproc 4 --nodes 2
"""
from __future__ import annotations

import argparse
import hashlib
import json
import sys
import tempfile
import time
from pathlib import Path

from ..common import cpu_model
from ..launch import run_once

SIZES = [1 << k for k in range(10, 23, 2)]  # 1 K .. 4 M elements


def rank_main(calls: int, codec: str | None, algorithm: str | None, deterministic: bool, out_dir: Path) -> None:
    import torch
    import torch.distributed as dist

    import ringzip

    if deterministic:
        torch.use_deterministic_algorithms(True)
    opts = {k: v for k, v in (("codec", codec), ("algorithm", algorithm)) if v is not None}
    dist.init_process_group("ringzip", pg_options=ringzip.Options(**opts) if opts else None)
    rank = dist.get_rank()
    h = hashlib.sha256()
    for size in SIZES:
        for i in range(calls):
            g = torch.Generator().manual_seed(1000 * size + 10 * i + rank)
            t = torch.randn(size, generator=g) * (1 + rank)
            dist.all_reduce(t)
            h.update(t.numpy().tobytes())
    st = ringzip.stats().get("auto", {})
    (out_dir / f"rank{rank}.json").write_text(json.dumps({
        "rank": rank, "hash": h.hexdigest()[:16], "algorithms": st.get("algorithm_choices", {}),
        "codecs": st.get("codec_choices", {})}))
    dist.destroy_process_group()


def one_run(args) -> list[dict]:
    per_node = args.nproc // args.nodes

    def node_env(r: int) -> dict:  # --nodes: ranks numbered node by node, as torchrun does
        env = {"LOCAL_RANK": str(r % per_node), "LOCAL_WORLD_SIZE": str(per_node)}
        return env | ({"RINGZIP_NODE_ID": f"node{r // per_node}"} if args.nodes > 1 else {})

    cmd = ["--as-rank", "--calls", str(args.calls)]
    for flag in ("codec", "algorithm"):
        if getattr(args, flag):
            cmd += [f"--{flag}", getattr(args, flag)]
    if args.deterministic:
        cmd.append("--deterministic")
    with tempfile.TemporaryDirectory() as tmp:
        run_once(args.nproc, Path(tmp), "ringzip.bench.lab.repro_check", cmd + ["--out", tmp], args.timeout, node_env)
        return [json.loads((Path(tmp) / f"rank{r}.json").read_text()) for r in range(args.nproc)]


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--nproc", type=int, default=3)
    p.add_argument("--nodes", type=int, default=1, help="emulated machines (RINGZIP_NODE_ID), ranks split evenly")
    p.add_argument("--calls", type=int, default=8, help="calls per size")
    p.add_argument("--codec")
    p.add_argument("--algorithm")
    p.add_argument("--deterministic", action="store_true", help="torch.use_deterministic_algorithms(True)")
    p.add_argument("--timeout", type=float, default=600)
    p.add_argument("--as-rank", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--out", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.as_rank:
        rank_main(args.calls, args.codec, args.algorithm, args.deterministic, Path(args.out))
        return 0
    if args.nproc % args.nodes:
        p.error("--nproc must be a multiple of --nodes")
    import torch

    print(f"# {time.strftime('%Y-%m-%d %H:%M')}, {cpu_model()}, torch {torch.__version__}, "
          f"{args.nproc} ranks on {args.nodes} emulated node(s), {args.calls} calls x {len(SIZES)} sizes, "
          f"codec={args.codec or 'default'} algorithm={args.algorithm or 'default'}"
          f"{', deterministic' if args.deterministic else ''}")
    hashes = []
    for i in range(args.runs):
        ranks = one_run(args)
        rank_hashes = {d["hash"] for d in ranks}
        hashes.append(ranks[0]["hash"])
        print(f"run {i + 1}: hash {ranks[0]['hash']} (ranks agree: {len(rank_hashes) == 1}), "
              f"dense choices {ranks[0]['algorithms']}, codec choices {ranks[0]['codecs']}")
    same = len(set(hashes)) == 1
    print(f"same bits in every run: {same}")
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
