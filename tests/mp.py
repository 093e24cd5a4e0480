"""Multi-process harness for torch.distributed tests.

``run(fn, world_size, ...)`` starts ``world_size`` fresh Python processes (plain
``subprocess``, one session each so they can be killed as a group), gives each a
``RankContext`` (rank, world size, a fresh ``file://`` init method in a private temporary
directory) and calls ``fn(ctx, *args, **kwargs)`` in every rank.  It returns the per-rank
return values (which must be picklable) and raises ``MultiProcessError`` if

* any rank raised (every rank's exception is reported, with its traceback),
* any rank died without a result (segfault, abort: exit status and stderr tail reported),
* the hard ``timeout`` expired: every rank still running gets SIGUSR1 (faulthandler dumps all
  Python thread stacks to its stderr), then SIGKILL; the error names the hung ranks, the last
  check each of them announced with ``progress()`` and their stack dumps.

Starting a process costs ~2 s of CPU (importing torch), so tests run many checks per launch.
``Checker`` supports that: ``with chk.case("all_reduce/SUM/float32/n=7"): ...`` records a failure
under its name and carries on; ``raise_on_failures`` turns the collected per-rank failures into
one readable assertion.

The function to run must be defined at module level of an importable module (or of the
``__main__`` script); the child imports it by module name with the parent's ``sys.path``.
"""
from __future__ import annotations

import contextlib
import dataclasses
import faulthandler
import importlib
import importlib.util
import json
import os
import pickle
import signal
import subprocess
import sys
import tempfile
import time
import traceback
from typing import Any, Callable

_PROGRESS_ENV = "MP_TEST_PROGRESS_FILE"
_JOURNAL_ENV = "MP_TEST_JOURNAL_FILE"


@dataclasses.dataclass
class RankContext:
    rank: int
    world_size: int
    init_method: str  # fresh file:// rendezvous for this launch
    tmpdir: str  # private scratch directory shared by all ranks of this launch


class MultiProcessError(AssertionError):
    """A launch failed: exception in a rank, crashed rank or hang.

    ``partial[rank]`` holds the Checker results that rank had recorded before the failure (in
    Checker.result() form), ``hung`` the ranks killed, ``last[rank]`` their last progress label.
    """

    def __init__(self, msg, partial=None, hung=(), last=None):
        super().__init__(msg)
        self.partial = partial or []
        self.hung = list(hung)
        self.last = last or {}


def progress(label: str) -> None:
    """Announce (cheaply) what this rank is doing now; shown if the launch hangs."""
    path = os.environ.get(_PROGRESS_ENV)
    if not path:
        return
    with open(path, "w") as f:
        f.write(label)


def _read_journal(path: str) -> dict:
    out = {"failures": {}, "passed": []}
    try:
        with open(path) as f:
            lines = f.read().splitlines()
    except OSError:
        return out
    for line in lines:
        try:
            rec = json.loads(line)
        except ValueError:
            continue
        if rec["ok"]:
            out["passed"].append(rec["case"])
        else:
            out["failures"][rec["case"]] = rec["msg"]
    return out


def _tail(path: str, limit: int = 6000) -> str:
    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError:
        return ""
    text = data.decode("utf-8", "replace")
    return text if len(text) <= limit else "...\n" + text[-limit:]


def _read(path: str) -> str:
    try:
        with open(path) as f:
            return f.read()
    except OSError:
        return ""


