"""DDP comm hooks: gradients travel compressed, every other call stays exact.

    ddp.register_comm_hook(ringzip.hooks.State(codec="q4"), ringzip.hooks.compress)

The hook all-reduces each gradient bucket with the state's codec (``ringzip.compress``), so the
group's own codec can stay ``none``: a user's metrics all-reduce, a model average or a norm on
the same group stays exact. It works wherever DDP's process group is ringzip (``"ringzip"``,
``"cpu:ringzip,cuda:ringzip"``) and, when it is not (``"gloo"``, ``"cpu:gloo,cuda:nccl"``),
through a ringzip group over the same ranks that the hook creates once, at its first bucket:
the user keeps their backend and gains compression by one line. Error feedback works as on a
group with that codec (the residuals belong to the bucket tensors), and so do the results: bit
for bit what DDP computes on a group whose codec is the state's.

The state is checkpointable as a group's error feedback is (``state.state_dict()`` /
``state.load_state_dict(d)``, or ``ringzip.error_feedback_state(model=ddp)`` /
``ringzip.load_error_feedback_state(state=d, model=ddp)``, which find the hook on the model):
the residuals, the call counter and DDP's bucket layout, so that a restarted job resumes bit
for bit. The replay of the first backward after a load, which a group's resume does through a
comm hook of its own, runs inside this hook: DDP takes one comm hook only.

Compiled DDP works with the hook: ``torch.compile(ddp)`` (DDP's reducer calls it per bucket) and
compiled autograd with ``optimize_ddp="python_reducer"`` (DDP calls it per parameter, with the
gradient and the parameter; each gradient is averaged in place, outside the compiled graph).
"""
# No ``from __future__ import annotations``: DDP checks compress's annotations as objects.
import functools
import weakref
from dataclasses import dataclass, field
from typing import Optional

import torch
import torch.distributed as dist

from . import _C, _resume, api
from .options import Options


@dataclass
class State:
    """The hook's settings. codec: any ``Options.codec`` string (the bucket group's other settings
    apply: bucket size, rounding, seed, ``min_numel``, error feedback). process_group: the group
    DDP reduces on (None: the default group); when it has no ringzip backend, the hook creates a
    ringzip group over the same ranks at its first call, which every rank of the default group
    must make (so pass a ringzip group as ``group`` yourself for a DDP over a subgroup).
    group: the ringzip group the buckets travel on, when you made one. options: the
    ``pg_options`` of the group the hook creates (e.g. ``Options(error_feedback=True)``; None:
    the RINGZIP_* environment); a ringzip group of yours keeps its own (a ValueError says so)."""

    codec: str = "q4"
    process_group: Optional[dist.ProcessGroup] = None
    group: Optional[dist.ProcessGroup] = None
    options: Optional[Options] = None
    # A loaded state waits for the hook's next bucket: the group may not exist before it.
    _pending: Optional[tuple] = field(default=None, init=False, repr=False, compare=False)
    _replay: object = field(default=None, init=False, repr=False, compare=False)
    _model_ref: object = field(default=None, init=False, repr=False, compare=False)

    def __post_init__(self):
        if self.options is not None and self.group is not None:
            raise ValueError("ringzip.hooks.State: options= configure the group the hook creates, and group= is one of "
                             "yours: set its options on it (pg_options or ringzip.set_options)")

    def _ddp_group(self) -> dist.ProcessGroup:
        return self.process_group if self.process_group is not None else dist.distributed_c10d._get_default_group()  # noqa: SLF001

    def ringzip_group(self, device: torch.device) -> dist.ProcessGroup:
        if self.group is not None:
            return self.group
        pg = self._ddp_group()
        try:
            if isinstance(pg._get_backend(device), _C.RingzipBackend):  # noqa: SLF001
                if self.options is not None:
                    raise ValueError("ringzip.hooks.State: DDP's process group is ringzip already, so the hook creates "
                                     "no group for options= to configure: set them on that group (pg_options or "
                                     "ringzip.set_options)")
                self.group = pg
                return pg
        except RuntimeError:
            pass
        if pg is not dist.distributed_c10d._get_default_group():  # noqa: SLF001
            raise ValueError("ringzip.hooks: DDP's process group is a subgroup without a ringzip backend; create "
                             "a ringzip group over its ranks (dist.new_group(ranks, backend='ringzip'), on every "
                             "rank) and pass it as State(group=...)")
        self.group = dist.new_group(dist.get_process_group_ranks(pg), backend="ringzip", pg_options=self.options)
        return self.group

    def state_dict(self) -> dict:
        """This rank's error-feedback state of the buckets (the dict of
        ``ringzip.error_feedback_state``, with the bucket layout of the DDP module this state is
        registered on); each rank saves its own, between steps."""
        return self._save(self._registered_on())

    def load_state_dict(self, state: dict) -> None:
        """Restores a ``state_dict()`` of this rank, before the first step after the load: the
        residuals and call counter, and the first backward replayed in the saved bucket layout.
        Checked now (ValueError for another version, rank or world size), restored at the hook's
        next bucket."""
        self._load(state, None)

    def _save(self, model) -> dict:
        if self._pending is not None:  # loaded, not yet restored: what was loaded is the state
            return self._pending[0]
        if self.group is None:  # nothing reduced yet: not even the group exists
            return api._pack(self._ddp_group(), 0, [], model)  # noqa: SLF001
        calls, residuals = api.backend_of(self.group).error_feedback_state()
        return api._pack(self.group, calls, residuals, model)  # noqa: SLF001

    def _load(self, state: dict, model) -> None:
        group = self.group if self.group is not None else self._ddp_group()
        self._pending = (state, api._checked(group, state))  # noqa: SLF001
        if model is not None:
            self._model_ref = weakref.ref(model)

    def _registered_on(self):
        """The DDP module whose comm hook this state is (None if none is)."""
        model = self._model_ref() if self._model_ref is not None else None
        if model is not None:
            return model
        found = [o for o in _resume.ddp_modules() if any(st is self for _, st in getattr(o, "_comm_hooks", ()))]
        if len(found) > 1:
            raise ValueError("ringzip.hooks.State: this state is registered on several DDP modules; their bucket "
                             "layouts differ, so give each its own State")
        if found:
            self._model_ref = weakref.ref(found[0])
            return found[0]
        return None

    def _all_reduce(self, tensor: torch.Tensor, async_op: bool):
        with api.compress(self.codec):
            return dist.all_reduce(tensor, group=self.group, async_op=async_op)

    def _restore(self, replay: bool = True) -> None:
        (state, residuals), self._pending = self._pending, None
        model = self._registered_on() if replay else None
        self._replay = api._restore(self.group, state, residuals, model, self._all_reduce)  # noqa: SLF001


