"""ringzip.Options: how a ringzip process group behaves (``pg_options``, env, set_options)."""
from __future__ import annotations

import os
from dataclasses import asdict, dataclass, fields
from datetime import timedelta

# Dense algorithms (exact all-reduce) and compressed ones share one option: a name that
# applies to only one family leaves the other on "auto".
DENSE_ALGORITHMS = ("auto", "ring", "rd", "direct", "star", "hd", "tree")
COMPRESSED_ALGORITHMS = ("auto", "ring", "sra", "sparse")
ALGORITHMS = DENSE_ALGORITHMS + COMPRESSED_ALGORITHMS[2:]
CODECS = ("none", "fp16", "bf16", "q8", "q4", "q2", "q1", "topk:R", "randomk:R", "auto", "auto:CODEC")


@dataclass
class Options:
    """Options of a ringzip process group.

    timeout: default timeout of every collective (``None``: the group's timeout).
    algorithm: ``auto`` (the cost model's choice for the call's size and the group's measured
        link and codec speeds; exact calls choose among ``ring``, ``direct`` and ``star``, which
        add in one order, so results repeat bit for bit run to run), ``ring``, ``rd`` (recursive doubling, dense
        only), ``direct`` (one-round exchange, dense only), ``star`` (reduce at a rotating
        root and send back, fewest messages: the tiny-message default, dense only), ``hd``
        (recursive halving-doubling, dense only), ``tree`` (pipelined binary tree, dense
        only), ``sra`` (scatter-reduce-allgather, compressed only) or ``sparse``.
    codec: ``none`` (exact, the default), ``fp16``, ``bf16``, ``q8``, ``q4``, ``q2``, ``q1``,
        ``topk:R`` or ``randomk:R`` (R: fraction kept, e.g. ``topk:0.01``), or ``auto:CODEC``:
        per call the fastest of exact and every codec no lossier than CODEC (none < bf16/fp16 <
        q8 < q4 < q2 < q1; ``auto:topk:R`` chooses between exact and ``topk:R``), as the cost
        model predicts for the call's size and the group's measured link; ``auto`` means
        ``auto:q4``. ``ringzip.stats()`` files each call under the codec that ran and counts the
        choices under ``"auto"`` (docs/algorithms.md, "Choosing: the cost model").
    bucket_size: elements per scale of the q-codecs.
    rounding: ``stochastic`` (unbiased, default) or ``nearest`` for the q-codecs.
    min_numel: tensors with fewer elements stay exact.
    topk_block: ``topk:R`` keeps the R-fraction largest of each block of this many elements
        (default 2**20), so each block's pairs leave while the next is selected; 0: of the
        whole tensor (nothing is sent before all of it is selected). At most 4096 blocks per
        call: larger tensors get proportionally larger blocks.
    error_feedback: keep the compression error and add it to the next call's input;
        ``None``: on for biased codecs (topk, randomk, q1, nearest rounding).
    seed: seed of stochastic rounding and random-k selection (same on all ranks).
    transport: ``auto``: CPU tensors between ranks of one node through shared memory
        (``csrc/transport/shm/``; Gloo over loopback when it cannot be set up, with a warning),
        all other CPU traffic through Gloo (TCP), CUDA tensors through NCCL when this build has
        CUDA. ``shm``: the same, but a node whose shared memory cannot be set up is an error.
        ``gloo``: everything through Gloo (CUDA tensors host-staged).
    hierarchy: ``auto`` (node-aware when every node holds the same number of ranks, more than
        one node and more than one rank per node), ``node`` (the same, with a warning and flat
        calls when the layout does not allow it) or ``flat`` (every rank alike). Node-aware
        all-reduce and reduce-scatter are exact inside a node and use the codec only between
        nodes (docs/algorithms.md).
    check: mismatch check of calls across ranks (docs/reliability.md). ``auto`` (default):
        every call's tags carry a hash of the call (type, dtype, sizes, op, root, codec), so
        mismatched calls exchange nothing; a call stalled for 250 ms is diagnosed through the
        store and every rank raises the same message naming both calls (the group is then
        unusable). No extra message per call. ``on``: in addition the ranks exchange the
        64-byte fingerprints before each call, which finds a mismatch before anything is posted
        and keeps the group usable, at one small-message round per call (use it while
        developing). ``off``: nothing (a mismatch may time out or abort inside Gloo).
    """

    timeout: timedelta | None = None
    algorithm: str = "auto"
    codec: str = "none"
    bucket_size: int = 512
    rounding: str = "stochastic"
    min_numel: int = 65536
    topk_block: int = 1 << 20
    error_feedback: bool | None = None
    seed: int = 0
    transport: str = "auto"
    hierarchy: str = "auto"
    check: str = "auto"

    def __post_init__(self):
        self.validate()

    def validate(self) -> None:
        if self.algorithm not in ALGORITHMS:
            raise ValueError(f"ringzip.Options: unknown algorithm {self.algorithm!r}; expected one of {ALGORITHMS}")
        if self.timeout is not None and not isinstance(self.timeout, timedelta):
            raise TypeError(f"ringzip.Options: timeout must be a datetime.timedelta, got {type(self.timeout).__name__}")
        if self.transport not in ("auto", "gloo", "shm"):
            raise ValueError(f"ringzip.Options: transport must be 'auto', 'gloo' or 'shm', got {self.transport!r}")
        if self.hierarchy not in ("auto", "node", "flat"):
            raise ValueError(f"ringzip.Options: hierarchy must be 'auto', 'node' or 'flat', got {self.hierarchy!r}")
        if self.rounding not in ("stochastic", "nearest"):
            raise ValueError(f"ringzip.Options: rounding must be 'stochastic' or 'nearest', got {self.rounding!r}")
        if not isinstance(self.codec, str):
            raise TypeError(f"ringzip.Options: codec must be a string such as 'q4', got {type(self.codec).__name__}")
        for name in ("bucket_size", "min_numel", "seed", "topk_block"):
            v = getattr(self, name)
            if not isinstance(v, int) or isinstance(v, bool) or v < 0:
                raise ValueError(f"ringzip.Options: {name} must be a non-negative int, got {v!r}")
        if self.check not in ("on", "auto", "off"):
            raise ValueError(f"ringzip.Options: check must be 'on', 'auto' or 'off', got {self.check!r}")
        if self.error_feedback is not None and not isinstance(self.error_feedback, bool):
            raise TypeError("ringzip.Options: error_feedback must be True, False or None")

    @property
    def _timeout(self) -> timedelta | None:
        """c10d's name for the timeout of a backend's options: torch's DeviceMesh reads it from
        the options of ``init_device_mesh(..., backend_override={dim: ("ringzip", Options(...))})``
        to create that dimension's groups."""
        return self.timeout

    def replace(self, **changes) -> "Options":
        unknown = set(changes) - {f.name for f in fields(self)}
        if unknown:
            raise TypeError(f"ringzip.Options: unknown field(s) {sorted(unknown)}")
        return Options(**{**asdict(self), **changes})

    @classmethod
    def from_env(cls, base: "Options | None" = None) -> "Options":
        """Options from RINGZIP_* environment variables over ``base`` (or the defaults).

        The one place ringzip reads its environment: RINGZIP_CODEC, RINGZIP_ALGORITHM,
        RINGZIP_BUCKET_SIZE, RINGZIP_ROUNDING, RINGZIP_MIN_NUMEL, RINGZIP_TOPK_BLOCK, RINGZIP_ERROR_FEEDBACK
        (0/1), RINGZIP_SEED, RINGZIP_TRANSPORT, RINGZIP_HIERARCHY, RINGZIP_TIMEOUT_S, RINGZIP_CHECK (on/auto/off). Explicit pg_options win over the environment.
        """
        env = os.environ
        changes = {}
        if base is None:
            conv = {"codec": str, "algorithm": str, "rounding": str, "bucket_size": int, "min_numel": int,
                    "seed": int, "topk_block": int, "transport": str, "hierarchy": str, "check": str}
            for name, f in conv.items():
                key = "RINGZIP_" + name.upper()
                if key in env:
                    try:
                        changes[name] = f(env[key])
                    except ValueError as e:
                        raise ValueError(f"ringzip: bad {key}={env[key]!r}: {e}") from None
            if "RINGZIP_ERROR_FEEDBACK" in env:
                changes["error_feedback"] = env["RINGZIP_ERROR_FEEDBACK"].lower() in ("1", "true", "yes", "on")
            if "RINGZIP_TIMEOUT_S" in env:
                changes["timeout"] = timedelta(seconds=float(env["RINGZIP_TIMEOUT_S"]))
        return (base or cls()).replace(**changes)


def dense_algorithm(algorithm: str) -> str:
    return algorithm if algorithm in DENSE_ALGORITHMS else "auto"


def compressed_algorithm(algorithm: str) -> str:
    return algorithm if algorithm in COMPRESSED_ALGORITHMS else "auto"
