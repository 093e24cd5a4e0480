"""Emulated network for local ranks: one Linux network namespace per rank (or per emulated node
of several ranks), a bridge in its own namespace, veth pairs between them, tc `tbf` shaping on
both directions of every namespace's link and optional netem delay. The host's own namespace is
never touched: every device is created inside a namespace this module made, and every name
starts with a per-run prefix (`rzb<pid>-`).

    with NetEnv(nranks=4, rate_bits=1e9, delay_s=0.0) as net:
        net.exec_prefix(rank)   # ['ip', 'netns', 'exec', 'rzb123-r0']
        net.ifname(rank), net.addr(rank)
        net.measure_goodput()   # bits/s between the first two namespaces (TCP, ~1.5 s)

Topology and shaping:  rank i: [ns <p>r<i>: dev <p>r<i> 10.77.0.<i+1>/24]  <-veth->
[ns <p>br: dev <p>h<i> -- bridge <p>b]. Egress of <p>r<i> (rank -> bridge) and egress of <p>h<i>
(bridge -> rank) each get tbf at RATE, so every rank has RATE up and RATE down. DELAY (netem) is
added on the rank's egress only, so the one-way rank-to-rank latency is DELAY (RTT 2*DELAY).
rate_bits=None leaves the links unshaped.

A link with a round trip (delay_s > 0) or random loss (loss > 0) needs netem, which some kernels
lack; link="tun" (the default for such links, link="auto") builds it in user space instead:
no bridge and no veth, but a TUN device <p>r<i> (same name and address) in every namespace and
one process, `wanlink` (csrc/bench/wanlink.cc), that forwards every packet through the sender's
uplink at RATE, DELAY, LOSS and the receiver's downlink at RATE, each with a drop-tail queue of
QUEUE_S. link="tbf" keeps the veth topology (with netem for delay and loss, where it exists).

Emulated nodes (ranks_per_node=P > 1): namespace <p>n<j> holds ranks jP..jP+P-1, like one
machine with one NIC: the P ranks share the node's veth <p>n<j> (10.77.0.<j+1>) and its RATE;
traffic between them goes to the node's own address, which the kernel routes through the
namespace's loopback, unshaped. hostnames=True also gives every node a hostname of its own
(<p>host<j>, a UTS namespace per started process) and an /etc/hosts (iproute2 mounts
/etc/netns/<ns>/hosts there for `ip netns exec`) that resolves every node's name, as on real
machines: torchrun's c10d rendezvous finds out which agent hosts the store, and which address
the workers reach rank 0 at, through the hostname.

Command line:  python -m ringzip.bench.netem cleanup PREFIX   (remove leftovers of a killed run)
               python -m ringzip.bench.netem list PREFIX
"""
from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time

SUBNET = "10.77.0"
ETC_NETNS = "/etc/netns"  # iproute2: files in ETC_NETNS/<ns>/ are mounted over /etc/ by `ip netns exec`


class NetSetupError(RuntimeError):
    pass


QUEUE_S = 0.02  # drop-tail queue of every emulated link, in seconds at its rate (tbf's too)


def wanlink_path() -> str:
    """The user-space link program, built and installed with the extension."""
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "wanlink")
    if not os.access(path, os.X_OK):
        raise NetSetupError(f"{path} is missing: the user-space link is built with the extension "
                            "(pip install ., or tools/dev_build.sh for a source tree)")
    return path


def check_prereqs() -> None:
    """Refuse clearly when we cannot build namespaces."""
    if not sys.platform.startswith("linux"):
        raise NetSetupError("--net and --nodes need Linux network namespaces")
    if os.geteuid() != 0:
        raise NetSetupError("--net and --nodes need root (network namespaces, veth, tc); run as root or drop them")
    missing = [t for t in ("ip", "tc") if shutil.which(t) is None]
    if missing:
        raise NetSetupError(f"--net and --nodes need the iproute2 tools; missing: {', '.join(missing)}")


def _run(cmd: list[str], check: bool = True) -> subprocess.CompletedProcess:
    p = subprocess.run(cmd, capture_output=True, text=True)
    if check and p.returncode != 0:
        raise NetSetupError(f"command failed: {' '.join(cmd)}\n{p.stderr.strip()}")
    return p


