"""The pool chosen per pair (Options.connections=0): each pair of ranks opens as many TCP connections as
its round trip asks for -- 2 across the user-space wide-area link with a 10 ms round trip, 1
where there is no delay -- both ends agree, and a collective striped over the pool is right.
Two emulated machines with 2 ranks each (ringzip.bench.netem), the ranks of a machine on shared
memory. And the cost model's probe over such a link (one rank a machine): it takes no host
figure from rounds that time the connections' windows opening, only where the round trip is long. Needs root, iproute2 and /dev/net/tun (skipped otherwise); hard timeout; the namespaces
go away whatever happens."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import pytest

import ringzip
from ringzip.bench import netem

PYDIR = os.path.dirname(os.path.dirname(os.path.abspath(ringzip.__file__)))  # the ringzip under test
TIMEOUT = 120
NODES, PER_NODE = 2, 2

_RANK = """
import datetime, json, sys
import torch, torch.distributed as dist
import ringzip
addr, rank, n = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
dist.init_process_group("ringzip", init_method=f"tcp://{addr}:29561", rank=rank, world_size=n,
                        timeout=datetime.timedelta(seconds=60))
backend = dist.group.WORLD._get_backend(torch.device("cpu"))
base = torch.arange(1 << 20, dtype=torch.float32)  # 4 MiB: striped over a pool of 2
x = base + rank
dist.all_reduce(x)
ok = torch.equal(x, base * n + n * (n - 1) // 2)
params = (ringzip.stats(dist.group.WORLD).get("auto") or {}).get("params")
print(json.dumps({"rank": rank, "connections": backend.connections, "transport": backend.transport, "ok": ok,
                  "params": params}))
dist.destroy_process_group()
"""


def _need_tun():
    if not sys.platform.startswith("linux") or os.geteuid() != 0 or shutil.which("ip") is None:
        pytest.skip("emulated machines need Linux network namespaces, root and iproute2")
    if not os.path.exists("/dev/net/tun"):
        pytest.skip("the wide-area link needs /dev/net/tun")
    try:
        netem.wanlink_path()
    except netem.NetSetupError as e:
        pytest.skip(str(e))


def _run(delay_s: float, tag: str, per_node: int = PER_NODE) -> list[dict]:
    prefix = f"rzp{os.getpid() % 10000}{tag}-"
    n = NODES * per_node
    net = netem.NetEnv(n, None, delay_s, prefix=prefix, ranks_per_node=per_node, link="tun")
    env = dict(os.environ, OMP_NUM_THREADS="1",
               PYTHONPATH=os.pathsep.join([PYDIR] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]))
    procs = []
    try:
        with net:
            for r in range(n):
                procs.append(subprocess.Popen(net.exec_prefix(r) + [sys.executable, "-c", _RANK, net.addr(0), str(r), str(n)],
                                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                              env=dict(env, GLOO_SOCKET_IFNAME=net.ifname(r), RINGZIP_CONNECTIONS="0")))
            outs = []
            for p in procs:
                try:
                    outs.append(p.communicate(timeout=TIMEOUT)[0])
                except subprocess.TimeoutExpired:
                    outs.append("(timed out)")
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
        assert netem.leftovers(prefix) == [], netem.cleanup_prefix(prefix)
    assert all(p.returncode == 0 for p in procs), "\n".join(outs)[-4000:]
    rows = [json.loads(line) for o in outs for line in o.splitlines() if line.startswith('{"rank"')]
    assert len(rows) == n, "\n".join(outs)[-6000:]
    return rows


@pytest.mark.parametrize("delay_s,across", [(0.0, 1), (0.005, 2)], ids=["no-delay", "rtt-10ms"])
def test_each_pair_opens_the_pool_its_round_trip_asks_for(delay_s, across):
    _need_tun()
    rows = _run(delay_s, "a" if across == 2 else "b")
    for row in rows:
        r = row["rank"]
        node = r // PER_NODE
        want = [0 if p == r else 1 if p // PER_NODE == node else across for p in range(NODES * PER_NODE)]
        assert row["connections"] == want, rows
        assert row["ok"] and row["transport"] == "shm+tcp", rows


@pytest.mark.parametrize("delay_s", [0.0, 0.005], ids=["no-delay", "rtt-10ms"])
def test_the_probe_over_a_long_link_takes_no_host_figure(delay_s):
    _need_tun()
    rows = _run(delay_s, "c" if delay_s else "d", per_node=1)
    assert all(row["ok"] and row["transport"] == "tcp" for row in rows), rows
    params = [row["params"] for row in rows]
    assert params[0] and params[0] == params[1], params  # agreed
    assert params[0]["link_gbit"] > 0, params
    long_link = params[0]["alpha_s"] >= 0.004  # half the round trip the kernel measured
    assert long_link == (delay_s > 0), params
    assert (params[0]["host_gbit"] == 0) == long_link, params
