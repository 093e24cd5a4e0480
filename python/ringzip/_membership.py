"""Process groups whose members come and go (ringzip.torchft): a new ringzip group is built at
every membership change, and what belongs to the process group rather than to one of its
groups goes from each to the next.

- The options: those set last (``ringzip.set_options`` on the process group) among the members,
  agreed when the group is built, so a member that joins runs what the others run; where nobody
  set any at run time, rank 0's.
- This process's error-feedback residuals: a residual is this member's own compression error,
  owed to the sum, so it stays with the process through every change (docs/usage.md,
  "Members that come and go"). A process that joins starts from zero; one that leaves takes its
  residual with it.
- The position of the compressed calls' random streams: the members' furthest, so that every
  member draws from the same place (random-k's indices must agree).
- The cost model's agreed figures (link, kernels' speeds): those of the lowest rank that has
  any, on every member, so the new group's first call neither probes nor agrees.
"""
from __future__ import annotations

import itertools
import json
import logging
import time
from datetime import timedelta

import torch
import torch.distributed as dist
from torch.distributed import PrefixStore

from ._registry import _build
from .options import Options

log = logging.getLogger("ringzip")

_names = itertools.count()


def new_process_group(store, rank: int, world_size: int, options: Options | None = None,
                      timeout: timedelta = timedelta(minutes=10)) -> dist.ProcessGroup:
    """A ``torch.distributed.ProcessGroup`` of ``world_size`` processes whose CPU and CUDA
    collectives run on ringzip, rendezvousing through ``store`` (a ``torch.distributed.Store``:
    TCPStore, FileStore, a PrefixStore over one); outside torch's registry of groups, so pass it
    as ``group=`` (collectives, ``ringzip.stats``, ``ringzip.set_options``, DDP's
    ``process_group=``). For a library that owns its groups, as torchft does; ``options=None``
    reads RINGZIP_* from the environment. Every member calls it with the same store."""
    opts = Options.from_env(_checked_options(options))
    return _standalone(store, rank, world_size, opts.timeout or timeout, opts)[0]


def _checked_options(options):
    if options is not None and not isinstance(options, Options):
        raise TypeError(f"ringzip: options must be ringzip.Options, got {type(options).__name__}")
    return options


def _standalone(store, rank, size, timeout, opts, agree: bool = True):
    backend = _build(store, rank, size, timeout, f"ringzip-standalone-{next(_names)}", opts, agree=agree)
    pg = dist.ProcessGroup(store, rank, size)
    custom = dist.ProcessGroup.BackendType.CUSTOM
    pg._set_default_backend(custom)  # noqa: SLF001 -- as torch's own init_process_group does
    for device in ("cpu", "cuda"):
        pg._register_backend(torch.device(device), custom, backend)  # noqa: SLF001
    return pg, backend


class Reconfigurable:
    """A process group that builds a new ringzip group at each membership change (mixed into a
    process-group class: ringzip.torchft.ProcessGroupRingzip). ringzip's functions that take a
    ``group`` find its current group; ``ringzip.set_options`` on it changes the current group
    and every later one."""

    def _ringzip_setup(self, options: Options | None) -> None:
        self._rz_options = Options.from_env(_checked_options(options))
        self._rz_set_at = 0.0  # time.time() of the last set_options; 0: given at construction
        self._rz_backend = None
        self._rz_loaded = None  # a state loaded before the first group: (calls, residuals)

    def _ringzip_backend(self):
        if self._rz_backend is None:
            raise ValueError("ringzip: this process group has no group yet (it is built at its first configure, "
                             "when torchft's Manager forms its first quorum)")
        return self._rz_backend

    def _ringzip_options(self) -> Options:
        return self._rz_options

    def _ringzip_set_options(self, **fields) -> Options:
        new = self._rz_options.replace(**fields)
        if self._rz_backend is not None:
            from ._registry import apply_options
            apply_options(self._rz_backend, new)
        self._rz_options, self._rz_set_at = new, time.time()
        return new

    def _ringzip_load(self, calls: int, residuals: list) -> None:
        """An error-feedback state for this process: into the current group, or the next one."""
        if self._rz_backend is None:
            self._rz_loaded = (calls, residuals)
        else:
            self._rz_backend.load_error_feedback_state(calls, residuals)

    def _ringzip_release(self) -> None:
        """Lets the current group go (its connections and threads), keeping this process's
        residuals for a later group."""
        if self._rz_backend is not None:
            self._rz_loaded = self._rz_backend.error_feedback_state()
            self._rz_backend = None

    def _ringzip_process_group(self, store, rank: int, size: int, timeout: timedelta) -> dist.ProcessGroup:
        """The next group, over ``store`` (a fresh one per membership: torchft's quorum prefix)."""
        old = self._rz_backend
        calls, residuals = old.error_feedback_state() if old is not None else self._rz_loaded or (0, [])
        figures = {d: old.tuner_figures(d) for d in ("cpu", "cuda")} if old is not None else {}
        mine = {"set_at": self._rz_set_at, "options": self._rz_options._to_plain(), "calls": int(calls),
                "figures": {d: f for d, f in figures.items() if f is not None}}
        every = _exchange(PrefixStore("ringzip/members/", store), rank, size, mine)
        chosen = max(range(size), key=lambda r: (every[r]["set_at"], -r))
        opts = Options._from_plain(every[chosen]["options"])
        if opts != self._rz_options:
            log.info("ringzip: rank %d of a new group takes rank %d's options (set %s): %s", rank, chosen,
                     "at run time" if every[chosen]["set_at"] else "at construction", opts)
        self._rz_options, self._rz_set_at = opts, every[chosen]["set_at"]
        # Until the new group stands the residuals wait here: a build that fails (a member died
        # in it) loses none, the next one takes them.
        self._rz_backend, self._rz_loaded = None, (calls, residuals)
        pg, backend = _standalone(store, rank, size, opts.timeout or timeout, opts, agree=False)
        backend.load_error_feedback_state(max(e["calls"] for e in every), residuals)
        for device in ("cpu", "cuda"):  # the lowest rank's that has them, on every member alike
            known = [e["figures"][device] for e in every if device in e["figures"]]
            if known:
                backend.seed_tuner(device, known[0]["link"], known[0]["codec_scale"], known[0]["codecs"])
        backend.agree_early()  # every member alike: with the figures seeded it sends nothing
        self._rz_backend, self._rz_loaded = backend, None
        return pg


def _exchange(store, rank: int, size: int, mine: dict) -> list[dict]:
    """Every member's `mine`, in rank order, through the group's store."""
    store.set(str(rank), json.dumps(mine))
    return [json.loads(store.get(str(r))) for r in range(size)]