def run(
    fn: Callable[..., Any],
    world_size: int,
    *,
    args: tuple = (),
    kwargs: dict | None = None,
    timeout: float = 120.0,
    grace: float = 15.0,
    stall: float | None = None,
    env: dict | None = None,
) -> list:
    """Run ``fn(ctx, *args, **kwargs)`` in ``world_size`` processes; return per-rank results.

    ``timeout`` bounds the whole launch; ``stall`` (optional) declares a hang as soon as no rank
    has announced ``progress()`` for that many seconds.
    """
    module = fn.__module__
    spec = {
        "module": module,
        "file": getattr(sys.modules.get(module), "__file__", None),
        "qualname": fn.__qualname__,
        "sys_path": list(sys.path),
        "args": args,
        "kwargs": kwargs or {},
    }
    with tempfile.TemporaryDirectory(prefix="mp_test_") as tmp:
        spec_path = os.path.join(tmp, "spec.pkl")
        with open(spec_path, "wb") as f:
            pickle.dump(spec, f)
        init_method = "file://" + os.path.join(tmp, "rendezvous")
        procs, logs = [], []
        base_env = dict(os.environ)
        base_env.update({"OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1", "PYTHONFAULTHANDLER": "1"})
        base_env.update(env or {})
        for rank in range(world_size):
            e = dict(base_env)
            e[_PROGRESS_ENV] = os.path.join(tmp, f"progress{rank}")
            e[_JOURNAL_ENV] = os.path.join(tmp, f"journal{rank}")
            log = os.path.join(tmp, f"stderr{rank}.txt")
            logs.append(log)
            with open(log, "wb") as lf:
                procs.append(
                    subprocess.Popen(
                        [sys.executable, os.path.abspath(__file__), spec_path, str(rank), str(world_size), init_method, tmp],
                        stdout=lf,
                        stderr=subprocess.STDOUT,
                        env=e,
                        start_new_session=True,
                    )
                )
        deadline = time.monotonic() + timeout
        first_failure = None
        hung: list[int] = []
        try:
            while True:
                codes = [p.poll() for p in procs]
                if all(c is not None for c in codes):
                    break
                now = time.monotonic()
                if first_failure is None and any(c not in (None, 0) for c in codes):
                    first_failure = now
                    deadline = min(deadline, now + grace)
                if stall is not None:
                    marks = [os.path.join(tmp, f"progress{r}") for r in range(world_size)]
                    latest = max([os.path.getmtime(m) for m in marks if os.path.exists(m)] or [0.0])
                    if latest and time.time() - latest > stall:
                        deadline = now
                if now >= deadline:
                    hung = [r for r, c in enumerate(codes) if c is None]
                    for r in hung:  # dump stacks, then kill
                        with contextlib.suppress(ProcessLookupError):
                            os.kill(procs[r].pid, signal.SIGUSR1)
                    time.sleep(1.5)
                    for r in hung:
                        with contextlib.suppress(ProcessLookupError):
                            os.killpg(procs[r].pid, signal.SIGKILL)
                    for p in procs:
                        p.wait()
                    break
                time.sleep(0.05)
        finally:
            for p in procs:  # never leave a rank behind (KeyboardInterrupt, ...)
                if p.poll() is None:
                    with contextlib.suppress(ProcessLookupError):
                        os.killpg(p.pid, signal.SIGKILL)
                    p.wait()

        results, problems = [], []
        for rank, p in enumerate(procs):
            out = os.path.join(tmp, f"result{rank}.pkl")
            res = None
            if os.path.exists(out):
                with open(out, "rb") as f:
                    res = pickle.load(f)
            if rank in hung:
                problems.append(
                    f"--- rank {rank}: HUNG (killed: {'grace period after another rank failed' if first_failure else (f'no progress for {stall:.0f}s or ' if stall is not None else '') + f'{timeout:.0f}s launch timeout'}); "
                    f"last progress: {_read(os.path.join(tmp, f'progress{rank}')) or '<none>'}\n{_tail(logs[rank])}"
                )
            elif res is None:
                problems.append(
                    f"--- rank {rank}: died with exit status {p.returncode} without a result; "
                    f"last progress: {_read(os.path.join(tmp, f'progress{rank}')) or '<none>'}\n{_tail(logs[rank])}"
                )
            elif res[0] == "err":
                problems.append(f"--- rank {rank}: raised {res[1]}\n{res[2]}")
            results.append(res[1] if res and res[0] == "ok" else None)
        if problems:
            head = f"{fn.__qualname__} on {world_size} ranks failed"
            if hung:
                head += f"; hung ranks: {hung}"
            partial = [_read_journal(os.path.join(tmp, f"journal{r}")) for r in range(world_size)]
            last = {r: _read(os.path.join(tmp, f"progress{r}")) for r in range(world_size)}
            raise MultiProcessError(head + "\n" + "\n".join(problems), partial, hung, last)
        return results


class Checker:
    """Collects named check failures inside one rank instead of stopping at the first."""

    def __init__(self, rank: int):
        self.rank = rank
        self.failures: dict[str, str] = {}
        self.passed: list[str] = []

    @contextlib.contextmanager
    def case(self, name: str):
        progress(name)
        try:
            yield
        except Exception as e:  # noqa: BLE001 - we report everything by name
            tb = traceback.extract_tb(e.__traceback__)
            where = f" (at {tb[-1].name}:{tb[-1].lineno})" if tb else ""
            msg = f"{type(e).__name__}: {e}".strip().split("\nException raised from")[0]
            if len(msg) > 1500:
                msg = msg[:1500] + " ..."
            self.failures[name] = msg + where
            self._journal(name, False, msg + where)
        else:
            self.passed.append(name)
            self._journal(name, True, "")

    def _journal(self, name, ok, msg):
        path = os.environ.get(_JOURNAL_ENV)
        if path:
            with open(path, "a") as f:
                f.write(json.dumps({"case": name, "ok": ok, "msg": msg}) + "\n")

    def result(self) -> dict:
        return {"failures": dict(self.failures), "passed": list(self.passed)}


