"""The rank side of a launch (launch.py starts the ranks and follows rank 0's events file).

Every rank joins the control group (gloo, the default group, over MASTER_ADDR/PORT) that aligns
iterations and gathers results; rank 0 alone writes the events, one JSON object a line:
{"event": NAME, ...}, flushed at once so that the launcher's watchdog sees progress, and
{"event": "done"} last.
"""
from __future__ import annotations

import datetime
import json
import os
from pathlib import Path


def load_spec(path: str) -> dict:
    return json.loads(Path(path).read_text())


def join(timeout_s: float = 300.0, threads: int = 1) -> tuple[int, int, datetime.timedelta]:
    """Joins the control group; returns (rank, world size, the timeout its groups use)."""
    import torch
    import torch.distributed as dist

    rank, n = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    torch.set_num_threads(threads)
    timeout = datetime.timedelta(seconds=timeout_s)
    dist.init_process_group("gloo", rank=rank, world_size=n, timeout=timeout,
                            init_method=f"tcp://{os.environ['MASTER_ADDR']}:{os.environ['MASTER_PORT']}")
    return rank, n, timeout


class Events:
    """Rank 0's events file; on every other rank it is false and writes nothing, so a rank can
    skip the work of an event no one writes (`if events:`)."""

    def __init__(self, path: str, rank: int):
        self._file = open(path, "a") if rank == 0 else None

    def __bool__(self) -> bool:
        return self._file is not None

    def write(self, event: str, **fields) -> None:
        if self._file is not None:
            self._file.write(json.dumps({"event": event, **fields}, default=str) + "\n")
            self._file.flush()

    def close(self) -> None:
        self.write("done")
        if self._file is not None:
            self._file.close()
            self._file = None


def leave(events: Events) -> int:
    """Waits for every rank, ends the events stream and leaves the control group; returns the
    rank's exit status, 0."""
    import torch.distributed as dist

    dist.barrier()
    events.close()
    dist.destroy_process_group()
    return 0


def worker_cli(argv: list[str], train_one, make_row) -> int:
    """`python -m ringzip.bench.lab.<module> --worker SPEC.json`: one rank of launch.run_configs."""
    if len(argv) == 2 and argv[0] == "--worker":
        return worker_loop(argv[1], train_one, make_row)
    print("internal: --worker SPEC.json, started by ringzip-bench (see `ringzip-bench train --help`)")
    return 2


def worker_loop(spec_path: str, train_one, make_row) -> int:
    """Rank side of launch.run_configs: run every configuration from spec['start'] on with
    `train_one(spec, cfg, rank, n, timeout) -> dict` (an exception becomes the row's error),
    gather the ranks' results, and let rank 0 write `make_row(spec, cfg, results_of_all_ranks,
    error_or_None)` as the configuration's row."""
    import torch.distributed as dist

    spec = load_spec(spec_path)
    rank, n, timeout = join(spec.get("timeout_s", 300), spec.get("threads", 1))
    events = Events(spec["events"], rank)
    for idx in range(spec["start"], len(spec["configs"])):
        cfg = spec["configs"][idx]
        events.write("begin", index=idx)
        try:
            res = train_one(spec, cfg, rank, n, timeout)
            res["err"] = None
        except Exception as e:  # noqa: BLE001 - becomes the row's error
            res = {"err": f"{type(e).__name__}: {e}"[:300]}
        got = [None] * n
        dist.all_gather_object(got, res)
        if events:
            err = next((g["err"] for g in got if g["err"]), None)
            events.write("row", index=idx, row=make_row(spec, cfg, got, err))
    return leave(events)
