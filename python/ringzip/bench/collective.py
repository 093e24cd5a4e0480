"""`ringzip-bench collective`: nccl-tests-style sweeps over backends x codecs x algorithms."""
from __future__ import annotations

import json
import shlex
import tempfile
import time
from pathlib import Path

from . import report
from .common import (NetSpec, cpu_model, fmt_bytes, fmt_rate, header_lines, log, parse_key_values, parse_net,
                     parse_rate_bits, parse_size, results_dir, size_sweep, split_list, versions)
from .launch import Launcher, log_tail
from .ops import DTYPES, OPS, canonical_dtype, element_count, redop
from .plan import build_plan, configs

PRESETS = {
    # finishes in ~2 minutes on a 2-core machine (4 ranks, loopback)
    "default": dict(op="allreduce", nproc=4, begin="4", end="64M", factor=4.0, dtype="float32",
                    backend="ringzip,gloo", codec="none,q8,q4,q2,q1,topk:0.01", algorithm="auto",
                    iters=20, warmup=3, time_budget=0.8, repeat=3),
    # the several-machines table: 2 emulated nodes x 2 ranks, one 1 Gbit/s NIC per node, 64 MiB, gloo and
    # ringzip flat vs node-aware; other layouts: --nproc-per-node 3, or --nodes 4 --nproc-per-node 1
    "multinode": dict(op="allreduce", nodes=2, nproc_per_node=2, net="1gbit", begin="64M", end="64M",
                      factor=4.0, dtype="float32", backend="ringzip,gloo", codec="none,q8,q4,topk:0.01",
                      algorithm="auto", hierarchy="flat,node", iters=20, warmup=3, time_budget=0.8, repeat=3),
}
DEFAULTS = dict(op="allreduce", nproc=4, begin="4", end="64M", factor=4.0, dtype="float32",
                backend="ringzip,gloo", codec="none,q8,q4,q2,q1,topk:0.01", algorithm="auto",
                iters=20, warmup=5, time_budget=1.0, repeat=1,
                nodes=None, nproc_per_node=None, hierarchy=None, net=None)


def add_arguments(p) -> None:
    p.add_argument("--preset", choices=sorted(PRESETS),
                   help="named sweep that also writes .md/.txt/.json/.png under --out-dir "
                        "(running ringzip-bench with no arguments means --preset default)")
    p.add_argument("--op", choices=OPS, help="collective (default allreduce)")
    p.add_argument("-n", "--nproc", type=int, help="local ranks to launch (default 4)")
    p.add_argument("-b", "--minbytes", dest="begin", help="smallest size, e.g. 4, 1K (default 4)")
    p.add_argument("-e", "--maxbytes", dest="end", help="largest size, e.g. 64M (default 64M)")
    p.add_argument("-f", "--stepfactor", dest="factor", type=float, help="size multiplication factor (default 4)")
    p.add_argument("--iters", type=int, help="timed iterations per row, upper bound (default 20)")
    p.add_argument("--warmup", type=int, help="warm-up iterations, upper bound (default 5)")
    p.add_argument("--min-iters", type=int, default=3, help="lower bound when iterations adapt (default 3)")
    p.add_argument("--time-budget", type=float,
                   help="seconds per row that size the iteration count (big sizes run fewer); 0 = fixed --iters")
    p.add_argument("--dtype", help="float32 (default), float16, bfloat16, float64, int32")
    p.add_argument("--backend", help="comma list, side by side in one run (default ringzip,gloo)")
    p.add_argument("--codec", help="ringzip codecs, comma list (default none,q8,q4,q2,q1,topk:0.01)")
    p.add_argument("--algorithm", help="ringzip algorithms, comma list (default auto)")
    p.add_argument("--ropt", action="append", default=[], metavar="KEY=VALUE",
                   help="extra ringzip.Options field for every ringzip row, e.g. min_numel=0 (repeatable)")
    p.add_argument("--seed", type=int, default=0, help="input seed (default 0)")
    p.add_argument("--net", help="emulated link RATE[,DELAY[,LOSS]][,LINK], e.g. 1gbit, 10gbit,0.2ms or 1gbit,50ms,0.1%% (needs root; a delay or loss runs on the user-space link, LINK tun, unless LINK is tbf)")
    p.add_argument("--nodes", type=int,
                   help="emulate N machines (root): one network namespace per node whose one NIC, shaped by "
                        "--net, its ranks share; ranks of a node talk over its loopback, unshaped")
    p.add_argument("--nproc-per-node", type=int, help="ranks per emulated node (default: -n / --nodes)")
    p.add_argument("--hierarchy",
                   help="ringzip hierarchy options, comma list, each a row per codec: flat, node, auto "
                        "(default with --nodes: flat,node; otherwise the Options default)")
    p.add_argument("--link", help="link rate B for floor/efficiency without --net, e.g. 25gbit")
    p.add_argument("--json", help="write one JSON record per row here")
    p.add_argument("--plot", help="write a PNG plot (time and busbw vs size) here")
    p.add_argument("--table", help="write the table here (.md gives markdown, anything else text)")
    p.add_argument("--out-dir", help="where --preset writes (default <repo>/bench/results)")
    p.add_argument("--row-timeout", type=float, default=180.0,
                   help="kill the ranks when one row makes no progress this long (default 180 s)")
    p.add_argument("--threads", type=int, default=1, help="torch intra-op threads per rank (default 1)")
    p.add_argument("--repeat", type=int,
                   help="run each size's configurations in turn this many times and report the median "
                        "repetition (for noisy machines; default 1, the default preset 3)")


