"""The user-space wide-area link (netem.NetEnv link="tun", csrc/bench/wanlink.cc) against what it
emulates, before any figure is taken through it (plain sockets: no torch, no ringzip):

- round trip: the median of 30 UDP echoes at each one-way DELAY, against 2 x DELAY;
- rate: one TCP stream at no delay through the tun link and through the kernel's tbf link of
  the same RATE, rounds alternating, and the forwarder's own CPU time per second of that stream;
- a long link: one stream and STREAMS streams at the largest DELAY, beside the bound one
  connection has there (its send buffer per round trip: net.ipv4.tcp_wmem's maximum / RTT).

    python -m ringzip.bench.lab.wancheck [--rate 1gbit] [--delays 10ms,50ms,100ms] [--repeat 3]
                                         [--json bench/results/wanlink_validation.json]
"""
from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time

from ..common import cpu_model, log, parse_delay_s, parse_rate_bits, split_list
from ..netem import NetEnv

_ECHO = """
import socket, sys
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); s.bind((sys.argv[1], 29613)); s.settimeout(10)
try:
    while True:
        d, a = s.recvfrom(2048); s.sendto(d, a)
except socket.timeout: pass
"""
_PING = """
import socket, statistics, sys, time
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); s.settimeout(2); rtts = []
for _ in range(int(sys.argv[2])):
    t = time.perf_counter(); s.sendto(b"x" * 56, (sys.argv[1], 29613))
    try: s.recvfrom(2048); rtts.append(time.perf_counter() - t)
    except socket.timeout: pass
    time.sleep(0.01)
print(statistics.median(rtts))
"""


def rtt(net: NetEnv, count: int = 30) -> float:
    echo = subprocess.Popen(net.exec_prefix(1) + [sys.executable, "-c", _ECHO, net.addr(1)])
    try:
        time.sleep(0.3)
        out = subprocess.run(net.exec_prefix(0) + [sys.executable, "-c", _PING, net.addr(1), str(count)],
                             capture_output=True, text=True, timeout=120, check=True).stdout
    finally:
        echo.kill()
        echo.wait()
    return float(out)


def send_buffer_max() -> int:
    """net.ipv4.tcp_wmem's maximum inside a fresh namespace (what one connection may keep in flight)."""
    with NetEnv(1, None, link="tbf") as net:
        out = subprocess.run(net.exec_prefix(0) + ["cat", "/proc/sys/net/ipv4/tcp_wmem"], capture_output=True,
                             text=True, check=True).stdout
    return int(out.split()[2])


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m ringzip.bench.lab.wancheck", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--rate", default="1gbit")
    p.add_argument("--delays", default="10ms,50ms,100ms", help="one-way delays for the round trips")
    p.add_argument("--repeat", type=int, default=3, help="rounds of the tbf / tun goodput comparison")
    p.add_argument("--seconds", type=float, default=3.0, help="length of each goodput probe")
    p.add_argument("--streams", type=int, default=4, help="parallel streams on the long link")
    p.add_argument("--json", help="write the figures here")
    args = p.parse_args(argv)
    rate = parse_rate_bits(args.rate)
    delays = [parse_delay_s(d) for d in split_list(args.delays)]
    res: dict = {"date": time.strftime("%Y-%m-%d %H:%M:%S"), "cpu": cpu_model(), "rate_bits": rate,
                 "command": "python -m ringzip.bench.lab.wancheck " + " ".join(argv or sys.argv[1:]),
                 "goodput": {"tbf": [], "tun": []}, "wanlink_cpu_per_s": [], "rtt": {}}
    for _ in range(args.repeat):
        for link in ("tbf", "tun"):
            with NetEnv(2, rate, link=link, log=log) as net:
                cpu0, t0 = net.link_cpu_seconds(), time.perf_counter()
                res["goodput"][link].append(net.measure_goodput(seconds=args.seconds))
                if link == "tun":
                    res["wanlink_cpu_per_s"].append((net.link_cpu_seconds() - cpu0) / (time.perf_counter() - t0))
    for d in delays:
        with NetEnv(2, rate, delay_s=d, link="tun", log=log) as net:
            res["rtt"][f"{d * 1e3:g}ms"] = {"expected_s": 2 * d, "median_s": rtt(net)}
    d = max(delays)
    wmem = send_buffer_max()
    with NetEnv(2, rate, delay_s=d, link="tun", log=log) as net:
        res["long_link"] = {"delay_s": d, "tcp_wmem_max": wmem, "one_connection_bound_bits": wmem * 8 / (2 * d),
                            "one_stream_bits": net.measure_goodput(seconds=2 * args.seconds),
                            f"{args.streams}_streams_bits": net.measure_goodput(seconds=2 * args.seconds,
                                                                               streams=args.streams)}
    tbf, tun = (statistics.median(res["goodput"][k]) for k in ("tbf", "tun"))
    res["summary"] = {"tun_over_tbf_goodput": tun / tbf,
                      "wanlink_cpu_share_at_rate": statistics.median(res["wanlink_cpu_per_s"]),
                      "rtt_over_expected": {k: v["median_s"] / v["expected_s"] for k, v in res["rtt"].items()}}
    print(f"# wancheck {res['date']}; CPU {res['cpu']}; {args.rate}")
    print(f"one stream, no delay: tbf {tbf / 1e9:.3f} Gbit/s, tun {tun / 1e9:.3f} Gbit/s (tun/tbf {tun / tbf:.3f}); "
          f"wanlink CPU {res['summary']['wanlink_cpu_share_at_rate'] * 100:.1f} % of a core")
    for k, v in res["rtt"].items():
        print(f"RTT at {k} one way: {v['median_s'] * 1e3:.2f} ms ({v['median_s'] / v['expected_s']:.4f} of 2 x delay)")
    ll = res["long_link"]
    print(f"RTT {2 * d * 1e3:g} ms: one stream {ll['one_stream_bits'] / 1e6:.0f} Mbit/s (bound {wmem >> 20} MiB / RTT = "
          f"{ll['one_connection_bound_bits'] / 1e6:.0f}), {args.streams} streams "
          f"{ll[f'{args.streams}_streams_bits'] / 1e6:.0f} Mbit/s")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(res, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
