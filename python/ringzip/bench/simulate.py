"""Replays the messages a schedule really posts through a model of links and kernels.

A schedule runs once over the loopback transport with n ranks as threads (ringzip._C.loopback,
trace=...): every rank's sends, receives, waits and kernels are recorded in the order it issued
them. The replay is a discrete-event simulation of those programs:

- a message moves once both its send and its receive are posted (Gloo's rendezvous: the
  receiver's ready notice precedes the payload, and crosses a long link first), in posting order
  per (source, destination, tag); or, `eager` (ringzip's own TCP transport), once its send is
  posted, its receive completing when both the message and the receive are there;
- a long link (`delay_ms`, the emulated link's one-way delay) delays every message between
  machines, and one TCP connection has at most `window_bytes` in flight (sent, its
  acknowledgement a round trip away): the messages between two ranks, over `pool` connections,
  pool x window_bytes, however idle the NICs (window_bytes: what one stream sized as ringzip's
  sockets carries per round trip, measured on the link);
- each send costs the thread that posts it `send_us` first (LogP's o: a system call, a wake-up),
  and each received message costs its receiver `recv_us` before it sees it (o at that end);
- between machines a message takes bytes / rate on the source machine's NIC (egress) and on the
  destination's (ingress), then the latency; it moves in up to 16 chunks: a NIC sends its ready
  messages' chunks in turn (the sockets of one sender share it) and receives chunks in the order
  they reach it (a switch buffers, so a sender is not held up by a busy receiver of another
  message); full duplex, one NIC per machine shared by its ranks; a machine's ranks reach each
  other at the intra-machine rate, per rank;
- a kernel takes its elements at the measured speed of that kernel and codec (the CPU's
  `ringzip-bench kernels --json`, or the H200 record) on one of the machine's cores; where there
  are fewer cores than ranks (the emulated machines of this host share its cores) kernels queue,
  and so do the copies into and out of shared memory that carry messages inside a machine, the
  messages' overheads and, at `net_cpu_ns_per_byte`, the host's network stack's work on every
  byte between machines.

The simulated time of a call is the last rank's finish. Recording at n ranks costs a loopback run
of n threads; a replay may stretch a trace recorded at a smaller size to a larger one (every byte
and element count times the ratio), which keeps the smaller size's pipelining segments. The
replay itself is compiled (csrc/sim/replay.cc): a million events take about a second.
"""
from __future__ import annotations

import json
import statistics
from dataclasses import dataclass, field, replace

import torch

# ---- recording --------------------------------------------------------------------------------

DENSE = ("none", "exact")


def default_feedback(codec: str) -> bool:
    """Error feedback by default (Options.error_feedback None): the biased codecs."""
    return codec == "q1" or codec.startswith(("topk", "randomk"))


def record(world: int, count: int, codec: str = "none", algorithm: str = "ring", nodes: list[int] | None = None,
           feedback: bool | None = None, seed: int = 0, plan: tuple[int, int] | None = None,
           round_trip_s: float = 0.0):
    """Every rank's events of one float32 SUM all-reduce of `count` elements, a ringzip._C.sim.Trace
    (csrc/sim/trace.h; .events(r) lists rank r's as (kind, peer, amount, id, tag, lane)). nodes: the node
    of every rank for the node-aware schedule (None: flat); feedback: error feedback (None: the
    codec's default); plan: SRA's (segment elements, lag) where the call's own plan set them (None:
    the loopback's defaults); round_trip_s: the link's, as the transport reports it (a long link's
    exact SRA runs in segments)."""
    from ringzip import _C

    g = torch.Generator().manual_seed(seed)
    xs = [torch.randn(count, generator=g) for _ in range(world)]
    trace = _C.sim.Trace()
    timeout_ms = 60_000 + 1_000 * world  # 1,024 threads on two cores take minutes
    if codec in DENSE:
        _C.loopback.collective("allreduce", xs, algorithm=algorithm, nodes=nodes, trace=trace, timeout_ms=timeout_ms,
                               round_trip_s=round_trip_s)
        return trace
    if feedback is None:
        feedback = default_feedback(codec)
    residuals = [0.01 * torch.randn(count, generator=g) for _ in range(world)] if feedback else None
    segment_elems, lag = plan or (0, 1)
    _C.loopback.compressed("allreduce", xs, codec, algorithm=algorithm, nodes=nodes, residuals=residuals, trace=trace,
                           timeout_ms=timeout_ms, segment_elems=segment_elems, lag=lag)
    return trace