def _resolve(args) -> dict:
    base = {**DEFAULTS, **PRESETS[args.preset]} if args.preset else dict(DEFAULTS)
    for k in base:
        v = getattr(args, k, None)
        if v is not None:
            base[k] = v
    return base


def _layout(opt: dict, nproc_arg: int | None) -> tuple[int, int | None, int | None]:
    """(world size, nodes, ranks per node); nodes None: no emulated nodes (as before --nodes)."""
    nodes, per = opt["nodes"], opt["nproc_per_node"]
    if not nodes:
        if per:
            raise SystemExit("--nproc-per-node needs --nodes")
        return int(opt["nproc"]), None, None
    if nodes < 1:
        raise SystemExit("--nodes must be >= 1")
    if not per:
        n = nproc_arg or int(opt["nproc"])
        if n % nodes:
            raise SystemExit(f"-n {n} does not split into {nodes} nodes; give --nproc-per-node")
        per = n // nodes
    if per < 1:
        raise SystemExit("--nproc-per-node must be >= 1")
    if nproc_arg is not None and nproc_arg != nodes * per:
        raise SystemExit(f"-n {nproc_arg} disagrees with --nodes {nodes} x --nproc-per-node {per}")
    return nodes * per, nodes, per


def _error_row(spec, item, n, msg) -> dict:
    import torch

    elem = torch.empty(0, dtype=DTYPES[spec["dtype"]]).element_size()
    count = element_count(spec["op"], item["size"], elem, n)
    cfg = item["cfg"]
    return {"op": spec["op"], "size_bytes": count * elem, "count": count, "dtype": spec["dtype"],
            "redop": redop(spec["op"]), "backend": cfg["backend"], "codec": cfg["codec"],
            "algorithm": cfg["algorithm"], "hierarchy": cfg.get("hierarchy"), "nproc": n, "iters": 0, "time_us": None,
            "algbw_gbps": None, "busbw_gbps": None, "ratio": None, "wire_busbw_gbps": None,
            "speedup_vs_gloo": None, "max_abs_err": None, "rel_l2_err": None, "ranks_agree": None,
            "link_gbit": spec.get("link_gbit"), "floor_us": None, "efficiency": None, "error": msg}


