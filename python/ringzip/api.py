"""Run-time control of ringzip groups: options, statistics, error-feedback state."""
from __future__ import annotations

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
    fp16 carries magnitudes up to 65504 only), and the error-feedback memory in
    ``residual_bytes``."""
    b = backend_of(group)
    out = {}
    for codec, s in b.stats().items():
        s = dict(s)
        s["ratio"] = s["bytes_dense_equiv"] / s["bytes_wire"] if s["bytes_wire"] else float("nan")
        s["transport_seconds"] = max(0.0, s["total_seconds"] - s["codec_seconds"])
        out[codec] = s
    out["residual_bytes"] = b.residual_bytes()
    if reset:
        b.reset_stats()
    return out


def error_feedback_state(group=None) -> dict:
    """This rank's error-feedback residuals, to store with a checkpoint.

    Residuals are numbered by the order in which their tensors were first all-reduced, which
    DDP keeps the same from run to run, so the state can be loaded into a fresh process."""
    return {"version": 1, "residuals": [(slot, r) for slot, r in backend_of(group).error_feedback_state()]}


def load_error_feedback_state(group=None, state: dict | None = None) -> None:
    """Restores residuals saved by :func:`error_feedback_state` (call before training resumes)."""
    if state is None or state.get("version") != 1:
        raise ValueError("ringzip.load_error_feedback_state: expected a dict from ringzip.error_feedback_state()")
    backend_of(group).load_error_feedback_state([(int(s), r) for s, r in state["residuals"]])
