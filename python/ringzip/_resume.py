"""Bit-exact resume of DDP training with error feedback: the bucket layout half.

A compressed all-reduce is not separable: which elements top-k keeps, the q-codecs' scales (one
per ``bucket_size`` elements), the RNG counters of stochastic rounding all depend on the
tensor that is reduced, not only on its elements. So a resumed step reproduces the
uninterrupted one only if it reduces the same tensors, in the same order, with the same
residuals and RNG numbers. DDP does not: every new process reduces its first backward in one
bucket of all parameters, in registration order, and only then rebuilds the buckets it uses
from the second step on (by ``bucket_cap_mb``, in the order the gradients became ready).

So the state records the layout the saving process used (``rebuilt_per_bucket_param_indices``
of DDP's logging data: parameter indices per bucket, in call order), and on load a DDP comm
hook replays the first backward in that layout: it cuts the first-iteration bucket(s) into the
recorded buckets, all-reduces them one after the other (the first new tensors of each size take
the restored residuals in the order of their last use, and the restored call counter numbers
the calls as the old process would have), and writes the results back. The residuals then wait
for DDP's rebuilt buckets, which are the same as the saving process's (same model, same
gradient order, same caps): the hook checks that on the next step. From then on the hook does
what DDP does without one (scale by 1/world size, all-reduce the bucket). A model whose
buckets travel through ringzip.hooks.compress has its comm hook already, and DDP takes one: that
hook runs the replay itself, with its codec on its group (``reduce`` of install).
"""
from __future__ import annotations

import warnings

import torch
import torch.distributed as dist

# ``state["ddp"]["layout"]``: how the first backward after a load must be reduced.
REBUILT = "rebuilt"  # DDP rebuilt its buckets: replay "buckets" on the first backward
FIXED = "fixed"  # DDP never rebuilds (find_unused_parameters without static_graph): nothing to do
PENDING = "pending"  # saved before DDP's rebuild (after the process's first step): not replayable
NONE = "none"  # saved without model=


def reducer_params(model) -> list:
    """The parameters DDP's reducer indexes (its logged bucket layouts name them by position):
    those that require grad, not ignored, shared ones once, in ``named_modules`` order
    (DistributedDataParallel._build_params_for_reducer)."""
    ignored = getattr(model, "parameters_to_ignore", set())
    seen, out = set(), []
    for mname, module in model.module.named_modules():
        for pname, p in module.named_parameters(recurse=False):
            if p.requires_grad and f"{mname}.{pname}" not in ignored and p not in seen:
                seen.add(p)
                out.append(p)
    return out


def ddp_modules() -> list:
    """The DistributedDataParallel modules alive in this process. By type, not isinstance:
    isinstance reads ``__class__``, which warns on some of torch's deprecated objects."""
    import gc

    from torch.nn.parallel import DistributedDataParallel

    return [o for o in gc.get_objects() if issubclass(type(o), DistributedDataParallel)]


def _check_ddp(model, what):
    from torch.nn.parallel import DistributedDataParallel

    if not isinstance(model, DistributedDataParallel):
        raise TypeError(f"ringzip.{what}: model must be the DistributedDataParallel module, got {type(model).__name__}")


def layout_of(model) -> dict:
    """What error_feedback_state(model=...) records of a DDP model."""
    if model is None:
        return {"layout": NONE, "buckets": [], "param_numels": []}
    _check_ddp(model, "error_feedback_state")
    numels = [p.numel() for p in reducer_params(model)]
    data = model._get_ddp_logging_data()  # noqa: SLF001
    hook = getattr(model, "_ringzip_replay", None)
    if hook is not None and not data.get("has_rebuilt_buckets"):
        # Loaded, and DDP has not rebuilt yet: the buckets of the next step are still the ones
        # the hook replays (or has replayed and whose residuals await DDP's rebuilt buckets).
        return {"layout": REBUILT, "buckets": [list(b) for b in hook.buckets], "param_numels": numels}
    if data.get("has_rebuilt_buckets"):
        text = data["rebuilt_per_bucket_param_indices"]
        buckets = [[int(i) for i in b.split()] for b in text.split(",")]
        return {"layout": REBUILT, "buckets": buckets, "param_numels": numels}
    if model.find_unused_parameters and not model.static_graph:
        return {"layout": FIXED, "buckets": [], "param_numels": numels}
    return {"layout": PENDING, "buckets": [], "param_numels": numels}


