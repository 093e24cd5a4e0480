"""The pool chosen per pair (Options.connections=0, the default): each pair of ranks opens as many TCP
connections as its round trip and the link's rate ask for -- across the user-space wide-area link
with a 10 ms round trip, as many send windows as its share of the rate given keeps in flight (4
here), 1 where the rate is not given or there is no delay -- both ends agree, and a collective
striped over the pool is right.
Two emulated machines with 2 ranks each (ringzip.bench.netem), the ranks of a machine on shared
memory. And the cost model's probe over such a link (one rank a machine): it takes no host
figure from rounds that time the connections' windows opening, only where the round trip is long. Needs root, iproute2 and /dev/net/tun (skipped otherwise); hard timeout; the namespaces
go away whatever happens."""
from __future__ import annotations

import json
import math
import os
import shutil
import subprocess
import sys

import pytest

import ringzip
from ringzip.bench import netem

PYDIR = os.path.dirname(os.path.dirname(os.path.abspath(ringzip.__file__)))  # the ringzip under test
TIMEOUT = 120
LONG_ROUND_TRIP = 0.005  # the round trip from which a link counts as long (Transport::kLongRoundTrip)
NODES, PER_NODE = 2, 2

_RANK = """
import datetime, json, os, sys
import torch, torch.distributed as dist
import ringzip
addr, rank, n, windows = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), float(sys.argv[4])

def ceiling(core, tcp):  # what a socket may hold: asked for (doubled by the kernel) or autotuned
    asked = int(open(f"/proc/sys/net/core/{core}").read())
    return max(2 * asked, int(open(f"/proc/sys/net/ipv4/{tcp}").read().split()[2]))

window = 0.7 * min(ceiling("wmem_max", "tcp_wmem"), ceiling("rmem_max", "tcp_rmem"))  # TCP's payload share
if windows:  # the link's rate whose share for one of the n-1 peers keeps `windows` in flight over 10.5 ms
    os.environ["RINGZIP_LINK_GBIT"] = repr(windows * window * 8 * (n - 1) / (0.95 * 0.0105) / 1e9)
dist.init_process_group("ringzip", init_method=f"tcp://{addr}:29561", rank=rank, world_size=n,
                        timeout=datetime.timedelta(seconds=60))
backend = dist.group.WORLD._get_backend(torch.device("cpu"))
dist.barrier()  # queued behind whatever the group started as it was created
early = backend.auto_state("cpu").refreshes  # agreements before any all-reduce
base = torch.arange(1 << 20, dtype=torch.float32)  # 4 MiB: striped over a pool of 2
x = base + rank
dist.all_reduce(x)
ok = torch.equal(x, base * n + n * (n - 1) // 2)
auto = ringzip.stats(dist.group.WORLD).get("auto") or {}
params, probe_s = auto.get("params"), auto.get("probe_s")
print(json.dumps({"rank": rank, "connections": backend.connections, "warmed": ringzip.stats()["topology"]["warmed"], "transport": backend.transport, "ok": ok,
                  "params": params, "probe_s": probe_s, "early": early, "window": window, "link_gbit": float(os.environ.get("RINGZIP_LINK_GBIT", 0))}))
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


def _run(delay_s: float, tag: str, per_node: int = PER_NODE, windows: float = 0, ranks: int = 0) -> list[dict]:
    """`ranks`: launch only the first so many (the last machine holds fewer); 0: all."""
    prefix = f"rzp{os.getpid() % 10000}{tag}-"
    n = ranks or NODES * per_node
    net = netem.NetEnv(NODES * per_node, None, delay_s, prefix=prefix, ranks_per_node=per_node, link="tun")
    env = dict(os.environ, OMP_NUM_THREADS="1",
               PYTHONPATH=os.pathsep.join([PYDIR] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]))
    procs = []
    try:
        with net:
            for r in range(n):
                procs.append(subprocess.Popen(net.exec_prefix(r) + [sys.executable, "-c", _RANK, net.addr(0), str(r), str(n), str(windows)],
                                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                              env=dict(env, GLOO_SOCKET_IFNAME=net.ifname(r))))
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


@pytest.mark.parametrize("delay_s,windows,across", [(0.0, 3.5, 1), (0.005, 0, 1), (0.005, 3.5, 4)],
                         ids=["no-delay", "rtt-10ms-no-rate", "rtt-10ms-rate"])
def test_each_pair_opens_the_pool_its_round_trip_asks_for(delay_s, windows, across):
    _need_tun()
    rows = _run(delay_s, "b" if not delay_s else "a" if windows else "f", windows=windows)
    for row in rows:
        r = row["rank"]
        node = r // PER_NODE
        want = [0 if p == r else 1 if p // PER_NODE == node else across for p in range(NODES * PER_NODE)]
        assert row["connections"] == want, rows
        assert row["ok"] and row["transport"] == "shm+tcp", rows
        # The far peers' connections warmed where the rate is given over a long link, none else.
        assert row["warmed"] == (2 * across if windows and delay_s else 0), rows


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
    assert all(row["probe_s"] > 0 for row in rows), rows  # it ran its rounds: no rate was given
    assert all(row["early"] == 0 for row in rows), rows  # at the first call, which measures


@pytest.mark.parametrize("windows", [0, 3.5], ids=["no-rate", "rate"])
def test_sites_of_unequal_size_probe_alike(windows):
    """Two ranks on one machine, one on the other (RTT 10 ms): the pair on one machine has a
    short round trip between them, the lone rank only long ones. Every rank must see the link
    as long -- the longest round trip to a peer, not the least -- or their probes send different
    messages and wait on each other until the timeout."""
    _need_tun()
    rows = _run(0.005, "u" if windows else "v", windows=windows, ranks=3)
    assert all(row["ok"] for row in rows), rows
    assert [row["transport"] for row in rows] == ["shm+tcp", "shm+tcp", "tcp"], rows
    params = [row["params"] for row in rows]
    assert params[0] and params[0] == params[1] == params[2], params  # agreed
    # half the far round trip (10 ms), as every rank took it (the ranks' mean; a loaded host's
    # kernel has offered 4.7 ms): the long link, not the pair's short one (0.05 ms)
    assert LONG_ROUND_TRIP / 2 < params[0]["alpha_s"] < 0.010, params
    assert all((row["probe_s"] == 0) == bool(windows) for row in rows), rows
    assert all(row["early"] == (1 if windows else 0) for row in rows), [(row["early"], row["probe_s"]) for row in rows]


def test_a_given_rate_sizes_the_pool_and_spares_the_probe():
    """With the link's rate given, a pair opens as many connections as its rate keeps windows in
    flight over its round trip (here about 3.5 over RTT 10 ms: 4), not the one of a rate unknown,
    and the cost model's probe sends nothing."""
    _need_tun()
    rows = _run(0.005, "e", per_node=1, windows=3.5)
    assert all(row["ok"] and row["transport"] == "tcp" for row in rows), rows
    pools = {row["connections"][1 - row["rank"]] for row in rows}
    rate = 0.95 * rows[0]["link_gbit"] * 1e9 / 8  # one peer's share: the only peer's
    # the handshake's round trip: the link's 10 ms and a little
    allowed = {math.ceil(rate * rtt / rows[0]["window"]) for rtt in (0.0100, 0.0115)}
    assert len(pools) == 1 and pools <= allowed and min(pools) > 2, (pools, allowed, rows)
    # Nor does the cost model's probe time rounds there: the rate is given, a message's latency
    # is half the round trip the kernel measured.
    assert all(row["probe_s"] == 0 for row in rows), rows
    # so the group agreed its figures as it was created, not in its first call
    assert all(row["early"] == 1 for row in rows), rows
    # and the new connections opened their windows as the group was created, each a round
    # trip of its share (then the 4 MiB all-reduce above, queued behind those bytes, was right).
    assert all(row["warmed"] == row["connections"][1 - row["rank"]] for row in rows), rows
    assert rows[0]["params"] == rows[1]["params"] and 0.0049 < rows[0]["params"]["alpha_s"] < 0.006, rows
