"""Run-time control of ringzip groups: options, statistics, error-feedback state, and the
per-call codec (exact(), compress())."""
from __future__ import annotations

import contextlib
import warnings

import torch
import torch.distributed as dist

from . import _C
from ._membership import Reconfigurable
from ._registry import apply_options, backend_of, options_of
from .options import Options


def set_options(group=None, **fields) -> Options:
    """Changes a group's options for the collectives issued after this call.

    ``group=None`` is the default group. Example (warm-up schedule)::

        ringzip.set_options(codec="none")   # first epoch exact
        ringzip.set_options(codec="q4")     # then compressed

    It is also how to configure ringzip in a group whose backend string names NCCL too
    (``"cpu:ringzip,cuda:nccl"``): torch passes ``pg_options`` to every backend of the string and
    NCCL rejects ringzip.Options, so create the group without them and call this right after.
    ``timeout`` and ``transport`` are fixed at creation (``init_process_group(timeout=...)``,
    RINGZIP_TRANSPORT).
    """
    for fixed in ("timeout", "transport"):
        if fixed in fields:
            raise ValueError(f"ringzip.set_options: {fixed} is fixed at group creation")
    if isinstance(group, Reconfigurable):  # its current group and every later one
        return group._ringzip_set_options(**fields)  # noqa: SLF001
    new = options_of(group).replace(**fields)
    apply_options(backend_of(group), new)
    return new


def get_options(group=None) -> Options:
    return options_of(group)


def stats(group=None, reset: bool = False) -> dict:
    """Per-codec counters of this rank: calls, bytes_in (caller's tensor bytes), bytes_wire
    (bytes this rank sent), ratio (what an exact ring all-reduce would have sent / bytes_wire),
    codec_seconds and transport_seconds (the rest of the time in compressed calls), for codec
    fp16 ``overflows`` (calls whose result held Inf/NaN although this rank's input was finite:
    fp16 carries magnitudes up to 65504 only), for node-aware calls ``bytes_intra_node`` (the exact
    steps inside the node; ``bytes_wire`` and ``ratio`` then count what crossed between nodes),
    the error-feedback memory in
    ``residual_bytes``, under ``topology`` the group's node layout (nodes, ranks_per_node,
    node_of, whether all-reduce and reduce-scatter run node-aware and if not why, the transport,
    the connections to each peer, and how many opened their windows when the group was created:
    ``warmed``, a long link whose rate was given),
    and under ``auto``, once algorithm="auto" or codec="auto" has chosen anything or a fixed
    codec's SRA call was planned (its segment length: a choice with one candidate; calls whose
    parts span more than one 2 MiB segment), the cost
    model's side: calls, refreshes of the agreed parameters (refresh_s: what the last one
    took; probe_s: what this rank's probe of the link took at the first, 0 where it needed no
    rounds: a long link whose rate was given), explorations and tours (calls that ran a way
    not measured at its size, to measure it), changes (lasting slowdowns seen: the running way's price grew 2x between two
    refreshes, so its size class's other prices moved with it and every candidate ran once
    again), codec_choices and algorithm_choices (counts per codec / dense algorithm chosen),
    way_choices (counts per way: ``q4/sra``, ``none/tree``, or a dense algorithm), params
    (the agreed alpha_s, call_s, launch_s -- a kernel's cost beyond its bytes --, link_gbit, window_gbit
    -- what one peer's connections carry where their windows bound them, 0 when none does --,
    reduce and codec speeds, codec_scale) and last (the last
    call's bytes, choice, way -- the choice with its algorithm, e.g. ``q4/sra`` --, tried --
    whether it ran the way to measure it rather than for its price --, segment_elems -- SRA's
    segment length, 0 when the call ran no SRA -- and the predicted seconds
    of every candidate). Under codec="auto" each call is counted under the
    codec that ran (``none`` for the exact ones). Each device's calls have their own tuner (its
    links and kernel speeds): ``auto["device"]`` says whose ("cpu", or "cuda" for a group whose
    tuned calls were all on CUDA tensors; ``auto["kernels"]``: where its codec speeds were
    measured); a group that tuned calls on both has the CUDA tensors' under ``auto_cuda``."""
    b = backend_of(group)
    out = {}
    for codec, s in b.stats().items():
        s = _plain(s)
        if codec != "fp16":
            del s["overflows"]  # only fp16's casts overflow
        s["ratio"] = s["bytes_dense_equiv"] / s["bytes_wire"] if s["bytes_wire"] else float("nan")
        s["transport_seconds"] = max(0.0, s["total_seconds"] - s["codec_seconds"])
        out[codec] = s
    out["residual_bytes"] = b.residual_bytes()
    out["topology"] = b.topology()
    tuned = [{**_plain(b.auto_state(d)), "device": d} for d in ("cpu", "cuda")]
    tuned = [a for a in tuned if a["calls"]]
    if tuned:
        out["auto"] = tuned[0]
    if len(tuned) == 2:
        out["auto_cuda"] = tuned[1]
    if reset:
        b.reset_stats()
    return out