def sweep(spec: dict, nproc: int, net, workdir: Path, row_timeout: float, quiet: bool = False,
          topology: dict | None = None) -> list[dict]:
    """Run the plan, restarting after a row that crashes or hangs the ranks. `topology` (if
    given) collects the layout ringzip reports per group: {json of the layout: [config keys]}."""
    plan = build_plan(spec)
    rows: dict[int, dict] = {}
    skip: set[int] = set()
    fails_per_cfg: dict[str, int] = {}
    start, launch_no, t_start = 0, 0, time.monotonic()

    def on_event(ev):
        if ev.get("event") == "topology" and topology is not None:
            keys = topology.setdefault(json.dumps(ev["topology"], sort_keys=True), [])
            if ev["key"] not in keys:  # a relaunch after a failed row reports it again
                keys.append(ev["key"])
        if ev.get("event") == "row" and not quiet:
            r = ev["row"]
            t = f"{r['time_us']:.1f} us" if r.get("time_us") else f"ERROR {str(r.get('error'))[:80]}"
            hier = f" {r['hierarchy']}" if r.get("hierarchy") else ""
            log(f"[{ev['index'] + 1}/{len(plan)} {time.monotonic() - t_start:6.1f}s] "
                f"{fmt_bytes(r['size_bytes']):>6} {r['backend']} {r['codec']} {r['algorithm']}{hier}: {t}")

    while start < len(plan):
        launch_no += 1
        spec_run = dict(spec, start=start, skip=sorted(skip), events=str(workdir / f"events{launch_no}.jsonl"))
        spec_path = workdir / f"spec{launch_no}.json"
        spec_path.write_text(json.dumps(spec_run))
        res = Launcher(nproc, workdir, net, spec.get("threads", 1)).run(
            "ringzip.bench.worker", [str(spec_path)], Path(spec_run["events"]), row_timeout, on_event)
        begun = []
        for ev in res.events:
            if ev.get("event") == "row":
                rows[ev["index"]] = ev["row"]
            elif ev.get("event") == "begin":
                begun.append(ev["index"])
        if res.ok:
            break
        pending = [i for i in begun if i not in rows]
        tail = log_tail(res.logs, 4)
        if not pending:  # died before any row: rendezvous/import problem, no point retrying
            log(f"[ringzip-bench] ranks failed before the first row: {res.reason}\n{tail}")
            for i in range(start, len(plan)):
                if i not in skip and i not in rows:
                    rows[i] = _error_row(spec, plan[i], nproc, f"launch failed: {res.reason}")
            break
        bad = pending[-1]
        key = plan[bad]["cfg"]["key"]
        log(f"[ringzip-bench] row {bad + 1} ({key}, {fmt_bytes(plan[bad]['size'])}) failed: {res.reason}\n{tail}")
        rows[bad] = _error_row(spec, plan[bad], nproc, f"{res.reason}")
        fails_per_cfg[key] = fails_per_cfg.get(key, 0) + 1
        if fails_per_cfg[key] >= 2:  # stop paying for a configuration that keeps crashing/hanging
            for i in range(bad + 1, len(plan)):
                if plan[i]["cfg"]["key"] == key and i not in skip:
                    skip.add(i)
                    rows[i] = _error_row(spec, plan[i], nproc, f"skipped: {key} failed twice ({res.reason})")
        start = bad + 1
    return [rows[i] for i in sorted(rows)]


