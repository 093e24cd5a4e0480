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
"""

from dataclasses import dataclass
from typing import Optional

import torch
import torch.distributed as dist

from . import _C
from .api import compress as _compress


@dataclass
class State:
    """The hook's settings. codec: any ``Options.codec`` string (the bucket group's other settings
    apply: bucket size, rounding, seed, ``min_numel``, error feedback). process_group: the group
    DDP reduces on (None: the default group); when it has no ringzip backend, the hook creates a
    ringzip group over the same ranks at its first call, which every rank of the default group
    must make (so pass a ringzip group as ``group`` yourself for a DDP over a subgroup).
    group: the ringzip group the buckets travel on, when you made one."""

    codec: str = "q4"
    process_group: Optional[dist.ProcessGroup] = None
    group: Optional[dist.ProcessGroup] = None

    def ringzip_group(self, device: torch.device) -> dist.ProcessGroup:
        if self.group is not None:
            return self.group
        pg = self.process_group if self.process_group is not None else dist.distributed_c10d._get_default_group()  # noqa: SLF001
        try:
            if isinstance(pg._get_backend(device), _C.RingzipBackend):  # noqa: SLF001
                self.group = pg
                return pg
        except RuntimeError:
            pass
        if pg is not dist.distributed_c10d._get_default_group():  # noqa: SLF001
            raise ValueError("ringzip.hooks: DDP's process group is a subgroup without a ringzip backend; create "
                             "a ringzip group over its ranks (dist.new_group(ranks, backend='ringzip'), on every "
                             "rank) and pass it as State(group=...)")
        self.group = dist.new_group(dist.get_process_group_ranks(pg), backend="ringzip")
        return self.group


def compress(state: State, bucket: dist.GradBucket) -> torch.futures.Future[torch.Tensor]:
    """DDP comm hook: the bucket's average over the ranks, all-reduced with ``state.codec``.
    Scales by 1 / world size first and sums, as DDP's own reducer does (so the bits are those
    of DDP on a group with that codec)."""
    tensor = bucket.buffer()
    group = state.ringzip_group(tensor.device)
    tensor.mul_(1.0 / dist.get_world_size(group))
    with _compress(state.codec):
        fut = dist.all_reduce(tensor, group=group, async_op=True).get_future()
    return fut.then(lambda f: f.value()[0])