def install(model, group, ddp_state: dict, release, reduce=None) -> "_ReplayHook | None":
    """load_error_feedback_state(model=...): make the next backward of `model` reduce like the
    step after the checkpoint did. ``reduce(tensor, async_op)`` all-reduces a bucket on `group`
    (None: with the group's codec); with it the replay is returned, not registered, for the
    comm hook the model has (ringzip.hooks.compress: DDP takes one hook only)."""
    _check_ddp(model, "load_error_feedback_state")
    layout = ddp_state["layout"]
    params = reducer_params(model)
    saved = list(ddp_state["param_numels"])
    if layout != NONE and [p.numel() for p in params] != saved:
        raise ValueError(
            "ringzip.load_error_feedback_state: the model's parameters differ from those of the model the state was "
            f"saved with ({len(params)} parameters, {sum(p.numel() for p in params)} elements; saved: {len(saved)} "
            f"parameters, {sum(saved)} elements)")
    if layout == NONE:
        warnings.warn("ringzip.load_error_feedback_state: the state was saved without model=, so the bucket layout of "
                      "the step after the checkpoint is unknown and the first step after this load is not an exact "
                      "replay (pass model= to error_feedback_state)", stacklevel=4)
        return None
    if layout == PENDING:
        warnings.warn("ringzip.load_error_feedback_state: the state was saved before DDP rebuilt its buckets (after the "
                      "first step of the saving process), so the first step after this load is not an exact replay",
                      stacklevel=4)
        return None
    if layout == FIXED:
        return None
    hook = _ReplayHook(dist.get_world_size(group), params, ddp_state["buckets"], release,
                       reduce or (lambda t, async_op: dist.all_reduce(t, group=group, async_op=async_op)))
    if reduce is None:
        try:
            model.register_comm_hook(hook, _replay_hook)
        except RuntimeError as e:
            raise RuntimeError(
                "ringzip.load_error_feedback_state(model=...) replays the first step after a restart through a DDP "
                f"comm hook, and this model has one already ({e}); load without model= (then the first step is not an "
                "exact replay) or register no other hook (ringzip.hooks.compress replays by itself)") from e
    model._ringzip_replay = hook  # noqa: SLF001 -- layout_of() reads it
    return hook


class _ReplayHook:
    """DDP comm hook (state and function): the first backward in the recorded layout, then
    DDP's own reduction (gradients scaled by 1/world size, one all-reduce per bucket)."""

    def __init__(self, size, params, buckets, release, reduce):
        self.size = size
        self.reduce = reduce
        self.index = {id(p): i for i, p in enumerate(params)}
        self.buckets = [list(b) for b in buckets]
        self.release = release
        self.views: dict = {}  # first backward: parameter index -> its gradient in DDP's bucket
        self.waiting: list = []  # first backward: (future, buffer) of the buckets seen so far
        self.replayed = False
        self.checked: set = set()

    def on_bucket(self, bucket):
        buf = bucket.buffer()
        buf.mul_(1.0 / self.size)  # what DDP does without a hook (at::mul_out by 1/world size)
        if not self.replayed:
            return self._first(bucket, buf)
        if bucket.index() not in self.checked:
            self.checked.add(bucket.index())
            got = [self.index.get(id(p)) for p in bucket.parameters()]
            want = self.buckets[bucket.index()] if bucket.index() < len(self.buckets) else None
            if got != want:
                warnings.warn(f"ringzip: DDP bucket {bucket.index()} holds parameters {got} after the resume, but "
                              f"{want} in the run the checkpoint came from (bucket_cap_mb or the model changed?): "
                              "training goes on, but not as an exact replay", stacklevel=2)
        fut = self.reduce(buf, True).get_future()
        return fut.then(lambda f: f.value()[0])

    def _first(self, bucket, buf):
        for p, g in zip(bucket.parameters(), bucket.gradients()):
            self.views[self.index[id(p)]] = g
        fut = torch.futures.Future(devices=None if buf.device.type == "cpu" else [buf.device])
        self.waiting.append((fut, buf))
        if not bucket.is_last():
            return fut  # DDP calls the hook for every first-iteration bucket before it waits on any
        self.replayed = True
        stand_ins = []
        for b in self.buckets:
            t = torch.cat([self.views[i].reshape(-1) for i in b])
            self.reduce(t, False)
            off = 0
            for i in b:
                v = self.views[i]
                v.copy_(t[off:off + v.numel()].view_as(v))
                off += v.numel()
            stand_ins.append(t)
        # The stand-ins' residuals wait for DDP's rebuilt buckets (next step), in this order.
        self.release(stand_ins)
        self.views.clear()
        for f, b in self.waiting:
            f.set_result(b)
        self.waiting.clear()
        return fut


def _replay_hook(state: _ReplayHook, bucket):  # DDP checks the hook's parameter names
    return state.on_bucket(bucket)