def compress(state: State, bucket: dist.GradBucket) -> torch.futures.Future[torch.Tensor]:
    """DDP comm hook: the bucket's average over the ranks, all-reduced with ``state.codec``.
    Scales by 1 / world size first and sums, as DDP's own reducer does (so the bits are those
    of DDP on a group with that codec)."""
    if isinstance(bucket, tuple):
        return _outside_graph(_compress_gradient)(state, *bucket)
    tensor = bucket.buffer()
    state.ringzip_group(tensor.device)
    if state._pending is not None:  # noqa: SLF001
        state._restore()  # noqa: SLF001
    if state._replay is not None:  # noqa: SLF001 -- after a load: the replay scales and reduces
        return state._replay.on_bucket(bucket)  # noqa: SLF001
    tensor.mul_(1.0 / dist.get_world_size(state.group))
    fut = state._all_reduce(tensor, True).get_future()  # noqa: SLF001
    return fut.then(lambda f: f.value()[0])


compress.ringzip_hook = True  # how api finds this hook's State on a DDP module


@functools.cache
def _outside_graph(fn):
    # torch.compiler.disable imports torch._dynamo (seconds): only compiled autograd needs it.
    return torch.compiler.disable(fn)


def _compress_gradient(state: State, grad: torch.Tensor, param: torch.Tensor) -> None:
    """Compiled autograd with ``optimize_ddp="python_reducer"`` has no buckets: DDP calls its
    hooks with each parameter's ``(grad, param)`` once the gradient is accumulated, and uses no
    result, so the gradient is averaged in place. It divides and then sums, as that reducer does
    without a hook, so the bits are those of the compiled DDP on a group with the codec. Its calls
    are per parameter, so a checkpoint's replay (of DDP's buckets) does not apply."""
    del param
    state.ringzip_group(grad.device)
    if state._pending is not None:  # noqa: SLF001
        state._restore(replay=False)  # noqa: SLF001
    avg = grad / dist.get_world_size(state.group)
    state._all_reduce(avg, False)  # noqa: SLF001
    grad.copy_(avg)
