"""ringzip as torchft's process group: ``ProcessGroupRingzip`` for ``torchft.Manager(pg=...)``.

torchft (``pip install 'ringzip[torchft]'``) rebuilds its process group at every membership
change of its quorum; this one builds a ringzip group each time and keeps what belongs to the
process group across them: the options (``ringzip.set_options(group=pg, ...)`` applies to every
later group, and a member that joins runs the options the others run), this process's
error-feedback residuals, the position of the random streams (ringzip/_membership.py), the
calibration of the link, and the TCP connections between members that remain.
A quorum of one member runs exact, as every ringzip group of one rank does.

    import ringzip
    from ringzip.torchft import ProcessGroupRingzip
    pg = ProcessGroupRingzip(ringzip.Options(codec="q4", error_feedback=True))
    manager = torchft.Manager(pg=pg, ...)
"""
from __future__ import annotations

from datetime import timedelta

from ._membership import Reconfigurable
from .options import Options

try:
    from torchft.process_group import ProcessGroupWrapper
except ImportError as e:  # torchft is an extra: ringzip itself never imports it
    raise ImportError(f"ringzip.torchft needs torchft ({e}): pip install 'ringzip[torchft]'") from e


class ProcessGroupRingzip(Reconfigurable, ProcessGroupWrapper):
    """A torchft process group whose collectives run on ringzip, CPU and CUDA tensors.

    ``options``: the ringzip.Options of every group it builds (None: RINGZIP_* from the
    environment, else the defaults); ``timeout``: torchft's for reconfiguration, and the
    collectives' unless ``options.timeout`` is set."""

    def __init__(self, options: Options | None = None, timeout: timedelta = timedelta(seconds=60)) -> None:
        ProcessGroupWrapper.__init__(self, timeout=timeout)
        self._ringzip_setup(options)

    def _create_pg(self, store, rank: int, world_size: int):
        return self._ringzip_process_group(store, rank, world_size, self._timeout)

    def abort(self, errored: bool = True) -> None:
        if errored or self._pg is None:
            ProcessGroupWrapper.abort(self, errored)
            return
        # A membership change, not a failure (torchft aborts the old group before building the
        # next): the group closes cleanly, and its idle connections carry over to the next group
        # between the same processes with their TCP windows open.
        self._pg.shutdown()
        self._pg = None

    def shutdown(self) -> None:
        self._ringzip_release()
        ProcessGroupWrapper.shutdown(self)

    def getBackendName(self) -> str:
        return "torchft-ringzip"