def leftovers(prefix: str) -> list[str]:
    """Namespaces and host links whose names start with `prefix` (should be empty after a run)."""
    out = []
    p = _run(["ip", "netns", "list"], check=False)
    for line in p.stdout.splitlines():
        name = line.split()[0] if line.split() else ""
        if name.startswith(prefix):
            out.append(f"netns {name}")
    p = _run(["ip", "-o", "link", "show"], check=False)
    for line in p.stdout.splitlines():
        parts = line.split(":")
        if len(parts) > 1:
            name = parts[1].strip().split("@")[0]
            if name.startswith(prefix):
                out.append(f"link {name}")
    if os.path.isdir(ETC_NETNS):
        out += [f"dir {ETC_NETNS}/{d}" for d in sorted(os.listdir(ETC_NETNS)) if d.startswith(prefix)]
    return out


def cleanup_prefix(prefix: str) -> list[str]:
    """Remove every namespace (and with it every device) and host link named `prefix*`."""
    if not prefix or len(prefix) < 4:
        raise ValueError("refusing to clean up with a short prefix")
    errors = []
    p = _run(["ip", "netns", "list"], check=False)
    names = [ln.split()[0] for ln in p.stdout.splitlines() if ln.split() and ln.split()[0].startswith(prefix)]
    for ns in names:
        pids = _run(["ip", "netns", "pids", ns], check=False).stdout.split()
        for pid in pids:  # only processes living in our own namespace: ranks we started
            try:
                os.kill(int(pid), signal.SIGKILL)
            except (ProcessLookupError, ValueError):
                pass
        r = _run(["ip", "netns", "del", ns], check=False)
        if r.returncode != 0:
            errors.append(f"ip netns del {ns}: {r.stderr.strip()}")
    for item in leftovers(prefix):
        if item.startswith("link "):
            r = _run(["ip", "link", "del", item[5:]], check=False)
            if r.returncode != 0:
                errors.append(f"ip link del {item[5:]}: {r.stderr.strip()}")
        elif item.startswith("dir "):
            shutil.rmtree(item[4:], ignore_errors=True)
    try:
        os.rmdir(ETC_NETNS)  # only when empty: it may hold other tools' files
    except OSError:
        pass
    return errors