def _plain(v):
    """A bound C++ struct (csrc/python/bind_stats.cc) as plain dicts, by its bound names."""
    if isinstance(v, dict):
        return {k: _plain(x) for k, x in v.items()}
    if type(v).__module__.startswith("ringzip"):
        return {k: _plain(getattr(v, k)) for k, p in vars(type(v)).items() if isinstance(p, property)}
    return v


STATE_VERSION = 2


def _group_of(group, model):
    return model.process_group if group is None and model is not None else group


def _warn_without_model(group, what: str) -> None:
    """Warns when a DistributedDataParallel module reduces its gradients on ``group`` (which
    compressed calls), but ``model=`` was not passed: DDP reduces the first step of every new
    process in one bucket of all parameters, so the residuals and the stochastic-rounding stream
    of its usual buckets cannot be matched then, and the resume is no closer to the
    uninterrupted run than starting from zero."""
    from ._resume import ddp_modules

    pg = group if group is not None else dist.distributed_c10d._get_default_group()  # noqa: SLF001
    if any(o.process_group is pg for o in ddp_modules()):
        warnings.warn(f"ringzip.{what}: a DistributedDataParallel module reduces its gradients on this group; pass "
                      f"it as model= (ringzip.{what}(model=ddp_module)), or the resumed run is not the uninterrupted "
                      "one (its first step reduces other buckets than the residuals were made for)", stacklevel=3)


def error_feedback_state(group=None, model=None) -> dict:
    """This rank's error-feedback state, to store with a checkpoint (each rank its own).

    A plain dict (tensors, ints, lists), for ``torch.save`` or torch.distributed.checkpoint::

        version      2
        codec_version  the codec bits the residuals came from (ringzip._C.codec.codec_version;
                     absent: 1). Loading a state of another codec version works, but the
                     resumed run is not bit for bit the uninterrupted one (a warning says so)
        rank, world_size
        calls        compressed calls so far on this group: the position of the
                     stochastic-rounding / random-k RNG stream, which restarts there on load
        residuals    [(slot, float32 tensor), ...]: every residual, slot = number of the
                     compressed call that used it last, in that order
        awaiting     slots of the residuals whose tensors were alive (DDP's buckets): after a
                     load, the first new tensors of each size take them, in slot order
        ddp          with ``model``: the DDP bucket layout of the step after this one

    Residuals are not keyed by addresses or by first use (DDP rebuilds its buckets after the
    first step of every process, so neither is the same from run to run): they are matched to
    tensors by size and by the order of the calls. ``model`` (the DistributedDataParallel module
    whose gradients this group reduces; ``group`` defaults to its process group) records the
    bucket layout, so that :func:`load_error_feedback_state` can replay the first step after a
    restart in it: the resumed run is then bit for bit the uninterrupted one (docs/usage.md,
    "Observability and checkpoints"). When ``model``'s buckets travel through
    ringzip.hooks.compress, the state is that hook's (``State.state_dict()``), on its group."""
    hook = _hook_of(group, model)
    if hook is not None:
        return hook._save(model)  # noqa: SLF001
    group = _group_of(group, model)
    b = backend_of(group)
    calls, residuals = b.error_feedback_state()
    if model is None and calls:
        _warn_without_model(group, "error_feedback_state")
    return _pack(group, calls, residuals, model)


def _pack(group, calls, residuals, model) -> dict:
    """error_feedback_state's dict; residuals as the backend gives them: (slot, bound, tensor)."""
    from . import _resume

    rank, size = _rank_and_size(group)
    return {
        "version": STATE_VERSION,
        "codec_version": int(_C.codec.codec_version),
        "rank": rank,
        "world_size": size,
        "calls": int(calls),
        "residuals": [(int(slot), r) for slot, _, r in residuals],
        "awaiting": [int(slot) for slot, bound, _ in residuals if bound],
        "ddp": _resume.layout_of(model),
    }


def _rank_and_size(group) -> tuple[int, int]:
    """This rank and the group's size: its ringzip backend's own where it has one (a group that
    torch's registry does not know, torchft's, has them too), else torch's (a DDP group of
    another backend, whose hook has not made its ringzip group yet)."""
    try:
        b = backend_of(group)
    except ValueError:
        return dist.get_rank(group), dist.get_world_size(group)
    return b.rank(), b.size()


def _hook_of(group, model):
    """The ringzip.hooks.State of `model` (a DDP module) when its buckets travel through
    ringzip.hooks.compress: then the state and its replay belong to the hook's group, which is
    not DDP's process group when that one is gloo, and the replay must run inside that hook."""
    for fn, st in getattr(model, "_comm_hooks", ()):
        if getattr(fn, "ringzip_hook", False):  # hooks.compress (hooks imports this module, not the reverse)
            if group is not None and st.group is not None and group is not st.group:
                raise ValueError("ringzip: model's buckets travel through ringzip.hooks.compress on another group than "
                                 "group=; leave group out (the hook's group is the one that holds the state)")
            return st
    return None


