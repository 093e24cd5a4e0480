"""The user-space wide-area link (csrc/bench/wanlink.cc) through netem.NetEnv(link="tun"):
its delay, its rate, loss drawn per packet with the survivors of a split TCP segment arriving
intact, its rate changed while it runs, its end with its parent, and its refusals. Needs root,
iproute2 and /dev/net/tun (skipped otherwise); the whole file runs in about 20 s."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys

import pytest

from ringzip.bench import netem
from ringzip.bench.lab.wancheck import rtt

# A TCP sink and source run inside the namespaces: stdlib only, so they start fast.
_SINK = """
import hashlib, socket, sys
srv = socket.socket(); srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
srv.bind((sys.argv[1], int(sys.argv[2]))); srv.listen(1); srv.settimeout(30)
c, _ = srv.accept(); h = hashlib.sha256(); n = 0
while True:
    b = c.recv(1 << 20)
    if not b: break
    h.update(b); n += len(b)
print(n, h.hexdigest())
"""
_SOURCE = """
import hashlib, random, socket, sys, time
data = random.Random(7).randbytes(int(sys.argv[3]))
for _ in range(100):
    try: s = socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=5); break
    except OSError: time.sleep(0.05)
s.sendall(data); s.close()
print(len(data), hashlib.sha256(data).hexdigest())
"""
def _need_tun():
    if os.geteuid() != 0 or shutil.which("ip") is None or not os.path.exists("/dev/net/tun"):
        pytest.skip("needs root, iproute2 and /dev/net/tun")
    try:
        netem.wanlink_path()
    except netem.NetSetupError as e:
        pytest.skip(str(e))


def _prefix(tag: str) -> str:
    return f"rzw{os.getpid() % 10000}{tag}-"


def _transfer(net, nbytes: int, port: int) -> tuple[str, str]:
    sink = subprocess.Popen(net.exec_prefix(1) + [sys.executable, "-c", _SINK, net.addr(1), str(port)],
                            stdout=subprocess.PIPE, text=True)
    try:
        src = subprocess.run(net.exec_prefix(0) + [sys.executable, "-c", _SOURCE, net.addr(1), str(port), str(nbytes)],
                             capture_output=True, text=True, timeout=60)
        got, _ = sink.communicate(timeout=60)
    finally:
        if sink.poll() is None:
            sink.kill()
    return src.stdout.strip(), got.strip()


def _tcp_csum_errors(ns: str) -> int:
    snmp = subprocess.run(["ip", "netns", "exec", ns, "cat", "/proc/net/snmp"], capture_output=True, text=True).stdout
    rows = [ln.split() for ln in snmp.splitlines() if ln.startswith("Tcp:")]
    return int(rows[1][rows[0].index("InCsumErrors")])


def test_delay_is_one_way_and_rtt_is_twice_it():
    _need_tun()
    with netem.NetEnv(2, 1e9, delay_s=0.02, prefix=_prefix("d"), link="tun") as net:
        median = rtt(net, count=20)
    assert 0.040 <= median < 0.046, median  # never below 2 x delay; a loaded host adds a little


def test_rate_limits_and_carries():
    _need_tun()
    with netem.NetEnv(2, 200e6, prefix=_prefix("r"), link="tun") as net:
        goodput = net.measure_goodput(seconds=1.0)
    assert 0.5 * 200e6 < goodput < 1.02 * 200e6, goodput
    stats = net.link_stats
    assert stats["packets"] > 0 and stats["queue_drops"] >= 0 and stats["cpu_s"] > 0
    # most of TCP's bytes travel as large segments (TSO through the TUN's virtio header)
    assert stats["bytes"] / stats["packets"] > 3000, stats


def test_loss_per_packet_keeps_the_stream_intact():
    _need_tun()
    prefix = _prefix("l")
    with netem.NetEnv(2, 500e6, loss=0.03, prefix=prefix, link="tun") as net:
        sent, got = _transfer(net, 6 << 20, 29612)
        csum_errors = _tcp_csum_errors(net.rank_ns(1)) + _tcp_csum_errors(net.rank_ns(0))
    assert sent and sent == got  # every byte, in order, despite the losses
    stats = net.link_stats
    # the wire packets a transfer of 6 MiB stands for, about 4,400 of 1448 B, lost at 3 %
    assert stats["lost"] > 40 and stats["split"] > 0, stats
    assert csum_errors == 0  # the survivors of split segments carry right checksums
    assert netem.leftovers(prefix) == []


def test_rate_change_and_end_with_parent():
    _need_tun()
    prefix = _prefix("c")
    with netem.NetEnv(2, 100e6, prefix=prefix, link="tun") as net:
        net.set_rate(400e6)
        assert net.rate_bits == 400e6
        w = net._wanlink  # noqa: SLF001
        w.stdin.close()  # what the death of the process that started it looks like
        w.wait(timeout=5)
        assert w.returncode == 0
        links = subprocess.run(["ip", "-n", net.rank_ns(0), "-o", "link"], capture_output=True, text=True).stdout
        assert net.ifname(0) not in links  # its devices went with it
        net._wanlink = None  # noqa: SLF001
    assert netem.leftovers(prefix) == []


def test_refusals():
    _need_tun()
    exe = netem.wanlink_path()
    bad = subprocess.run([exe, "--rate", "fast", "a:b:10.0.0.1", "c:d:10.0.0.2"], capture_output=True, text=True)
    assert bad.returncode == 1 and "--rate fast" in bad.stderr
    one = subprocess.run([exe, "a:b:10.0.0.1"], capture_output=True, text=True)
    assert one.returncode == 2 and "usage" in one.stderr
    missing = subprocess.run([exe, "rzw-none-a:x:10.0.0.1", "rzw-none-b:y:10.0.0.2"], capture_output=True, text=True)
    assert missing.returncode == 1 and "rzw-none-a" in missing.stderr
    with pytest.raises(ValueError, match="link"):
        netem.NetEnv(2, 1e9, link="netem")
