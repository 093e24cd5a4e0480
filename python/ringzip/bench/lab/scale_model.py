"""Flat vs node-aware all-reduce at scale, on paper: an alpha-beta model of the node's NIC (the
shared slow link), the links inside a node and the codec (docs/algorithms.md, "Node-aware
collectives", where its table and assumptions are).

    python -m ringzip.bench.lab.scale_model            the docs table
    python -m ringzip.bench.lab.scale_model --json

Per call of S bytes (float32) over N nodes of P ranks (n = N*P), wire ratio rho (bytes on the
wire per input byte: q4 about 1/8 + scales), NIC rate B_net shared by the node's P ranks, intra-
node rate B_in per rank, message latency a_net / a_in, codec throughput C (input bytes per
second per rank, one encode and one decode pass each counted):

  flat ring, exact      2(n-1) steps of S/n; ranks in node-major order, so one flow per step
                        crosses each NIC:       2(n-1)*a_net + 2(n-1)/n*S/B_net
  flat sra, compressed  every rank sends (n-1)/n*S*rho twice (reduce-scatter + all-gather) to
                        peers that are mostly off-node; the node's P ranks share its NIC:
                        2(n-1)*a_net + 2*P*(n-P)/n*S*rho/B_net + codec
  node-aware            intra reduce-scatter + all-gather: 2(P-1)*a_in + 2(P-1)/P*S/B_in, and
                        among N nodes on the shard S/P, P shards side by side through one NIC:
                        exact  2(N-1)*a_net + 2(N-1)/N*S/B_net
                        sra    2(N-1)*a_net + 2(N-1)/N*S*rho/B_net + codec on S/P
  codec                 4 passes (encode, decode-accumulate, encode, decode) over the rank's
                        part of the data: 4*S_rank/C, overlapping nothing (pessimistic)
"""
from __future__ import annotations

import argparse
import json
from dataclasses import asdict, dataclass


@dataclass
class Cluster:
    name: str
    nodes: int
    per_node: int
    net_gbit: float       # NIC rate per node, Gbit/s
    intra_gbyte: float    # per-rank bandwidth inside a node, GB/s (NVLink, PCIe or memory)
    a_net_us: float = 10.0
    a_in_us: float = 3.0
    codec_gbyte: float = 200.0  # per-rank codec throughput, GB/s


def _time(c: Cluster, size: float, rho: float, node_aware: bool) -> float:
    n, big_n, p = c.nodes * c.per_node, c.nodes, c.per_node
    b_net, b_in = c.net_gbit * 1e9 / 8, c.intra_gbyte * 1e9
    a_net, a_in = c.a_net_us * 1e-6, c.a_in_us * 1e-6
    exact = rho >= 1.0
    codec = 0.0 if exact else 4 * size / c.codec_gbyte / 1e9
    if not node_aware:
        if exact:
            return 2 * (n - 1) * a_net + 2 * (n - 1) / n * size / b_net
        return 2 * (n - 1) * a_net + 2 * p * (n - p) / n * size * rho / b_net + codec
    intra = 2 * (p - 1) * a_in + 2 * (p - 1) / p * size / b_in
    inter = 2 * (big_n - 1) * a_net + 2 * (big_n - 1) / big_n * size * rho / b_net
    return intra + inter + codec / p


CLUSTERS = (
    Cluster("16 nodes x 8 GPUs, 100 Gbit/s", 16, 8, 100, 150),
    Cluster("4 nodes x 8 GPUs, 25 Gbit/s", 4, 8, 25, 150),
    Cluster("2 nodes x 2 CPU ranks, 1 Gbit/s (the emulated bench)", 2, 2, 1, 3, 50, 20, 5),
)
CODECS = (("exact", 1.0), ("q8", 0.25 + 4 / 512), ("q4", 0.125 + 4 / 512))


def table(size: float = 64 * 2**20) -> list[dict]:
    rows = []
    for c in CLUSTERS:
        for codec, rho in CODECS:
            flat, node = _time(c, size, rho, False), _time(c, size, rho, True)
            rows.append({"cluster": c.name, "codec": codec, "flat_ms": flat * 1e3, "node_ms": node * 1e3,
                         "speedup": flat / node, **{k: v for k, v in asdict(c).items() if k != "name"}})
    return rows


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--mib", type=float, default=64.0, help="all-reduce size in MiB (float32)")
    p.add_argument("--json", action="store_true")
    a = p.parse_args(argv)
    rows = table(a.mib * 2**20)
    if a.json:
        print(json.dumps(rows, indent=1))
        return
    print(f"| cluster | codec | flat ms | node-aware ms | node-aware speedup |   ({a.mib:g} MiB float32)")
    print("|---|---|---:|---:|---:|")
    for r in rows:
        print(f"| {r['cluster']} | {r['codec']} | {r['flat_ms']:.2f} | {r['node_ms']:.2f} | {r['speedup']:.2f}x |")


if __name__ == "__main__":
    main()