def load_error_feedback_state(group=None, state: dict | None = None, model=None) -> None:
    """Restores a state saved by :func:`error_feedback_state` on this rank (call it on every
    rank, before the first step after the load; each rank loads its own state, all from the
    same step).

    With ``model`` (the DistributedDataParallel module, before its first step in this process;
    ``group`` defaults to its process group) and a state saved with ``model``, the first
    backward replays the bucket layout of the saving run through a DDP comm hook that stays
    registered (it reduces as DDP does without one): DDP reduces the first step of every new
    process in one bucket of all parameters, and compression is only reproducible on the same
    buckets. Raises ValueError for a state of another version, rank or world size (except on a
    process group whose members come and go, ringzip.torchft's: a member's residuals are its own
    whatever its rank; loaded before its first group, they wait for it). When
    ``model``'s buckets travel through ringzip.hooks.compress, the state goes to that hook
    (``State.load_state_dict``), which replays the first backward itself."""
    hook = _hook_of(group, model)
    if hook is not None:
        hook._load(state, model)  # noqa: SLF001 -- restored at the hook's next bucket, on its group
        return
    group = _group_of(group, model)
    if isinstance(group, Reconfigurable) and model is None:  # its current group, or its first
        group._ringzip_load(int(state["calls"]), _checked(group, state))  # noqa: SLF001
        return
    _restore(group, state, _checked(group, state), model)


def _checked(group, state) -> list:
    """The residuals of `state` as the backend loads them, (slot, awaiting, tensor), once the
    state is known to be one this rank of `group` can load."""
    if not isinstance(state, dict) or "version" not in state:
        raise ValueError("ringzip.load_error_feedback_state: expected the dict of ringzip.error_feedback_state()")
    if state["version"] != STATE_VERSION:
        raise ValueError(
            f"ringzip.load_error_feedback_state: the state has version {state['version']}, this ringzip reads version "
            f"{STATE_VERSION}. Version 1 states (ringzip <= 0.1.0) numbered residuals by first use, which a restarted "
            "DDP does not reproduce, and did not hold the RNG position: they cannot resume exactly; start without "
            "loading one (the residuals begin at zero)")
    codec_version = state.get("codec_version", 1)
    if codec_version != _C.codec.codec_version:
        warnings.warn(
            f"ringzip.load_error_feedback_state: the state comes from codec version {codec_version}, this ringzip "
            f"encodes with version {_C.codec.codec_version} (stochastic rounding draws other bits): the residuals "
            "are loaded and training continues correctly, but not bit for bit as the saving run would have",
            stacklevel=3)
    # A member of a group that comes and goes holds its own residuals whatever its rank is now.
    rank, size = (state["rank"], state["world_size"]) if isinstance(group, Reconfigurable) else _rank_and_size(group)
    if state["rank"] != rank or state["world_size"] != size:
        raise ValueError(
            f"ringzip.load_error_feedback_state: the state was saved by rank {state['rank']} of {state['world_size']}, "
            f"this is rank {rank} of {size}: every rank loads the state it saved itself")
    awaiting = set(state["awaiting"])
    residuals = []
    for slot, r in state["residuals"]:
        if not isinstance(r, torch.Tensor) or not r.is_floating_point():
            raise ValueError(f"ringzip.load_error_feedback_state: residual {slot} is not a float tensor")
        residuals.append((int(slot), int(slot) in awaiting, r))
    return residuals


def _restore(group, state, residuals, model, reduce=None):
    """Loads a _checked state into `group`'s backend and, with `model`, sets up the replay of
    its first backward (returned when `reduce` is given: see _resume.install)."""
    from . import _resume

    b = backend_of(group)
    replay = None
    if model is not None:  # checks the model before anything changes
        replay = _resume.install(model, group, state["ddp"], b.release_error_feedback, reduce)
    elif state["ddp"]["layout"] != _resume.REBUILT and state["calls"]:
        _warn_without_model(group, "load_error_feedback_state")
    if model is None and state["ddp"]["layout"] == _resume.REBUILT:
        warnings.warn("ringzip.load_error_feedback_state: the state holds a DDP bucket layout but no model= was given: "
                      "the first step after this load is not an exact replay", stacklevel=3)
    b.load_error_feedback_state(int(state["calls"]), residuals)
    return replay


@contextlib.contextmanager
def exact():
    """Every collective this thread issues inside the block runs exact, whatever its group's
    codec: a metrics all-reduce, a model average, a norm. Captured when a call is issued, so an
    ``async_op=True`` call issued inside keeps it after the block."""
    _C.push_call_codec("none")
    try:
        yield
    finally:
        _C.pop_call_codec()


@contextlib.contextmanager
def compress(codec: str):
    """The all-reduces and reduce-scatters this thread issues inside the block travel with
    ``codec`` (any codec string of ``Options.codec``; the group's other settings apply: bucket
    size, rounding, seed, ``min_numel``, error feedback), whatever the group's codec. Captured
    when a call is issued; ranks that disagree are caught by the group's mismatch check, as
    for differing group codecs."""
    _C.push_call_codec(codec)
    try:
        yield
    finally:
        _C.pop_call_codec()