class NetEnv:
    def __init__(self, nranks: int, rate_bits: float | None, delay_s: float = 0.0, prefix: str | None = None,
                 log=None, ranks_per_node: int = 1, hostnames: bool = False, loss: float = 0.0,
                 link: str = "auto"):
        if ranks_per_node < 1 or nranks % ranks_per_node:
            raise ValueError(f"{nranks} ranks do not split into nodes of {ranks_per_node}")
        self.per_node, self.nnodes = ranks_per_node, nranks // ranks_per_node
        if self.nnodes < 1 or self.nnodes > 250:
            raise ValueError("--net supports 1..250 namespaces")
        self.nranks, self.delay_s, self.loss = nranks, float(delay_s), float(loss)
        self.rate_bits = float(rate_bits) if rate_bits else None
        if link not in ("auto", "tbf", "tun"):
            raise ValueError(f"link must be auto, tbf or tun, got {link!r}")
        if not 0 <= self.loss < 1 or self.delay_s < 0:
            raise ValueError(f"bad link: delay {delay_s!r} s, loss {loss!r}")
        # tbf (veth, the kernel's shapers) where it suffices: the figures recorded before the
        # user-space link existed were taken that way
        self.link = link if link != "auto" else ("tun" if self.delay_s > 0 or self.loss > 0 else "tbf")
        self._wanlink: subprocess.Popen | None = None
        self.link_stats: dict | None = None  # wanlink's counters and CPU time, after teardown
        self.hostnames = hostnames
        # one namespace per rank keeps its historical names (r<i>); emulated nodes are n<j>
        self._tag = "r" if ranks_per_node == 1 else "n"
        self.prefix = prefix or f"rzb{os.getpid()}-"
        if len(self.prefix) + 1 + len(str(self.nnodes)) > 15:
            raise ValueError(f"prefix {self.prefix!r} too long for Linux interface names")
        self.log = log or (lambda m: None)
        self.active = False
        self._old_handlers: dict = {}
        self.cpu_ns_per_byte: float | None = None  # host CPU a probed byte cost (measure_goodput)

    # names ---------------------------------------------------------------------------------
    @property
    def bridge_ns(self) -> str:
        return f"{self.prefix}br"

    def node_of(self, r: int) -> int:
        return r // self.per_node

    def node_ns(self, j: int) -> str:
        return f"{self.prefix}{self._tag}{j}"

    def rank_ns(self, r: int) -> str:
        return self.node_ns(self.node_of(r))

    def ifname(self, r: int) -> str:
        return self.rank_ns(r)

    def addr(self, r: int) -> str:
        return f"{SUBNET}.{self.node_of(r) + 1}"

    def hostname(self, j: int) -> str:
        return f"{self.prefix}host{j}"

    def exec_prefix(self, r: int) -> list[str]:
        cmd = ["ip", "netns", "exec", self.rank_ns(r)]
        if self.hostnames:  # a UTS namespace of its own, named like its node
            set_name = 'hostname "$0" && exec "$@"'
            cmd += ["unshare", "--uts", "--", "sh", "-c", set_name, self.hostname(self.node_of(r))]
        return cmd

    def describe(self) -> str:
        d = f", one-way delay {self.delay_s * 1e3:g} ms" if self.delay_s else ""
        d += f", loss {self.loss * 100:g} % per packet" if self.loss else ""
        shaper = "tbf" if self.link == "tbf" else "user-space link (wanlink)"
        rate = f"{self.rate_bits / 1e9:g} Gbit/s {shaper} per direction" if self.rate_bits else f"unshaped ({shaper})"
        where = f" on each node's NIC, shared by its {self.per_node} ranks" if self.per_node > 1 else ""
        return f"{rate}{where}{d} (netns {self.prefix}*)"

    # lifecycle -----------------------------------------------------------------------------
    def __enter__(self):
        check_prereqs()
        self._install_signals()
        try:
            self.setup()
        except BaseException:
            self.teardown()
            raise
        return self

    def __exit__(self, *exc):
        self.teardown()
        return False

    def _install_signals(self):
        def handler(signum, frame):
            raise SystemExit(128 + signum)  # unwinds through finally/__exit__ -> teardown

        for sig in (signal.SIGTERM, signal.SIGHUP):
            try:
                self._old_handlers[sig] = signal.signal(sig, handler)
            except ValueError:  # not the main thread
                pass

    def _restore_signals(self):
        for sig, h in self._old_handlers.items():
            try:
                signal.signal(sig, h)
            except ValueError:
                pass
        self._old_handlers = {}

    def _tbf(self) -> list[str]:
        """The tbf qdisc arguments at RATE; [] when the links are unshaped (rate_bits None)."""
        if not self.rate_bits:
            return []
        rate_Bps = self.rate_bits / 8
        # burst must hold a whole GSO/TSO super-packet (64 KiB) and ~1 ms of traffic.
        burst = int(max(128 * 1024, rate_Bps * 1e-3))
        limit = int(burst + rate_Bps * 0.02)  # ~20 ms of queue
        return ["tbf", "rate", f"{int(self.rate_bits)}bit", "burst", str(burst), "limit", str(limit)]

    def set_rate(self, rate_bits: float) -> None:
        """Changes every link's rate while the ranks run (tc qdisc change: no reconnect). The
        links must have been shaped at setup (rate_bits given)."""
        if not self.rate_bits or not rate_bits:
            raise ValueError("set_rate changes the rate of shaped links: set up with a rate and give one")
        self.rate_bits = float(rate_bits)
        if self._wanlink is not None:
            self._wanlink_command(f"rate {self.rate_bits:.0f}")
            self.log(f"[net] links now {self.describe()}")
            return
        for j in range(self.nnodes):
            node_side = self.ifname(j * self.per_node)
            for ns, dev, delay in ((self.bridge_ns, f"{self.prefix}h{j}", 0.0), (self.node_ns(j), node_side, self.delay_s)):
                netem = delay > 0 or (self.loss > 0 and ns != self.bridge_ns)
                where = ["parent", "1:1", "handle", "10:"] if netem else ["root", "handle", "1:"]
                _run(["ip", "netns", "exec", ns, "tc", "qdisc", "change", "dev", dev] + where + self._tbf())
        self.log(f"[net] links now {self.describe()}")

    def _shape(self, ns: str, dev: str, delay_s: float) -> None:
        base = ["ip", "netns", "exec", ns, "tc", "qdisc", "add", "dev", dev]
        tbf = self._tbf()
        loss = 0.0 if ns == self.bridge_ns else self.loss  # on the rank's egress only, like the delay
        if delay_s > 0 or loss > 0:
            if not self._netem_ok(ns):
                raise NetSetupError("this kernel has no netem qdisc (sch_netem), so the tbf link cannot add "
                                    "a delay or loss; use the user-space link (--net RATE,DELAY,tun, the "
                                    "default for such links)")
            _run(base + ["root", "handle", "1:", "netem", "delay", f"{delay_s * 1e6:.0f}us",
                         *(["loss", f"{loss * 100:g}%"] if loss else []), "limit", "100000"])
            if tbf:
                _run(base + ["parent", "1:1", "handle", "10:"] + tbf)
        elif tbf:
            _run(base + ["root", "handle", "1:"] + tbf)

    @staticmethod
    def _netem_ok(ns: str) -> bool:
        p = _run(["ip", "netns", "exec", ns, "tc", "qdisc", "add", "dev", "lo", "root", "netem",
                  "delay", "0us"], check=False)
        if p.returncode == 0:
            _run(["ip", "netns", "exec", ns, "tc", "qdisc", "del", "dev", "lo", "root"], check=False)
        return p.returncode == 0

    def setup(self) -> None:
        self.active = True
        if self.link == "tun":
            self._setup_tun()
            return
        br_ns, br = self.bridge_ns, f"{self.prefix}b"
        _run(["ip", "netns", "add", br_ns])
        _run(["ip", "-n", br_ns, "link", "set", "lo", "up"])
        _run(["ip", "-n", br_ns, "link", "add", br, "type", "bridge"])
        _run(["ip", "-n", br_ns, "link", "set", br, "up"])
        for j in range(self.nnodes):
            r = j * self.per_node  # the node's first rank
            ns, host_side, rank_side = self.node_ns(j), f"{self.prefix}h{j}", self.ifname(r)
            _run(["ip", "netns", "add", ns])
            _run(["ip", "-n", ns, "link", "set", "lo", "up"])
            _run(["ip", "-n", br_ns, "link", "add", host_side, "type", "veth", "peer", "name", rank_side,
                  "netns", ns])
            _run(["ip", "-n", br_ns, "link", "set", host_side, "master", br])
            _run(["ip", "-n", br_ns, "link", "set", host_side, "up"])
            _run(["ip", "-n", ns, "addr", "add", f"{self.addr(r)}/24", "dev", rank_side])
            _run(["ip", "-n", ns, "link", "set", rank_side, "up"])
            self._shape(br_ns, host_side, 0.0)
            self._shape(ns, rank_side, self.delay_s)
            if self.hostnames:
                self._write_hosts(ns)
        self.log(f"[net] {self.nnodes} namespaces {self.prefix}{self._tag}* on bridge {br} ({self.describe()})")

    def _setup_tun(self) -> None:
        machines = []
        for j in range(self.nnodes):
            ns = self.node_ns(j)
            _run(["ip", "netns", "add", ns])
            _run(["ip", "-n", ns, "link", "set", "lo", "up"])
            # IPv4 only: no router solicitations for the link to carry
            _run(["ip", "netns", "exec", ns, "sysctl", "-qw", "net.ipv6.conf.default.disable_ipv6=1"], check=False)
            machines.append(f"{ns}:{self.ifname(j * self.per_node)}:{self.addr(j * self.per_node)}")
            if self.hostnames:
                self._write_hosts(ns)
        cmd = [wanlink_path(), "--rate", f"{self.rate_bits or 0:.0f}", "--delay", f"{self.delay_s:.9f}",
               "--loss", f"{self.loss:.9f}", "--queue", f"{QUEUE_S}", "--seed", str(os.getpid())] + machines
        # stdin is its lifeline: the link ends with this process, however that ends
        self._wanlink = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                         stderr=subprocess.PIPE, text=True)
        line = self._wanlink.stdout.readline()
        if not line.startswith("ready"):
            err = self._wanlink.stderr.read() if self._wanlink.poll() is not None else ""
            raise NetSetupError(f"wanlink did not start: {line.strip()} {err.strip()}")
        if "no real-time" in line:
            self.log("[net] wanlink runs without real-time priority: its deliveries may wait for a busy core")
        self.log(f"[net] {self.nnodes} namespaces {self.prefix}{self._tag}* joined by wanlink ({self.describe()})")

    def _wanlink_command(self, line: str) -> None:
        self._wanlink.stdin.write(line + "\n")
        self._wanlink.stdin.flush()
        if self._wanlink.stdout.readline().strip() != "ok":
            raise NetSetupError(f"wanlink refused {line!r}")

    def _stop_wanlink(self) -> None:
        w, self._wanlink = self._wanlink, None
        if w is None:
            return
        try:
            out, err = w.communicate("quit\n", timeout=10)
            self.link_stats = json.loads(out.strip().splitlines()[-1]) if out.strip() else None
            if self.link_stats:
                self.log(f"[net] wanlink: {self.link_stats}")
        except (subprocess.TimeoutExpired, ValueError, OSError):
            w.kill()
            w.wait()

    def _write_hosts(self, ns: str) -> None:
        """The /etc/hosts `ip netns exec` shows inside `ns`: every node's hostname and address."""
        d = os.path.join(ETC_NETNS, ns)
        os.makedirs(d, exist_ok=True)
        lines = ["127.0.0.1 localhost", "::1 localhost"]
        lines += [f"{self.addr(j * self.per_node)} {self.hostname(j)}" for j in range(self.nnodes)]
        with open(os.path.join(d, "hosts"), "w") as f:
            f.write("\n".join(lines) + "\n")

    def teardown(self) -> None:
        if not self.active:
            self._restore_signals()
            return
        # no second Ctrl-C in the middle of clean-up
        blocked = {signal.SIGINT, signal.SIGTERM, signal.SIGHUP}
        old = signal.pthread_sigmask(signal.SIG_BLOCK, blocked)
        try:
            self._stop_wanlink()
            errs = cleanup_prefix(self.prefix)
            left = leftovers(self.prefix)
            self.active = False
            if errs or left:
                print(f"[net] WARNING clean-up incomplete: {errs} {left}; run "
                      f"`python -m ringzip.bench.netem cleanup {self.prefix}`", file=sys.stderr)
            else:
                self.log(f"[net] removed namespaces {self.prefix}*")
        finally:
            signal.pthread_sigmask(signal.SIG_SETMASK, old)
            self._restore_signals()

    # measurement ---------------------------------------------------------------------------
    def measure_goodput(self, seconds: float = 1.5, src: int = 0, dst: int | None = None,
                        port: int = 29499, streams: int = 1) -> float:
        """TCP goodput (bits/s) from rank `src` to rank `dst` (default: the first rank of the
        next namespace, so the probe crosses the shaped link) over `streams` connections at
        once, as the receiver saw it; `late_bits_per_s` keeps the rate of the stream's second half."""
        dst = self.per_node if dst is None else dst
        # run this file as a plain script: stdlib only, no torch import (fast start)
        me = [sys.executable, os.path.abspath(__file__)]
        env = dict(os.environ)
        recv = subprocess.Popen(self.exec_prefix(dst) + me + ["recv", self.addr(dst), str(port), str(streams)],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
        try:
            time.sleep(0.3)
            snd = subprocess.run(self.exec_prefix(src) + me + ["send", self.addr(dst), str(port), str(seconds), str(streams)],
                                 capture_output=True, text=True, env=env, timeout=seconds + 30)
            out, err = recv.communicate(timeout=seconds + 30)
        finally:
            if recv.poll() is None:
                recv.kill()
                recv.wait()
        if recv.returncode != 0 or snd.returncode != 0:
            raise NetSetupError(f"goodput probe failed: {snd.stderr.strip()} {err.strip()}")
        res = json.loads(out)
        # The namespaces share this host's cores: what the probe's bytes cost them (both TCP/IP
        # stacks, the veths, the bridge, the shapers; the two loops' Python is small beside it).
        self.cpu_ns_per_byte = res["busy_s"] / res["bytes"] * 1e9
        self.late_bits_per_s = res["late_bytes"] * 8 / res["late_seconds"]
        return res["bytes"] * 8 / res["seconds"]


    def link_cpu_seconds(self) -> float:
        """CPU seconds the user-space link's process has used so far (0 for tbf links)."""
        if self._wanlink is None:
            return 0.0
        with open(f"/proc/{self._wanlink.pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def host_busy_seconds() -> float:
    """CPU seconds this host's cores have been busy (user, system, interrupts) since boot: the
    namespaces' stacks run on them, so /proc/stat counts them from any namespace."""
    with open("/proc/stat") as f:
        user, nice, system, _idle, _iowait, irq, softirq = (int(x) for x in f.readline().split()[1:8])
    return (user + nice + system + irq + softirq) / os.sysconf("SC_CLK_TCK")


# probe endpoints (run inside the namespaces) ---------------------------------------------------
def _size_buffers(sock) -> None:
    """As ringzip's own sockets (transport/tcp/connect.cc size_buffers): the largest buffers the
    kernel grants a socket that asks, where that is more than autotuning reaches -- so that a
    single stream measures the window ringzip's connections have on a long link."""
    def number(path, field):
        try:
            with open(path) as f:
                return int(f.read().split()[field])
        except (OSError, ValueError, IndexError):
            return 0
    for opt, core, tcp in ((socket.SO_SNDBUF, "wmem_max", "tcp_wmem"), (socket.SO_RCVBUF, "rmem_max", "tcp_rmem")):
        most = number(f"/proc/sys/net/core/{core}", 0)
        if 2 * most > number(f"/proc/sys/net/ipv4/{tcp}", 2):
            sock.setsockopt(socket.SOL_SOCKET, opt, most)


def _recv(addr: str, port: int, streams: int = 1) -> None:
    srv = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    _size_buffers(srv)  # accepted sockets inherit it
    srv.bind((addr, port))
    srv.listen(streams)
    srv.settimeout(30)
    state = {"total": 0, "t0": None, "busy0": None, "marks": []}
    lock = threading.Lock()

    def drain(conn):
        buf = bytearray(1 << 20)
        while True:
            n = conn.recv_into(buf)
            if n == 0:
                break
            with lock:
                if state["t0"] is None:  # from the first bytes on
                    state["t0"], state["busy0"], state["total"] = time.perf_counter(), host_busy_seconds(), -n
                state["total"] += n
                now = time.perf_counter()
                if not state["marks"] or now - state["marks"][-1][0] >= 0.05:
                    state["marks"].append((now, state["total"]))
        conn.close()

    threads = []
    for _ in range(streams):
        conn, _ = srv.accept()
        threads.append(threading.Thread(target=drain, args=(conn,)))
        threads[-1].start()
    for t in threads:
        t.join()
    t1, busy1 = time.perf_counter(), host_busy_seconds()
    srv.close()
    t0, busy0 = state["t0"] or t1, state["busy0"] or busy1
    # The second half alone: a long link's slow start is over by then.
    half = next(((t, b) for t, b in state["marks"] if t >= (t0 + t1) / 2), (t1, state["total"]))
    print(json.dumps({"bytes": state["total"], "seconds": max(t1 - t0, 1e-9), "busy_s": busy1 - busy0,
                      "late_bytes": state["total"] - half[1], "late_seconds": max(t1 - half[0], 1e-9)}))


def _send(addr: str, port: int, seconds: float, streams: int = 1) -> None:
    def one():
        s = None
        for _ in range(50):
            c = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            try:
                _size_buffers(c)
                c.settimeout(5)
                c.connect((addr, port))
                s = c
                break
            except OSError:
                c.close()
                time.sleep(0.1)
        if s is None:
            raise SystemExit("could not connect to the goodput receiver")
        s.settimeout(seconds + 30)
        data = b"\0" * (1 << 20)
        while time.perf_counter() < end:
            s.sendall(data)
        s.shutdown(socket.SHUT_WR)
        s.recv(1)  # wait for the receiver to finish reading
        s.close()

    end = time.perf_counter() + seconds
    threads = [threading.Thread(target=one) for _ in range(streams)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["recv"]:
        _recv(argv[1], int(argv[2]), *(int(a) for a in argv[3:4]))
    elif argv[:1] == ["send"]:
        _send(argv[1], int(argv[2]), float(argv[3]), *(int(a) for a in argv[4:5]))
    elif argv[:1] == ["cleanup"] and len(argv) == 2:
        errs = cleanup_prefix(argv[1])
        print("\n".join(errs) or "clean")
        return 1 if errs else 0
    elif argv[:1] == ["list"] and len(argv) == 2:
        print("\n".join(leftovers(argv[1])) or "nothing")
    else:
        print(__doc__)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())


def open_env(nproc: int, net, log=None, ranks_per_node: int = 1) -> "NetEnv":
    """The CLI's entry: a NetEnv for `nproc` ranks on the link `net` (a common.NetSpec), or a
    clean exit saying what is missing."""
    try:
        check_prereqs()
        if net.link == "tun" or (net.link == "auto" and (net.delay > 0 or net.loss > 0)):
            wanlink_path()
    except NetSetupError as e:
        raise SystemExit(f"ringzip-bench: {e}") from None
    return NetEnv(nproc, net.rate, net.delay, log=log, ranks_per_node=ranks_per_node, loss=net.loss, link=net.link)
