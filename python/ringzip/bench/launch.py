"""Start N local ranks (optionally in network namespaces: one per rank or per emulated node) and watch them.

The launcher is the only process that outlives a crashing rank: it streams rank 0's events
file, kills the whole set when a rank dies or no progress is seen for `row_timeout` seconds,
and reports what happened; callers decide whether to restart after the failing row.
"""
from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from .common import fmt_rate, free_port, log, parse_net, python_path_env


@dataclass
class LaunchResult:
    ok: bool
    events: list = field(default_factory=list)
    reason: str = ""
    logs: list = field(default_factory=list)


class Launcher:
    """Starts `nproc` ranks of one program and follows them; `rank_env(rank) -> dict`, if given,
    adds to a rank's environment what the launcher cannot know (the machine a rank emulates)."""

    def __init__(self, nproc: int, workdir: Path, net=None, threads: int = 1, rank_env=None):
        self.nproc, self.workdir, self.net, self.threads = nproc, Path(workdir), net, threads
        self.rank_env = rank_env
        self.procs: list[subprocess.Popen] = []

    def _env(self, rank: int, port: int) -> dict:
        env = dict(os.environ)
        # LOCAL_*: as torchrun sets them, one "node" per namespace (all ranks without --net)
        per_node = self.net.per_node if self.net is not None else self.nproc
        env.update({
            "RANK": str(rank), "WORLD_SIZE": str(self.nproc), "LOCAL_RANK": str(rank % per_node),
            "LOCAL_WORLD_SIZE": str(per_node),
            "MASTER_PORT": str(port), "PYTHONPATH": python_path_env(),
            "OMP_NUM_THREADS": str(self.threads), "MKL_NUM_THREADS": str(self.threads),
            "PYTHONUNBUFFERED": "1",
        })
        if self.net is not None:
            # Every rank talks through its namespace's NIC address; ranks of one emulated node
            # share it, so their traffic to each other takes the kernel's local route (unshaped).
            env["MASTER_ADDR"] = self.net.addr(0)
            env["GLOO_SOCKET_IFNAME"] = self.net.ifname(rank)
        else:
            env["MASTER_ADDR"] = "127.0.0.1"
            env["GLOO_SOCKET_IFNAME"] = "lo"
        if self.rank_env is not None:
            env.update(self.rank_env(rank))
        return env

    def start(self, module: str, args: list[str]) -> list[Path]:
        port = 29500 if self.net is not None else free_port()
        logs = []
        for r in range(self.nproc):
            cmd = [sys.executable, "-m", module, *args]
            if self.net is not None:
                cmd = self.net.exec_prefix(r) + cmd
            log = self.workdir / f"rank{r}.log"
            logs.append(log)
            with open(log, "ab") as lf:
                p = subprocess.Popen(cmd, env=self._env(r, port), stdout=lf, stderr=subprocess.STDOUT,
                                     stdin=subprocess.DEVNULL, start_new_session=True)
            self.procs.append(p)
        return logs

    def kill(self) -> None:
        for p in self.procs:
            if p.poll() is None:
                try:
                    os.killpg(p.pid, signal.SIGKILL)  # the rank's own session: only what we started
                except (ProcessLookupError, PermissionError):
                    pass
        for p in self.procs:
            try:
                p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                pass
        self.procs = []

    def run(self, module: str, args: list[str], events_path: Path | None, row_timeout: float,
            on_event=None, total_timeout: float | None = None) -> LaunchResult:
        """Run to completion; `on_event(dict)` sees each events line as it arrives."""
        logs = self.start(module, args)
        events, pos, buf = [], 0, ""
        last_progress = start = time.monotonic()

        def drain():
            nonlocal pos, buf, last_progress
            if events_path is None or not events_path.exists():
                return
            with open(events_path) as f:
                f.seek(pos)
                chunk = f.read()
                pos = f.tell()
            buf += chunk
            while "\n" in buf:
                line, buf = buf.split("\n", 1)
                if line.strip():
                    ev = json.loads(line)
                    events.append(ev)
                    last_progress = time.monotonic()
                    if on_event:
                        on_event(ev)

        try:
            while True:
                time.sleep(0.1)
                drain()
                codes = [p.poll() for p in self.procs]
                if all(c == 0 for c in codes):
                    drain()
                    return LaunchResult(True, events, "", logs)
                bad = [(r, c) for r, c in enumerate(codes) if c not in (None, 0)]
                if bad:
                    time.sleep(0.5)  # let the others print their side of it
                    drain()
                    r, c = bad[0]
                    what = f"signal {-c}" if c < 0 else f"exit code {c}"
                    return LaunchResult(False, events, f"rank {r} died ({what})", logs)
                now = time.monotonic()
                if row_timeout and now - last_progress > row_timeout:
                    return LaunchResult(False, events, f"no progress for {row_timeout:.0f} s (hang?)", logs)
                if total_timeout and now - start > total_timeout:
                    return LaunchResult(False, events, f"total timeout {total_timeout:.0f} s", logs)
        finally:
            self.kill()