# ---- the model --------------------------------------------------------------------------------

@dataclass
class Links:
    machine_of: list[int]            # machine of every rank
    net_gbit: float                  # each machine's NIC, per direction
    net_latency_us: float = 50.0
    intra_gbyte: float = 8.0         # between two ranks of one machine, per rank and direction
    intra_latency_us: float = 5.0
    cores: int | None = None         # kernels and in-machine copies of ALL ranks share this many cores (None: one per rank)
    call_us: float = 0.0             # what every call costs beyond its messages and kernels
    send_us: float = 0.0             # what each send costs the thread posting it (LogP's o)
    recv_us: float = 0.0             # what each received message costs before its receiver sees it (o there)
    net_cpu_ns_per_byte: float = 0.0  # CPU a byte between machines costs where cores are counted (a host's TCP stack)
    delay_ms: float = 0.0            # one way, between machines (a long link's propagation)
    window_bytes: float = 0.0        # one connection's bytes in flight (0: no window)
    pool: int = 1                    # connections per peer a message is striped over
    pace_gbit: float = 0.0           # a paced link: one rank's rate to one of another machine (0: unpaced)
    eager: bool = False              # sends leave when posted (ringzip's TCP transport), not on a ready notice

    @classmethod
    def layout(cls, machines: int, per_machine: int, **kw) -> "Links":
        return cls([r // per_machine for r in range(machines * per_machine)], **kw)


@dataclass
class Kernels:
    """Seconds per element (or per byte) of each kernel of one codec on one device."""
    gbps: dict = field(default_factory=dict)  # kernel name -> GB/s of float32 input (copy: of bytes)
    launch_us: float = 0.0                    # fixed cost per kernel (a GPU launch)

    def coefficients(self) -> tuple[dict, dict]:
        """(per_unit, per_input): a kernel of kind k over `amount` with m inputs takes
        amount * (per_unit[k] + m * per_input[k]) + launch seconds (csrc/sim/replay.h)."""
        g = self.gbps
        copy = 1 / (g["copy"] * 1e9)
        unit = {k: copy for k in ("copy", "zero", "reduce", "scale")}  # bytes
        unit.update({k: 4 * copy for k in ("residual", "drop_nonfinite", "randomk_values")})  # elements
        per_input = {}
        if "encode" in g:
            elem = {k: 4 / (g[k] * 1e9) for k in ("encode", "decode_accumulate", "decode_add_encode", "feedback")}
            unit.update(encode=elem["encode"], decode=elem["decode_accumulate"],
                        decode_accumulate=elem["decode_accumulate"], decode_add_encode=elem["decode_add_encode"],
                        decode_residual=elem["decode_accumulate"] + 4 * copy,
                        reduce_encode=elem["encode"] + elem["decode_accumulate"],
                        encode_feedback=elem["feedback"], topk_feedback=elem["feedback"])
            per_input["reduce_encode"] = elem["decode_accumulate"]
        return unit, per_input


def cpu_kernels(rows: list[dict], codec: str, size_bytes: int | None = None, slowdown: float = 1.0,
                launch_us: float = 0.0) -> Kernels:
    """From `ringzip-bench kernels --json` rows: those measured nearest `size_bytes` (the call's
    size: a large call's kernels run out of cache), or the largest; the codec's kernels
    `slowdown` times slower (what they take inside calls, calibrate_kernels); every kernel
    `launch_us` besides (calibrate)."""
    import math

    mine = [r for r in rows if r["codec"] == codec] or rows
    if size_bytes:
        r = min(mine, key=lambda r: abs(math.log(r["bytes"] / size_bytes)))
    else:
        r = max(mine, key=lambda r: r["numel"])
    g = {"copy": r["memcpy_gbps"]}
    if codec not in DENSE:
        g.update(encode=r["encode_gbps"], decode_accumulate=r["decode_acc_gbps"],
                 decode_add_encode=r["decode_add_encode_gbps"], feedback=r.get("feedback_gbps", r["encode_gbps"]))
        g.update({k: v / slowdown for k, v in g.items() if k != "copy"})
    return Kernels(g, launch_us)


def gpu_kernels(record: dict, codec: str, launch_us: float = 4.0) -> Kernels:
    """From the H200 record (bench/results/gpu_kernels_h200.json): its kernels at 64 MiB."""
    g = {"copy": record["copy_gbs"]}
    rows = {(r["kernel"], r["codec"]): r["gbs"] for r in record["rows"]}
    if codec.startswith("topk"):
        t = record["topk"]
        g.update(encode=4 * t["n"] / t["ringzip_encode_s"] / 1e9, feedback=4 * t["n"] / t["ringzip_encode_s"] / 1e9,
                 decode_accumulate=record["copy_gbs"], decode_add_encode=4 * t["n"] / t["ringzip_encode_s"] / 1e9)
    elif codec not in DENSE:
        key = "fp16" if codec in ("fp16", "bf16") and ("encode", codec) not in rows else codec
        g.update(encode=rows[("encode", key)], decode_accumulate=rows[("decode_accumulate", key)],
                 decode_add_encode=rows.get(("decode_add_encode", key), rows[("encode", key)]))
        g["feedback"] = 1 / (1 / g["encode"] + 1 / g["decode_accumulate"])
    return Kernels(g, launch_us)


# ---- the replay -------------------------------------------------------------------------------

def replay(trace, links: Links, kernels: Kernels, scale: float = 1.0) -> dict:
    """Simulated seconds of the recorded call with every byte and element count times `scale`:
    {"time": the last rank's finish, "finish": per rank, "wire_bytes": between machines,
    "compute": the busiest rank's kernel seconds}. RuntimeError when a rank waits for a message
    nobody sends."""
    from ringzip import _C

    unit, per_input = kernels.coefficients()
    res = _C.sim.replay(trace, list(links.machine_of), links.net_gbit * 1e9 / 8, links.net_latency_us * 1e-6,
                        links.intra_gbyte * 1e9, links.intra_latency_us * 1e-6, links.cores or 0, unit, per_input,
                        kernels.launch_us * 1e-6, scale, links.send_us * 1e-6, links.recv_us * 1e-6,
                        links.net_cpu_ns_per_byte * 1e-9, links.delay_ms * 1e-3, links.window_bytes, links.pool,
                        links.eager, links.pace_gbit * 1e9 / 8)
    res["time"] += links.call_us * 1e-6
    return res


def load_json(path: str):
    with open(path) as f:
        return json.load(f)


# ---- one layout, many calls -------------------------------------------------------------------

# Recordings hold every rank's input: beyond this many bytes in all, a call is recorded smaller
# and its trace stretched (replay's scale), keeping the smaller call's segments.
RECORD_BYTES = 256 << 20


def recording_count(world: int, count: int, record_bytes: int = RECORD_BYTES) -> int:
    """Elements to record a call of `count` elements over `world` ranks at: the call itself, or
    the largest multiple of world x 512 (whole buckets in every part) within record_bytes."""
    if world * count * 4 <= record_bytes:
        return count
    unit = world * 512
    return max(unit, record_bytes // (4 * world) // unit * unit)


class Recorder:
    """Traces by (world, count, codec, algorithm, nodes), recorded once; the latest few kept."""

    def __init__(self, record_bytes: int = RECORD_BYTES, keep: int = 4):
        self.record_bytes, self.keep, self.cache = record_bytes, keep, {}

    def trace(self, world, count, codec, algorithm, nodes=None, plan=None, round_trip_s=0.0):
        at = recording_count(world, count, self.record_bytes)
        key = (world, at, codec, algorithm, tuple(nodes) if nodes else None, plan, round_trip_s)
        if key not in self.cache:
            while len(self.cache) >= self.keep:
                self.cache.pop(next(iter(self.cache)))
            self.cache[key] = record(world, at, codec, algorithm, nodes, plan=plan, round_trip_s=round_trip_s)
        return self.cache[key], count / at


def add_arguments(p) -> None:
    p.add_argument("--machines", type=int, default=2, help="emulated machines")
    p.add_argument("--per-machine", type=int, default=1, help="ranks per machine")
    p.add_argument("--net", default="10gbit", help="each machine's NIC rate, e.g. 25gbit")
    p.add_argument("--latency-us", type=float, default=Links.net_latency_us, help="per message between machines")
    p.add_argument("--intra-gbyte", type=float, default=Links.intra_gbyte, help="per rank inside a machine, GB/s")
    p.add_argument("--intra-latency-us", type=float, default=Links.intra_latency_us)
    p.add_argument("--cores", type=int, help="kernels of all ranks share this many cores (default: one per rank)")
    p.add_argument("--delay", default="0", help="a long link's one-way delay between machines, e.g. 50ms (RTT twice it)")
    p.add_argument("--window", default="0", help="one TCP connection's bytes in flight, e.g. 6M (0: no window); "
                                                  "`ringzip-bench collective --net RATE,DELAY` measures it "
                                                  "(tcp_stream_gbit x RTT)")
    p.add_argument("--connections", type=int, default=1, help="connections per peer a message is striped over")
    p.add_argument("--link-gbit", type=float, default=0.0,
                   help="Options.link_gbit: each rank's streams to a rank of another machine paced to its share "
                        "(pace_share x R / (ranks - 1)); 0: unpaced")
    p.add_argument("--transport", choices=("tcp", "gloo"), default="tcp",
                   help="tcp: eager sends (ringzip's own); gloo: a message waits for its receive's notice")
    p.add_argument("-b", "--minbytes", dest="begin", default="1M")
    p.add_argument("-e", "--maxbytes", dest="end", default="64M")
    p.add_argument("-f", "--stepfactor", dest="factor", type=float, default=4.0)
    p.add_argument("--codec", default="none,q8,q4", help="comma list")
    p.add_argument("--algorithm", default="auto", help="comma list: ring, sra, sparse, rd, hd, tree, direct, star")
    p.add_argument("--hierarchy", default="flat", help="comma list: flat, node")
    p.add_argument("--kernels", help="kernel speeds: `ringzip-bench kernels --json` output (default: measured now)")
    p.add_argument("--gpu", help="kernel speeds of a GPU record instead, e.g. bench/results/gpu_kernels_h200.json")
    p.add_argument("--json", help="write the rows here")


def _kernels_for(args):
    if args.gpu:
        rec = load_json(args.gpu)
        return lambda codec, size: gpu_kernels(rec, codec)
    if args.kernels:
        rows = load_json(args.kernels)
    else:
        from .kernels import run_kernel_bench
        rows = run_kernel_bench([1 << 20, 16 << 20, 64 << 20],
                                ["fp16", "bf16", "q8", "q4", "q2", "q1", "topk:0.01", "randomk:0.01"], reference=False)
    return lambda codec, size: cpu_kernels(rows, codec, size)


DENSE_ALGORITHMS = ("auto", "ring", "rd", "hd", "tree", "direct", "star", "sra")


def applies(codec: str, algorithm: str) -> bool:
    """Whether the loopback runs `algorithm` for `codec` (exact: the dense ones; sparse codecs:
    sparse; the others: ring and sra)."""
    if codec in DENSE:
        return algorithm in DENSE_ALGORITHMS
    if codec.startswith(("topk", "randomk")):
        return algorithm in ("auto", "sparse")
    return algorithm in ("auto", "ring", "sra")


def run(args) -> int:
    from .common import parse_delay_s, parse_rate_bits, parse_size, size_sweep, split_list

    world = args.machines * args.per_machine
    node_of = [r // args.per_machine for r in range(world)]
    if args.connections < 1:
        raise SystemExit("--connections must be at least 1")
    links = Links(node_of, parse_rate_bits(args.net) / 1e9, args.latency_us, args.intra_gbyte,
                  args.intra_latency_us, args.cores, delay_ms=parse_delay_s(args.delay) * 1e3,
                  window_bytes=float(parse_size(args.window)), pool=args.connections,
                  eager=args.transport == "tcp", pace_gbit=_pace_share(args.link_gbit, world))
    kernels = _kernels_for(args)
    rec = Recorder()
    rows = []
    far = (f", one-way delay {args.delay}, window {args.window} x {args.connections} connection(s)"
           if links.delay_ms else "") + (f", paced to {links.pace_gbit:.3g} Gbit/s per peer" if links.pace_gbit else "")
    print(f"# simulated all-reduce, {args.machines} machines x {args.per_machine} ranks, NIC {args.net}, "
          f"{args.latency_us:g} us per message{far}, {args.transport} transport; inside a machine "
          f"{args.intra_gbyte:g} GB/s")
    print("| size | codec | algorithm | hierarchy | time ms | busbw GB/s | between machines MB |")
    print("|---:|---|---|---|---:|---:|---:|")
    for size in size_sweep(parse_size(args.begin), parse_size(args.end), args.factor):
        count = max(1, size // 4)
        for codec in split_list(args.codec):
            for algo in split_list(args.algorithm):
                for h in split_list(args.hierarchy):
                    if h == "node" and args.per_machine < 2 or not applies(codec, algo):
                        continue
                    tr, scale = rec.trace(world, count, codec, algo, node_of if h == "node" else None,
                                          round_trip_s=2 * links.delay_ms * 1e-3)
                    res = replay(tr, links, kernels(codec, 4 * count), scale)
                    busbw = 2 * (world - 1) / world * 4 * count / res["time"] / 1e9
                    rows.append({"size_bytes": 4 * count, "codec": codec, "algorithm": algo, "hierarchy": h,
                                 "time_s": res["time"], "busbw_gbyte": busbw, "wire_bytes": res["wire_bytes"]})
                    print(f"| {4 * count} | {codec} | {algo} | {h} | {res['time'] * 1e3:.3f} | {busbw:.2f} | "
                          f"{res['wire_bytes'] / 1e6:.1f} |", flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"links": {k: v for k, v in links.__dict__.items() if k != "machine_of"},
                       "machines": args.machines, "per_machine": args.per_machine, "rows": rows}, f, indent=1)
    return 0


# ---- validation against measured rows ---------------------------------------------------------

def _topology(header: dict, row: dict) -> dict:
    return header.get("topology", {}).get(row.get("key") or "", {}) or {}


def simulate_row(header: dict, row: dict, kernel_rows: list[dict], recorder: Recorder, slowdown: float = 1.0,
                 launch_us: float = 0.0, **link_kw) -> dict:
    """The replay of one measured `ringzip-bench collective` row, on the links its header names;
    every kernel costs launch_us besides its elements."""
    topo = _topology(header, row)
    per = header.get("nproc_per_node") or 1
    node_of = topo.get("node_of") or [r // per for r in range(row["nproc"])]
    node_aware = topo.get("node_aware", row.get("hierarchy") == "node")
    trace, scale = recorder.trace(row["nproc"], row["count"], row["codec"], row["algorithm"],
                                  list(node_of) if node_aware else None, sra_plan(row),
                                  2 * (header.get("delay_ms") or 0.0) * 1e-3)
    links = Links(node_of, header.get("tcp_goodput_gbit") or header["link_gbit"],
                  eager=topo.get("transport") == "tcp", **link_kw)
    if header.get("delay_ms"):
        links = long_link(header, links)
    return replay(trace, links, cpu_kernels(kernel_rows, row["codec"], row["size_bytes"], slowdown, launch_us), scale)


def sra_plan(row: dict) -> tuple[int, int] | None:
    """SRA's (segment elements, lag) as the measured call's plan set them from the group's agreed
    figures (the row's model_params): on a long link its reductions run several segments behind
    its sends, which the loopback's defaults (lag 1) would not record. None where the row has no
    figures (the defaults then: what the plan sets without a long delay)."""
    mp = row.get("model_params")
    if not mp or row["codec"] in DENSE or row["algorithm"] != "sra" or row["codec"].startswith(("topk", "randomk")):
        return None
    from ringzip import _C

    sp = mp["codecs"].get(row["codec"]) or {}
    scale = mp.get("codec_scale") or 1.0
    speed = tuple(scale / (sp[k] * 1e9) if sp.get(k) else 1 / 2e9
                  for k in ("encode_gbyte_s", "decode_gbyte_s", "feedback_gbyte_s"))
    args = (row["codec"], row["size_bytes"], row["nproc"], mp["alpha_s"], 8 / (mp["link_gbit"] * 1e9), speed)
    window = mp.get("window_gbit") or 0.0  # the transport's window term: alpha is the one-way delay then
    return _C.cost.sra_segment_elems(*args), _C.cost.sra_lag(*args, inv_window=8 / (window * 1e9) if window else 0.0)


# TCP's payload in the bytes of a full-sized packet at MTU 1500 (IP and TCP headers with
# timestamps: 52 bytes): a link's rate, in goodput.
TCP_PAYLOAD_SHARE = 1448 / 1500


def long_link(header: dict, links: Links) -> Links:
    """The links of a sweep over a link with a round trip (`--net RATE,DELAY`): the NICs at the
    link's rate in TCP payload (the sweep's goodput probe, window-bound there, does not measure
    it), the delay, one connection's window from the sweep's single-stream probe (its rate after
    slow start times the round trip) and the pool the sweep asked for."""
    delay_s = header["delay_ms"] * 1e-3
    stream = header.get("tcp_stream_gbit")
    window = stream * 1e9 / 8 * 2 * (delay_s + links.net_latency_us * 1e-6) if stream else 0.0
    return replace(links, net_gbit=header["link_gbit"] * TCP_PAYLOAD_SHARE, delay_ms=header["delay_ms"],
                               window_bytes=window, pool=_connections(header),
                               pace_gbit=_pace_gbit(header, len(links.machine_of)))


def _pace_gbit(header: dict, ranks: int) -> float:
    """What one rank's streams to a peer were paced to: Options.link_gbit of the sweep's command
    (--ropt link_gbit=R), the share of it the transport paces each of its ranks - 1 peers to; 0
    unpaced."""
    return _pace_share(float(_ropt(header).get("link_gbit", 0)), ranks)


def _ropt(header: dict) -> dict:
    """The ringzip.Options the sweep's command gave (--ropt KEY=VALUE), as text."""
    from .common import parse_key_values

    argv = header.get("argv") or []
    return parse_key_values([value for flag, value in zip(argv, argv[1:]) if flag == "--ropt"])


def _pace_share(link_gbit: float, ranks: int) -> float:
    """One rank's paced rate to each of its peers, Gbit/s, as the TCP transport sets it."""
    from ringzip import _C

    return _C.pace_share * link_gbit / (ranks - 1) if link_gbit > 0 and ranks > 1 else 0.0


def _connections(header: dict) -> int:
    """The connections per peer the sweep's ranks got (its topology's, where the build records
    them: the most to any peer), else Options(connections=...) of its command (--ropt
    KEY=VALUE; 0: two where the round trip is 5 ms or more, as each pair of ranks chose before the
    pool was sized by the link's rate), else 1
    (the default, and what the builds that did not record them had)."""
    got = [c for topo in (header.get("topology") or {}).values() for c in topo.get("connections") or []]
    if got:
        return max(got)
    asked = int(_ropt(header).get("connections", 1))
    return asked or (2 if 2 * header.get("delay_ms", 0.0) >= 5.0 else 1)


def _median(xs):
    return statistics.median(xs) if xs else float("nan")


# What a message may cost the thread that sends it and the one that receives it (LogP's o, at
# each end) on the emulated machines: wake-ups and system calls of ranks that share two cores
# with the TCP stack and the shaper; the latency between machines; what a kernel costs besides
# its elements (a dispatch, scratch buffers: compressed calls run a few per peer and segment).
OVERHEAD_GRID_US = (0, 25, 50, 75, 100, 150, 200)
LATENCY_GRID_US = (0, 25, 50, 75, 100, 150, 250)
LAUNCH_GRID_US = (0, 10, 25, 50, 100)


def calibrate(rows: list[tuple[dict, dict]], kernel_rows: list[dict], slowdown: float = 1.0,
              overhead_grid=OVERHEAD_GRID_US, latency_grid=LATENCY_GRID_US, launch_grid=LAUNCH_GRID_US,
              **link_kw) -> dict:
    """The per-message latency between machines, a message's cost to the threads at its two ends,
    a kernel's fixed cost and the per-call cost that fit the measured calls best (median relative
    error): latency, overhead (the same at both ends) and kernel cost on their grids, the call cost
    for each the median of what the replay leaves unexplained."""
    if not rows:
        return {}
    # The calibration calls are small: every recording kept, each made once for all the grid.
    recorder, base = Recorder(record_bytes=1 << 62, keep=len(rows)), []
    for header, row in rows:
        base.append((header, dict(row, key=_key(row)), row["time_us"]))
    best = None
    for o in overhead_grid:
        for lat in latency_grid:
            for launch in launch_grid:
                kw = dict(link_kw, net_latency_us=lat, send_us=o, recv_us=o)
                sims = [simulate_row(h, r, kernel_rows, recorder, slowdown, launch, **kw)["time"] * 1e6
                        for h, r, _ in base]
                call = max(0.0, _median([m - s for (_, _, m), s in zip(base, sims)]))
                err = _median([abs((s + call) / m - 1) for (_, _, m), s in zip(base, sims)])
                if best is None or err < best[0]:
                    best = (err, lat, o, launch, call)
    return {"net_latency_us": float(best[1]), "send_us": float(best[2]), "recv_us": float(best[2]),
            "launch_us": float(best[3]), "call_us": round(best[4], 1), "median_error": best[0], "rows": len(base)}


def calibrate_kernels(rows: list[tuple[dict, dict]], kernel_rows: list[dict], **link_kw) -> float:
    """How much slower the codec kernels run inside calls than alone: the calls' own codec timers
    (codec_share of the measured time) over the replay's kernel seconds of the busiest rank, in
    the median of compressed calls with a core per rank (where a timer does not also count the
    time its thread waited for a core)."""
    recorder, ratios = Recorder(record_bytes=1 << 62, keep=1), []
    for header, row in rows:
        if row["codec"] in DENSE or not row.get("codec_share"):
            continue
        sim = simulate_row(header, dict(row, key=_key(row)), kernel_rows, recorder, **link_kw)
        if sim["compute"] > 0:
            ratios.append(row["codec_share"] * row["time_us"] * 1e-6 / sim["compute"])
    return _median(ratios) if ratios else 1.0


def _key(row):
    return f"ringzip/{row['codec']}/{row['algorithm']}" + (f"/{row['hierarchy']}" if row.get("hierarchy") else "")


def _ran_flat(header: dict, row: dict) -> bool:
    """A node-aware row with one rank per machine: the backend ran it flat, a repeat of the flat row."""
    return row.get("hierarchy") == "node" and not _topology(header, dict(row, key=_key(row))).get("node_aware", True)


def validate(rows: list[tuple[dict, dict]], kernel_rows: list[dict], slowdown: float = 1.0, launch_us: float = 0.0,
             **link_kw) -> dict:
    out, recorder = [], Recorder(record_bytes=1 << 62, keep=1)  # at the measured size; large at 64 MiB
    order = sorted(rows, key=lambda hr: (hr[1]["nproc"], hr[1]["count"], hr[1]["codec"], hr[1]["algorithm"],
                                         str(hr[1].get("hierarchy"))))
    repeats = {(id(h), r["count"], r["codec"], r["algorithm"]): r["time_us"] * 1e-3 for h, r in rows if _ran_flat(h, r)}
    for header, row in order:
        if _ran_flat(header, row):
            continue
        row = dict(row, key=_key(row))
        sim = simulate_row(header, row, kernel_rows, recorder, slowdown, launch_us, **link_kw)
        measured = row["time_us"] * 1e-6
        out.append({"layout": f"{header.get('nodes') or row['nproc']}x{header.get('nproc_per_node') or 1}",
                    "link_gbit": header["link_gbit"], "rtt_ms": 2 * (header.get("delay_ms") or 0),
                    "connections": _connections(header),
                    "size_bytes": row["size_bytes"], "codec": row["codec"],
                    "algorithm": row["algorithm"], "hierarchy": row.get("hierarchy") or "flat",
                    "measured_ms": measured * 1e3, "simulated_ms": sim["time"] * 1e3,
                    "error": sim["time"] / measured - 1, "sim_compute_ms": sim["compute"] * 1e3,
                    "repeat_ms": repeats.get((id(header), row["count"], row["codec"], row["algorithm"]))})
    errs = [abs(r["error"]) for r in out]
    return {"median_error": _median(errs), "worst_error": max(errs) if errs else float("nan"),
            "repeats": repeat_floor(out), "rows": out}


def repeat_floor(rows: list[dict]) -> dict:
    """What the measurement's own noise costs any prediction: a call measured twice in one sweep at
    a and b ms is predicted within |a - b| / (a + b) at best (the prediction between them), so the
    worst of those over the repeated rows bounds the worst error from below."""
    floors = [abs(a - b) / (a + b) for a, b in ((r["measured_ms"], r["repeat_ms"]) for r in rows if r.get("repeat_ms"))]
    if not floors:
        return {}
    return {"pairs": len(floors), "median": _median(floors), "worst": max(floors),
            "over_25_percent": sum(f > 0.25 for f in floors), "over_10_percent": sum(f > 0.10 for f in floors)}


def validation_summary(v: dict) -> str:
    """Median and worst |error| by codec, size, link and layout."""
    lines = ["| rows | n | median abs error | worst | median signed error |", "|---|---:|---:|---:|---:|"]
    for name, key in (("codec", lambda r: r["codec"]), ("size", lambda r: f"{r['size_bytes'] >> 20} MiB"),
                      ("link", _link_name),
                      ("layout", lambda r: f"{r['layout']} {r['hierarchy']}")):
        groups: dict = {}
        for r in v["rows"]:
            groups.setdefault(key(r), []).append(r["error"])
        for k, e in groups.items():
            lines.append(f"| {name} {k} | {len(e)} | {100 * _median([abs(x) for x in e]):.0f} % | "
                         f"{100 * max(abs(x) for x in e):.0f} % | {100 * _median(e):+.0f} % |")
    return "\n".join(lines)


def _link_name(r: dict) -> str:
    return (f"{r['link_gbit']:g} Gbit/s" + (f", RTT {r['rtt_ms']:g} ms" if r.get("rtt_ms") else "") +
            (f", {r['connections']} connections" if r.get("connections", 1) > 1 else ""))


def validation_table(v: dict) -> str:
    lines = ["| layout | link | size | codec | algorithm | hierarchy | measured ms | simulated ms | error |",
             "|---|---:|---:|---|---|---|---:|---:|---:|"]
    for r in v["rows"]:
        lines.append(f"| {r['layout']} | {_link_name(r)} | {r['size_bytes'] >> 20} MiB | {r['codec']} | "
                     f"{r['algorithm']} | {r['hierarchy']} | {r['measured_ms']:.1f} | {r['simulated_ms']:.1f} | "
                     f"{100 * r['error']:+.0f} % |")
    return "\n".join(lines)


def validate_main(rows, kernels_path: str, json_path: str | None, table_path: str | None, command: str,
                  calibration_bytes: int = 1 << 20, **link_kw) -> dict:
    import datetime

    import os

    from .common import cpu_model, simd_level

    kernel_rows = load_json(kernels_path)
    kernel_rows = kernel_rows["results"] if isinstance(kernel_rows, dict) else kernel_rows
    # Calibration: the codec kernels' speed inside calls from the calls' own codec timers where
    # each rank has a core (not their times; the replay's kernel seconds do not depend on the
    # links); then, on the calls below the validated sizes, the message latency, a message's cost
    # at each end, a kernel's fixed cost and the call cost. Every call from calibration_bytes up is
    # predicted.
    cal = [(h, r) for h, r in rows if r["size_bytes"] < calibration_bytes]
    cores = link_kw.get("cores") or 0
    # What a byte between the emulated machines costs the host's cores: the median of the sweeps'
    # goodput probes (each counts whole jiffies of a 1.5 s stream).
    probes = [h["tcp_cpu_ns_per_byte"] for h in {id(h): h for h, _ in rows}.values() if h.get("tcp_cpu_ns_per_byte")]
    if cores and probes:
        link_kw.setdefault("net_cpu_ns_per_byte", round(_median(probes), 3))
    slowdown = round(calibrate_kernels([(h, r) for h, r in rows if r["nproc"] <= cores], kernel_rows, **link_kw), 2)
    fit = calibrate(cal, kernel_rows, slowdown, **link_kw)
    link_kw.update({k: fit[k] for k in ("net_latency_us", "send_us", "recv_us", "call_us") if k in fit})
    fit["kernel_slowdown"] = slowdown
    print(f"calibrated on {fit.get('rows', 0)} calls below {calibration_bytes} B: {fit}")
    v = validate([(h, r) for h, r in rows if r["size_bytes"] >= calibration_bytes], kernel_rows, slowdown,
                 fit.get("launch_us", 0.0), **link_kw)
    v["calibration"] = fit
    head = {"date": datetime.datetime.now().strftime("%Y-%m-%d %H:%M"),
            "cpu": f"{cpu_model()}, {os.cpu_count()} cores, {simd_level()}", "command": command,
            "links": {k: v_ for k, v_ in Links([0], 1.0, **link_kw).__dict__.items() if k not in ("machine_of", "net_gbit")},
            "measured": sorted({h.get("date", "") for h, _ in rows})}
    summary = (f"{len(v['rows'])} rows: median |error| {100 * v['median_error']:.1f} %, "
               f"worst {100 * v['worst_error']:.1f} %")
    if v["repeats"]:
        rp = v["repeats"]
        summary += (f"; {rp['pairs']} calls measured twice put the best any prediction can do at worst "
                    f"{100 * rp['worst']:.0f} % ({rp['over_25_percent']} pairs above 25 %, median {100 * rp['median']:.1f} %)")
    print(summary)
    if json_path:
        with open(json_path, "w") as f:
            json.dump({"header": head, "validation": v}, f, indent=1)
    if table_path:
        with open(table_path, "w") as f:
            f.write(f"# The simulator against measurement\n\n{head['date']}, {head['cpu']}, `{command}`; "
                    f"measured {', '.join(head['measured'])}\n\n{summary}; calibrated: {fit}\n\n"
                    f"{validation_summary(v)}\n\n{validation_table(v)}\n")
    return v
