"""End-to-end tests of the `ringzip-bench` CLI (loopback) and of the --net namespace set-up.

The CLI runs as a subprocess with a hard timeout; net tests need root and iproute2 and are
skipped otherwise. Whole file: well under 90 s on a 2-core machine.
"""
from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

import ringzip
from ringzip.bench import netem, report
from ringzip.bench.common import parse_net, parse_size, size_sweep
from ringzip.bench.ops import bus_factor

ROOT = Path(__file__).resolve().parents[2]
# Where the ringzip under test lives (installed, or the tree on PYTHONPATH): child processes
# must import the same one.
PYDIR = Path(ringzip.__file__).resolve().parents[1]

KEYS = ["op", "size_bytes", "dtype", "backend", "codec", "algorithm", "nproc", "time_us", "algbw_gbps",
        "busbw_gbps", "ratio", "speedup_vs_gloo", "max_abs_err", "rel_l2_err", "link_gbit"]


def _env():
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(PYDIR)] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p])
    return env


def _cli(args, timeout):
    return subprocess.run([sys.executable, "-m", "ringzip.bench", *args], cwd=ROOT, env=_env(),
                          capture_output=True, text=True, timeout=timeout)


def test_units():
    assert parse_size("4") == 4 and parse_size("64K") == 65536 and parse_size("16M") == 16 << 20
    assert size_sweep(4, 64, 4) == [4, 16, 64]
    assert parse_net("1gbit") == (1e9, 0.0, 0.0, "auto")
    rate, delay, loss, link = parse_net("10gbit,0.2ms")
    assert rate == 1e10 and abs(delay - 2e-4) < 1e-12 and loss == 0 and link == "auto"
    assert parse_net("1gbit,50ms,0.1%") == (1e9, 0.05, 0.001, "auto")
    assert parse_net("1gbit,tun").link == "tun" and parse_net("1gbit,50ms,0.002,tbf") == (1e9, 0.05, 0.002, "tbf")
    for bad in ("1gbit,50ms,120%", "1gbit,50ms,0.1%,3", "1gbit,netem", ""):
        with pytest.raises(ValueError):
            parse_net(bad)
    assert bus_factor("allreduce", 4) == 1.5 and bus_factor("allgather", 4) == 0.75
    with pytest.raises(ValueError):
        parse_size("12Q")


def test_collective_loopback_json(tmp_path):
    out = tmp_path / "r.json"
    p = _cli(["collective", "-n", "2", "-b", "1K", "-e", "256K", "-f", "16", "--backend", "ringzip,gloo",
              "--codec", "none,q8", "--iters", "5", "--warmup", "1", "--json", str(out),
              "--table", str(tmp_path / "r.md"), "--plot", str(tmp_path / "r.png"), "--link", "10gbit"],
             timeout=75)
    assert p.returncode == 0, p.stdout + p.stderr
    assert "torch" in p.stdout.splitlines()[1] and "nproc 2" in p.stdout
    rows = json.loads(out.read_text())["results"]
    assert {r["size_bytes"] for r in rows} == {1024, 16384, 262144}
    assert {r["backend"] for r in rows} == {"ringzip", "gloo"}
    assert len(rows) == 3 * 3  # gloo once per size, ringzip x {none, q8}
    for r in rows:
        for k in KEYS:
            assert k in r, k
        assert r["nproc"] == 2 and r["op"] == "allreduce" and r["dtype"] == "float32"
        if r["error"]:
            assert r["backend"] == "ringzip", r  # the backend may still lack a codec; gloo never fails
            continue
        assert r["time_us"] > 0 and r["algbw_gbps"] > 0 and r["busbw_gbps"] > 0
        assert r["max_abs_err"] >= 0 and r["rel_l2_err"] >= 0
        assert r["speedup_vs_gloo"] > 0 and r["link_gbit"] == 10.0 and r["efficiency"] > 0
        if r["ratio"] is not None:
            assert r["ratio"] >= 1.0 - 1e-9
        if r["codec"] == "none":
            assert r["ratio"] == 1.0 and r["rel_l2_err"] < 1e-6 and r["max_abs_err"] < 1e-4
            assert r["ranks_agree"] is True
    gloo = [r for r in rows if r["backend"] == "gloo"]
    assert all(not r["error"] and abs(r["speedup_vs_gloo"] - 1.0) < 1e-9 for r in gloo)
    assert (tmp_path / "r.png").stat().st_size > 1000
    assert "| size(B) |" in (tmp_path / "r.md").read_text()


