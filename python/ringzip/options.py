"""ringzip.Options: how a ringzip process group behaves (pass as ``pg_options``)."""
from __future__ import annotations

import os
from dataclasses import dataclass, field, fields
from datetime import timedelta

ALGORITHMS = ("auto", "ring", "rd")


@dataclass
class Options:
    """Options of a ringzip process group.

    timeout: default timeout of every collective (``None``: the group's timeout).
    algorithm: dense all-reduce algorithm: ``auto`` (by size), ``ring`` or ``rd``
        (recursive doubling, log-step, for small messages).
    """

    timeout: timedelta | None = None
    algorithm: str = "auto"
    _extra: dict = field(default_factory=dict, repr=False)

    def __post_init__(self):
        self.validate()

    def validate(self) -> None:
        if self.algorithm not in ALGORITHMS:
            raise ValueError(f"ringzip.Options: unknown algorithm {self.algorithm!r}; expected one of {ALGORITHMS}")
        if self.timeout is not None and not isinstance(self.timeout, timedelta):
            raise TypeError(f"ringzip.Options: timeout must be a datetime.timedelta, got {type(self.timeout).__name__}")

    @classmethod
    def from_env(cls, base: "Options | None" = None) -> "Options":
        """Options from RINGZIP_* environment variables (the one place they are read),
        over ``base`` or the defaults."""
        opts = cls(**{f.name: getattr(base, f.name) for f in fields(cls)}) if base else cls()
        if "RINGZIP_ALGORITHM" in os.environ:
            opts.algorithm = os.environ["RINGZIP_ALGORITHM"]
        if "RINGZIP_TIMEOUT_S" in os.environ:
            opts.timeout = timedelta(seconds=float(os.environ["RINGZIP_TIMEOUT_S"]))
        opts.validate()
        return opts