def run_once(nproc: int, workdir: Path, module: str, args: list[str], timeout_s: float, rank_env=None,
             check: bool = True) -> LaunchResult:
    """`python -m module *args` on `nproc` local ranks, to completion or `timeout_s`; with `check`,
    a failure ends the program, naming the reason and the ranks' last lines."""
    res = Launcher(nproc, workdir, rank_env=rank_env).run(module, args, None, 0, total_timeout=timeout_s)
    if check and not res.ok:
        raise SystemExit(f"{module}: {res.reason}\n{log_tail(res.logs)}")
    return res


def log_tail(paths: list[Path], lines: int = 6) -> str:
    out = []
    for p in paths:
        try:
            text = Path(p).read_text(errors="replace").strip().splitlines()
        except OSError:
            continue
        if text:
            out.append(f"--- {Path(p).name} ---\n" + "\n".join(text[-lines:]))
    return "\n".join(out)


def run_configs(nproc: int, workdir: Path, net, threads: int, module: str, spec: dict, n_configs: int,
                row_timeout: float, identity, on_row=None, log=None) -> dict[int, dict]:
    """Run configurations 0..n_configs-1 of `spec` through `python -m module --worker SPEC` (see
    rank.worker_loop) and return {index: row}. Ranks that die or hang cost one row: it becomes an
    error row ({**identity(index), "error": reason}) and fresh ranks go on after it."""
    rows: dict[int, dict] = {}
    start, k = 0, 0
    while start < n_configs:
        k += 1
        ev_path, sp = Path(workdir) / f"events{k}.jsonl", Path(workdir) / f"spec{k}.json"
        sp.write_text(json.dumps(dict(spec, start=start, events=str(ev_path))))

        def on_event(ev):
            if ev.get("event") == "row" and on_row:
                on_row(ev["row"])

        res = Launcher(nproc, Path(workdir), net, threads).run(module, ["--worker", str(sp)], ev_path,
                                                               row_timeout, on_event)
        begun = [e["index"] for e in res.events if e.get("event") == "begin"]
        rows.update({e["index"]: e["row"] for e in res.events if e.get("event") == "row"})
        if res.ok:
            break
        pending = [i for i in begun if i not in rows]
        if log:
            log(f"[launch] ranks failed: {res.reason}\n{log_tail(res.logs, 4)}")
        if not pending:
            break
        rows[pending[-1]] = {**identity(pending[-1]), "error": res.reason}
        start = pending[-1] + 1
    return rows


@contextlib.contextmanager
def ranks_env(nproc: int, net_arg: str | None, prefix: str):
    """(work folder, emulated network or None, link description) for one run of ranks: with
    --net RATE[,DELAY[,LOSS]] the namespaces exist inside the block (their TCP goodput measured and
    named in the description) and are removed on the way out, whatever happens inside."""
    spec = parse_net(net_arg) if net_arg else None
    link = fmt_rate(None) if not net_arg else f"--net {net_arg}"
    net = None
    if net_arg:
        from .netem import open_env

        net = open_env(nproc, spec, log=log)
    with tempfile.TemporaryDirectory(prefix=prefix) as tmp:
        if net is not None:
            net.__enter__()
        try:
            if net is not None and nproc >= 2:
                link += f" (measured TCP goodput {net.measure_goodput() / 1e9:.3f} Gbit/s)"
            yield Path(tmp), net, link
        finally:
            if net is not None:
                net.__exit__(None, None, None)