def test_repeat_keeps_the_median_repetition(tmp_path):
    """--repeat runs every row that many times and reports the repetition with the median time."""
    rows = [{"size_bytes": 4, "backend": "gloo", "codec": "none", "algorithm": "-", "time_us": t, "error": None,
             "first_us": 10 * t, "cold_calls": 4, "cold_over_steady": t / 10, "learning_calls": int(t)}
            for t in (30.0, 10.0, 20.0)]
    rows.append({"size_bytes": 4, "backend": "ringzip", "codec": "none", "algorithm": "auto", "time_us": None,
                 "error": "boom"})
    merged = report.median_of_repeats(rows)
    assert [r["backend"] for r in merged] == ["gloo", "ringzip"]
    assert merged[0]["time_us"] == 20.0 and merged[0]["repeat_times_us"] == [10.0, 20.0, 30.0]
    # the cold cost is the first repetition's (the later ones find the size learned)
    assert merged[0]["first_us"] == 300.0 and merged[0]["learning_calls"] == 30 and merged[0]["cold_over_steady"] == 3.0
    assert merged[1]["error"] == "boom"
    out = tmp_path / "r.json"
    p = _cli(["collective", "-n", "2", "-b", "4", "-e", "4", "--backend", "ringzip,gloo", "--codec", "none",
              "--iters", "3", "--warmup", "1", "--repeat", "3", "--json", str(out)], timeout=75)
    assert p.returncode == 0, p.stdout + p.stderr
    got = json.loads(out.read_text())["results"]
    assert len(got) == 2 and all(r["repeats"] == 3 and len(r["repeat_times_us"]) == 3 for r in got)
    assert all(r["time_us"] == sorted(r["repeat_times_us"])[1] for r in got)
    for r in got:  # every row reports what its first calls cost
        assert r["first_us"] > 0 and r["cold_calls"] >= 1 and 0 <= r["learning_calls"] <= r["cold_calls"], r
        assert r["cold_over_steady"] > 0, r
        assert len(r["iter_times_us"]) == r["iters"] and min(r["iter_times_us"]) == round(r["time_us_min"], 1), r