def merge(results: list[dict]) -> dict[str, dict[int, str]]:
    """Per-rank Checker results -> {case: {rank: message}} for failed cases."""
    out: dict[str, dict[int, str]] = {}
    for rank, res in enumerate(results):
        for case, msg in res["failures"].items():
            out.setdefault(case, {})[rank] = msg
    return out


def raise_on_failures(failures: dict[str, dict[int, str]], title: str = "") -> None:
    if not failures:
        return
    lines = [f"{len(failures)} failing case(s){' in ' + title if title else ''}:"]
    for case in sorted(failures):
        per_rank = failures[case]
        msgs = set(per_rank.values())
        if len(msgs) == 1:
            lines.append(f"  {case} [ranks {sorted(per_rank)}]: {next(iter(msgs))}")
        else:
            for r in sorted(per_rank):
                lines.append(f"  {case} [rank {r}]: {per_rank[r]}")
    raise AssertionError("\n".join(lines))


def _child_main(argv: list[str]) -> None:
    spec_path, rank, world_size, init_method, tmp = argv
    rank, world_size = int(rank), int(world_size)
    faulthandler.register(signal.SIGUSR1, all_threads=True)
    out = os.path.join(tmp, f"result{rank}.pkl")
    try:
        with open(spec_path, "rb") as f:
            spec = pickle.load(f)
        sys.path[:] = spec["sys_path"]
        if spec["module"] == "__main__":
            mspec = importlib.util.spec_from_file_location("__mp_main__", spec["file"])
            mod = importlib.util.module_from_spec(mspec)
            sys.modules["__mp_main__"] = mod
            mspec.loader.exec_module(mod)
        else:
            mod = importlib.import_module(spec["module"])
        fn = mod
        for part in spec["qualname"].split("."):
            fn = getattr(fn, part)
        ctx = RankContext(rank, world_size, init_method, tmp)
        value = fn(ctx, *spec["args"], **spec["kwargs"])
        res = ("ok", value)
    except BaseException as e:  # noqa: BLE001
        res = ("err", f"{type(e).__name__}: {e}", traceback.format_exc())
    tmp_out = out + ".tmp"
    with open(tmp_out, "wb") as f:
        pickle.dump(res, f)
    os.replace(tmp_out, out)
    sys.stdout.flush()
    sys.stderr.flush()
    code = 0 if res[0] == "ok" else 1
    if os.environ.get("RINGZIP_FULL_EXIT"):
        sys.exit(code)  # tools/coverage.sh: gcov writes a process's counts in the normal exit
    # Skip interpreter teardown: a backend thread stuck at exit must not turn a finished rank into a hang.
    os._exit(code)


if __name__ == "__main__":
    _child_main(sys.argv[1:])


@dataclasses.dataclass
class CheckLaunch:
    """Outcome of one launch of a Checker-based function: merged failures, passed cases, and
    (when the launch itself failed) the harness error and each rank's last progress label."""

    failures: dict
    passed: set
    error: str | None = None
    last: dict | None = None


def run_checks(fn: Callable[..., Any], world_size: int, **kw) -> CheckLaunch:
    """``run`` for functions returning ``Checker.result()``; keeps partial results of a failed launch."""
    try:
        res = run(fn, world_size, **kw)
    except MultiProcessError as e:
        return CheckLaunch(merge(e.partial), set().union(*(r["passed"] for r in e.partial)) if e.partial else set(),
                           str(e), e.last)
    return CheckLaunch(merge(res), set().union(*(r["passed"] for r in res)))


def assert_checks(launch: CheckLaunch, in_section: Callable[[str], bool], title: str) -> None:
    """Fail if any case of the section failed, the launch died inside the section, or none ran."""
    mine = {c: m for c, m in launch.failures.items() if in_section(c)}
    ran = [c for c in launch.passed if in_section(c)]
    if launch.error is not None:
        inside = [r for r, lab in (launch.last or {}).items() if lab and in_section(lab)]
        if inside or not (ran or mine):
            where = ", ".join(f"rank {r}: {launch.last[r]!r}" for r in inside) or "before this section"
            raise AssertionError(f"{title}: launch failed ({where})\n" + "\n".join(
                f"  {c}: {m}" for c, m in sorted(mine.items())) + "\n" + launch.error)
    raise_on_failures(mine, title)
    assert ran, f"{title}: no case ran"