def run(args) -> int:
    opt = _resolve(args)
    n, nodes, per_node = _layout(opt, args.nproc)
    if n < 1:
        raise SystemExit("--nproc must be >= 1")
    net_arg = opt["net"]
    hierarchies = split_list(opt["hierarchy"]) or (["flat", "node"] if nodes else [])
    dtype = canonical_dtype(opt["dtype"])
    sizes = size_sweep(parse_size(opt["begin"]), parse_size(opt["end"]), float(opt["factor"]))
    backends = split_list(opt["backend"])
    if not backends:
        raise SystemExit("--backend is empty")
    cfgs = configs(backends, split_list(opt["codec"]) or ["none"], split_list(opt["algorithm"]) or ["auto"],
                   hierarchies)
    cfgs.sort(key=lambda c: c["backend"] != "gloo")  # gloo first: the reference row of each size
    net = parse_net(net_arg) if net_arg else NetSpec(None)
    rate_bits = net.rate
    if args.link and not rate_bits:
        rate_bits = parse_rate_bits(args.link)
    spec = {"op": opt["op"], "dtype": dtype, "sizes": sizes, "configs": cfgs, "seed": args.seed,
            "iters": int(opt["iters"]), "warmup": int(opt["warmup"]), "min_iters": args.min_iters,
            "time_budget_s": float(opt["time_budget"]) or None, "threads": args.threads,
            "ringzip_options": parse_key_values(args.ropt), "timeout_s": max(60.0, args.row_timeout),
            "repeat": max(1, int(opt["repeat"])), "nodes": nodes,
            "link_gbit": rate_bits / 1e9 if rate_bits else None, "delay_s": net.delay}
    link_desc = fmt_rate(rate_bits) if not net_arg else f"--net {net_arg}"
    extra = {"command": "ringzip-bench " + shlex.join(getattr(args, "argv", None) or []),
             **({"machines": f"{nodes} emulated nodes x {per_node} ranks: a network namespace and one NIC per node, "
                          "shared by its ranks; inside a node unshaped (ringzip: shared memory; gloo: loopback TCP)"} if nodes else {}),
             "op": f"{opt['op']}  dtype {dtype}  sizes {fmt_bytes(sizes[0])}..{fmt_bytes(sizes[-1])} x{opt['factor']:g}",
             "configs": ", ".join(c["key"] for c in cfgs),
             "iterations": f"<= {opt['iters']} (budget {opt['time_budget']} s/row, min {args.min_iters}), "
                           f"warm-up <= {opt['warmup']}, seed {args.seed}, repeat {opt['repeat']}"}
    header = {"versions": versions(), "cpu": cpu_model(), "nproc": n, "nodes": nodes,
              "nproc_per_node": per_node, "link": link_desc,
              "link_gbit": spec["link_gbit"], "date": time.strftime("%Y-%m-%d %H:%M:%S"),
              "preset": args.preset, "argv": getattr(args, "argv", None), **extra}

    out_dir = results_dir(args.out_dir)
    stem = None
    if args.preset:
        tag = "loopback" if not net_arg else "net-" + net_arg.replace(",", "-")
        layout = f"{nodes}x{per_node}" if nodes else f"n{n}"
        stem = out_dir / f"{args.preset}_{opt['op']}_{layout}_{tag}"
    json_path = Path(args.json) if args.json else (stem.with_suffix(".json") if stem else None)
    plot_path = Path(args.plot) if args.plot else (stem.with_suffix(".png") if stem else None)
    table_paths = [Path(args.table)] if args.table else ([stem.with_suffix(".md"), stem.with_suffix(".txt")] if stem else [])

    net_ctx = None
    if net_arg or nodes:  # --nodes without --net: the namespaces, unshaped
        from .netem import open_env

        net_ctx = open_env(n, net, log=log, ranks_per_node=per_node or 1)

    rows: list[dict] = []
    status = 0
    hdr_lines = None
    topology: dict[str, list[str]] = {}
    try:
        with tempfile.TemporaryDirectory(prefix="ringzip-bench-") as tmp:
            if net_ctx is not None:
                net_ctx.__enter__()
            try:
                if net_ctx is not None and net_ctx.nnodes >= 2:
                    # a long link holds one connection to its send buffer per round trip: the
                    # link's own goodput takes several, for longer (slow start)
                    long_link = net_ctx.delay_s > 0
                    gp = net_ctx.measure_goodput(seconds=3.0 if long_link else 1.5, streams=8 if long_link else 1)
                    header["tcp_goodput_gbit"] = gp / 1e9
                    header["tcp_cpu_ns_per_byte"] = net_ctx.cpu_ns_per_byte  # what the simulator charges shared cores
                    link_desc += f" ({net_ctx.describe()}; measured TCP goodput {gp / 1e9:.3f} Gbit/s"
                    if long_link:  # what one connection's window allows at this round trip, after its slow start
                        net_ctx.measure_goodput(seconds=4.0, streams=1)
                        header["delay_ms"] = net_ctx.delay_s * 1e3
                        header["tcp_stream_gbit"] = net_ctx.late_bits_per_s / 1e9
                        link_desc += f", one connection {header['tcp_stream_gbit']:.3f}"
                    link_desc += ")"
                    header["link"] = link_desc
                hdr_lines = header_lines(n, link_desc, extra)
                print("\n".join(hdr_lines), flush=True)
                rows = sweep(spec, n, net_ctx, Path(tmp), args.row_timeout, quiet=args.quiet, topology=topology)
            finally:
                if net_ctx is not None:
                    net_ctx.__exit__(None, None, None)
    except KeyboardInterrupt:
        log("[ringzip-bench] interrupted; writing what was measured")
        status = 130
    rows = report.median_of_repeats(rows)
    report.add_speedups(rows)
    if hdr_lines is None:
        hdr_lines = header_lines(n, link_desc, extra)
    # the layout ringzip chose, as its stats() report it (builds without it report nothing)
    topo_lines = [f"# topology {', '.join(keys)}: {layout}" for layout, keys in topology.items()]
    header["topology"] = {k: json.loads(layout) for layout, keys in topology.items() for k in keys}
    hdr_lines = hdr_lines + topo_lines
    if topo_lines:
        print("\n".join(topo_lines))
    table = report.text_table(rows)
    print("\n".join(report.legend(rows)))
    print(table, flush=True)
    for p in table_paths:
        p.parent.mkdir(parents=True, exist_ok=True)
        body = report.markdown_table(rows) if p.suffix == ".md" else table
        legend = "\n".join(report.legend(rows))
        if p.suffix == ".md":
            p.write_text("```\n" + "\n".join(hdr_lines) + "\n" + legend + "\n```\n\n" + body + "\n")
        else:
            p.write_text("\n".join(hdr_lines) + "\n" + legend + "\n" + body + "\n")
    if json_path:
        report.write_json(json_path, header, rows)
    if plot_path and rows:
        try:
            report.plot(plot_path, rows, f"{opt['op']} {dtype}, {n} ranks, {link_desc}")
        except Exception as e:  # noqa: BLE001 - a plot never costs the measurements
            log(f"[ringzip-bench] plot failed: {e}")
            plot_path = None
    written = [str(p) for p in table_paths + [json_path, plot_path] if p]
    if written:
        log("[ringzip-bench] wrote " + ", ".join(written))
    return status