def _cli_net(args, timeout):
    """Runs a --net CLI command to success; its namespaces (rzb<pid>-*) must be gone after."""
    p = subprocess.Popen([sys.executable, "-m", "ringzip.bench", *args], cwd=ROOT, env=_env(),
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        stdout, stderr = p.communicate(timeout=timeout)
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
        assert netem.leftovers(f"rzb{p.pid}-") == [], netem.cleanup_prefix(f"rzb{p.pid}-")
    assert p.returncode == 0, stdout + stderr


def _need_root_net():
    if os.geteuid() != 0:
        pytest.skip("network namespaces need root")
    if not (shutil.which("ip") and shutil.which("tc")):
        pytest.skip("iproute2 (ip, tc) not installed")


def test_net_refuses_without_root(monkeypatch):
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    with pytest.raises(netem.NetSetupError, match="root"):
        netem.check_prereqs()
    monkeypatch.setattr(os, "geteuid", lambda: 0)
    monkeypatch.setattr(shutil, "which", lambda t: None)
    with pytest.raises(netem.NetSetupError, match="ip, tc"):
        netem.check_prereqs()


def test_net_setup_teardown_and_forced_errors(monkeypatch):
    _need_root_net()
    prefix = f"rzt{os.getpid() % 100000}-"
    with netem.NetEnv(2, 1e9, prefix=prefix) as net:
        names = " ".join(netem.leftovers(prefix))
        assert f"netns {net.rank_ns(0)}" in names and f"netns {net.bridge_ns}" in names
        assert not any(x.startswith("link ") for x in netem.leftovers(prefix))  # host untouched
        ping = subprocess.run(net.exec_prefix(0) + ["ping", "-c1", "-W2", net.addr(1)], capture_output=True) \
            if shutil.which("ping") else None
        assert ping is None or ping.returncode == 0
    assert netem.leftovers(prefix) == []

    with pytest.raises(RuntimeError, match="boom"):
        with netem.NetEnv(3, 1e9, prefix=prefix):
            raise RuntimeError("boom")
    assert netem.leftovers(prefix) == []

    calls = {"n": 0}
    real = netem.NetEnv._shape

    def failing_shape(self, ns, dev, delay):  # fail half-way through the set-up
        calls["n"] += 1
        if calls["n"] == 3:
            raise netem.NetSetupError("forced set-up failure")
        return real(self, ns, dev, delay)

    monkeypatch.setattr(netem.NetEnv, "_shape", failing_shape)
    with pytest.raises(netem.NetSetupError, match="forced"):
        with netem.NetEnv(3, 1e9, prefix=prefix):
            pass
    assert netem.leftovers(prefix) == []


def _wait_for(pred, timeout):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if pred():
            return True
        time.sleep(0.2)
    return False


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_net_cli_interrupted_cleans_up(sig):
    _need_root_net()
    p = subprocess.Popen([sys.executable, "-m", "ringzip.bench", "collective", "-n", "2", "--net", "1gbit",
                          "--backend", "gloo", "-b", "1M", "-e", "64M", "-f", "4", "-q"],
                         cwd=ROOT, env=_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    prefix = f"rzb{p.pid}-"
    try:
        assert _wait_for(lambda: any(f"{prefix}r1" in x for x in netem.leftovers(prefix)), 30), "no netns made"
        time.sleep(2.5)  # inside the goodput probe or the sweep
        p.send_signal(sig)
        p.communicate(timeout=40)
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
    assert netem.leftovers(prefix) == [], netem.cleanup_prefix(prefix)


def test_crashing_and_hanging_rows_become_errors(tmp_path):
    """A rank that dies or hangs costs one row, not the sweep (launcher restarts after it)."""
    out = tmp_path / "f.json"
    env = _env()
    for fault, extra in (("crash@1", []), ("hang@2", ["--row-timeout", "6"])):
        env["RINGZIP_BENCH_FAULT"] = fault
        p = subprocess.run([sys.executable, "-m", "ringzip.bench", "-n", "2", "-b", "64", "-e", "4K", "-f", "4",
                            "--backend", "gloo", "--iters", "3", "--warmup", "1", "--json", str(out), "-q", *extra],
                           cwd=ROOT, env=env, capture_output=True, text=True, timeout=60)
        assert p.returncode == 0, p.stderr
        rows = json.loads(out.read_text())["results"]
        bad = int(fault.split("@")[1])
        assert len(rows) == 4
        assert rows[bad]["error"] and ("died" in rows[bad]["error"] or "no progress" in rows[bad]["error"])
        assert all(not r["error"] and r["time_us"] > 0 for i, r in enumerate(rows) if i != bad)


def test_nodes_layout_and_rows():
    """--nodes N --nproc-per-node P: world size N*P, -n must agree; --hierarchy multiplies ringzip rows."""
    from ringzip.bench.collective import DEFAULTS, _layout
    from ringzip.bench.plan import configs

    assert _layout(dict(DEFAULTS), None) == (4, None, None)  # no --nodes: as before
    assert _layout(dict(DEFAULTS, nodes=2, nproc_per_node=3), None) == (6, 2, 3)
    assert _layout(dict(DEFAULTS, nodes=2), None) == (4, 2, 2)  # -n 4 split over 2 nodes
    assert _layout(dict(DEFAULTS, nodes=4, nproc_per_node=1), 4) == (4, 4, 1)
    for opt, n in ((dict(DEFAULTS, nodes=3), None), (dict(DEFAULTS, nodes=2, nproc_per_node=2), 6),
                   (dict(DEFAULTS, nproc_per_node=2), None)):
        with pytest.raises(SystemExit):
            _layout(opt, n)
    cfgs = configs(["gloo", "ringzip"], ["none", "q4"], ["auto"], ["flat", "node"])
    assert [c["key"] for c in cfgs] == ["gloo", "ringzip/none/auto/flat", "ringzip/none/auto/node",
                                        "ringzip/q4/auto/flat", "ringzip/q4/auto/node"]
    rows = [dict(op="allreduce", size_bytes=8, backend=c["backend"], codec=c["codec"], algorithm=c["algorithm"],
                 hierarchy=c["hierarchy"], time_us=t) for c, t in zip(cfgs, (100.0, 100.0, 50.0, 20.0, 10.0))]
    report.add_speedups(rows)
    assert [r.get("speedup_vs_flat") for r in rows] == [None, None, 2.0, None, 2.0]
    assert " hier " in report.text_table([_full(r) for r in rows]).splitlines()[0]


def _full(r):
    """A report row with every column's field, as the worker writes them."""
    keys = ["algbw_gbps", "busbw_gbps", "ratio", "wire_busbw_gbps", "speedup_vs_gloo", "max_abs_err", "rel_l2_err"]
    return dict({k: None for k in keys}, count=2, dtype="float32", redop="sum", **r)


def test_net_nodes_share_one_shaped_nic():
    """Ranks of one emulated node share a namespace: to each other unshaped, to other nodes at RATE."""
    _need_root_net()
    prefix = f"rzt{os.getpid() % 100000}-"
    with netem.NetEnv(4, 50e6, prefix=prefix, ranks_per_node=2) as net:
        assert net.rank_ns(0) == net.rank_ns(1) != net.rank_ns(2) == net.rank_ns(3)
        assert net.addr(1) == net.addr(0) and net.ifname(3) == net.ifname(2)
        inside = net.measure_goodput(0.5, src=0, dst=1)
        # An unshaped stream keeps a core busy: what its bytes cost the host shows (jiffies of 10 ms).
        inside_cpu = net.cpu_ns_per_byte
        across = net.measure_goodput(0.5)  # rank 0 -> rank 2, through both nodes' NICs
    assert netem.leftovers(prefix) == []
    assert across < 60e6 and inside > 4 * 50e6, (inside, across)
    assert 0.01 < inside_cpu < 100, inside_cpu


def test_nodes_cli(tmp_path):
    """2 emulated nodes x 2 ranks: gloo and ringzip flat / node-aware side by side, one run."""
    _need_root_net()
    out = tmp_path / "n.json"
    _cli_net(["collective", "--nodes", "2", "--nproc-per-node", "2", "--net", "1gbit", "-b", "256K", "-e", "256K",
              "--codec", "none,q8", "--iters", "2", "--warmup", "1", "--time-budget", "0", "--json", str(out),
              "--table", str(tmp_path / "n.txt")], timeout=120)
    doc = json.loads(out.read_text())
    assert doc["header"]["nodes"] == 2 and doc["header"]["nproc_per_node"] == 2
    assert "--nodes 2" in doc["header"]["command"]
    rows = doc["results"]
    assert [(r["backend"], r["codec"], r["hierarchy"]) for r in rows] == [
        ("gloo", "none", None), ("ringzip", "none", "flat"), ("ringzip", "none", "node"),
        ("ringzip", "q8", "flat"), ("ringzip", "q8", "node")]
    for r in rows:
        assert not r["error"] and r["time_us"] > 0 and r["nproc"] == 4 and r["ranks_agree"] is True, r
        assert r["rel_l2_err"] < (1e-6 if r["codec"] == "none" else 0.05), r
    assert all(r["speedup_vs_flat"] > 0 for r in rows if r["hierarchy"] == "node")
    text = (tmp_path / "n.txt").read_text()
    assert "# command: ringzip-bench collective --nodes 2" in text and " hier " in text


def test_linkcheck_bad_arguments():
    p = _cli(["linkcheck", "--net", "1gbit", "-n", "1"], timeout=60)
    assert p.returncode == 2 and "-n >= 2" in p.stderr, p.stdout + p.stderr


def test_linkcheck_carries_the_shaped_rate(tmp_path):
    """Both traffic patterns move at most the shaped rate (and not far below it) per rank."""
    _need_root_net()
    out = tmp_path / "lc.json"
    _cli_net(["linkcheck", "--net", "100mbit", "-n", "3", "--mib", "1", "--repeat", "2", "--json", str(out)],
             timeout=120)
    doc = json.loads(out.read_text())
    assert set(doc["median"]) == {"ring", "all-to-all"} and doc["nproc"] == 3
    for pattern, rounds in doc["rounds"].items():
        assert len(rounds) == 2 and all(0.4 < x < 1.1 for x in rounds), (pattern, rounds)
