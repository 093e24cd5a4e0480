"""examples/ddp_train.py on two emulated machines, launched the way docs/usage.md's "Several machines"
says: one torchrun agent per machine, each with

    torchrun --nnodes 2 --nproc-per-node 2 --rdzv-backend c10d --rdzv-endpoint HOST:PORT examples/ddp_train.py

A machine is a network namespace with its own hostname and /etc/hosts (ringzip.bench.netem),
joined to the other by a bridge; HOST is machine 0's address. Needs root and iproute2 (skipped
otherwise); hard timeout; the namespaces go away whatever happens.
"""
from __future__ import annotations

import atexit
import os
import re
import shutil
import signal
import subprocess
import sys
import time

import pytest

import ringzip
from ringzip.bench import netem

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PYDIR = os.path.dirname(os.path.dirname(os.path.abspath(ringzip.__file__)))  # the ringzip under test
TIMEOUT = 180
NODES, PER_NODE = 2, 2


def _need_netns():
    if not sys.platform.startswith("linux") or os.geteuid() != 0:
        pytest.skip("emulated machines need Linux network namespaces and root")
    missing = [t for t in ("ip", "tc", "unshare", "hostname") if shutil.which(t) is None]
    if missing:
        pytest.skip(f"emulated machines need {', '.join(missing)}")


def _kill(procs):
    for p in procs:
        if p.poll() is None:
            os.killpg(p.pid, signal.SIGKILL)  # the agent's own session: only what we started
    for p in procs:
        p.wait()


@pytest.mark.parametrize("delay_s", [0.0, 0.01], ids=["veth", "wan-rtt-20ms"])
def test_torchrun_two_machines(tmp_path, delay_s):
    _need_netns()
    if delay_s and (not os.path.exists("/dev/net/tun") or not os.access(os.path.join(PYDIR, "ringzip", "bench", "wanlink"), os.X_OK)):
        pytest.skip("the wide-area link needs /dev/net/tun and the wanlink program")
    prefix = f"rzm{os.getpid() % 10000}{int(delay_s * 1e3)}-"
    atexit.register(netem.cleanup_prefix, prefix)  # even if pytest is interrupted between steps
    # Unshaped: this test is about launching and agreeing, not speed. With a delay (the user-space
    # link), the ranks agree on a round trip where the transport stripes messages over its pool.
    net = netem.NetEnv(NODES * PER_NODE, None, delay_s, prefix=prefix, ranks_per_node=PER_NODE, hostnames=True)
    env = dict(os.environ, OMP_NUM_THREADS="1",
               PYTHONPATH=os.pathsep.join([PYDIR] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]))
    procs, logs = [], []
    try:
        with net:
            endpoint = f"{net.addr(0)}:29400"  # machine 0 hosts the rendezvous store
            for node in range(NODES):
                first = node * PER_NODE
                cmd = [sys.executable, "-m", "torch.distributed.run",  # = torchrun
                       "--nnodes", str(NODES), "--nproc-per-node", str(PER_NODE),
                       "--rdzv-backend", "c10d", "--rdzv-endpoint", endpoint,
                       os.path.join(REPO, "examples", "ddp_train.py"), "--steps", "10", "--codec", "q4"]
                log = tmp_path / f"node{node}.log"
                logs.append(log)
                with open(log, "wb") as f:
                    procs.append(subprocess.Popen(net.exec_prefix(first) + cmd, cwd=REPO, stdout=f,
                                                  stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                                  env=dict(env, GLOO_SOCKET_IFNAME=net.ifname(first)),
                                                  start_new_session=True))
            deadline = time.monotonic() + TIMEOUT
            while time.monotonic() < deadline and any(p.poll() is None for p in procs):
                if any(p.poll() not in (None, 0) for p in procs):
                    time.sleep(2)  # let the other agent notice and say what it saw
                    break
                time.sleep(0.5)
            timed_out = any(p.poll() is None for p in procs)
            _kill(procs)
    finally:
        _kill(procs)
        assert netem.leftovers(prefix) == [], netem.cleanup_prefix(prefix)
    out = "\n".join(f"--- node {i} ---\n" + log.read_text(errors="replace") for i, log in enumerate(logs))
    assert not timed_out, f"torchrun did not finish within {TIMEOUT} s:\n{out[-6000:]}"
    assert all(p.returncode == 0 for p in procs), f"exit codes {[p.returncode for p in procs]}:\n{out[-6000:]}"
    found = re.findall(r"rank (\d+) of 4 on (\S+): parameters sha256 ([0-9a-f]+)", out)
    assert sorted(int(r) for r, _, _ in found) == [0, 1, 2, 3], out[-3000:]
    assert len({h for _, _, h in found}) == 1, f"replicas differ: {found}"
    hosts = [h for _, h, _ in found]
    assert sorted(hosts.count(h) for h in set(hosts)) == [PER_NODE] * NODES, f"ranks per machine: {found}"
    assert re.search(r"OK: 4 ranks.*; 2 nodes x 2 ranks, node-aware, transport shm\+tcp", out), out[-3000:]
