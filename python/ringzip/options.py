"""ringzip.Options: how a ringzip process group behaves (``pg_options``, env, set_options).

A validated wrapper over the C++ struct (csrc/plan/options.h, bound in csrc/python/bind_options.cc):
the fields, their order, defaults and documentation come from there, and so does the check of
every value, so an option is added in C++ alone.
"""
from __future__ import annotations

import dataclasses
import os
import textwrap
from datetime import timedelta

from . import _C


def _bound_fields(cls) -> "list[tuple[str, str]]":
    """(name, documentation) of every field the C++ struct binds, in its order."""
    return [(k, v.__doc__ or "") for k, v in vars(cls).items() if isinstance(v, property) and not k.startswith("_")]


_FIELDS = _bound_fields(_C.Options)
_DEFAULTS = _C.Options()
# What a field holds when its default is None (the others take their default's type).
_NONE_DEFAULT_TYPES = {"timeout": timedelta, "error_feedback": bool}


def _type_of(name: str) -> type:
    default = getattr(_DEFAULTS, name)
    return _NONE_DEFAULT_TYPES[name] if default is None else type(default)


def _doc() -> str:
    lines = ["Options of a ringzip process group (keywords; every field's default is shown by ``Options()``).", ""]
    for name, doc in _FIELDS:
        lines.append(textwrap.fill(f"{name}: {doc}", width=96, subsequent_indent="    "))
    return "\n".join(lines)


_Fields = dataclasses.make_dataclass(
    "_Fields", [(name, _type_of(name), dataclasses.field(default=getattr(_DEFAULTS, name))) for name, _ in _FIELDS])
_Fields.__module__ = __name__


@dataclasses.dataclass
class Options(_Fields):  # decorated again, so that its __init__ calls __post_init__
    __doc__ = _doc()

    def __post_init__(self):
        self.validate()

    def validate(self) -> None:
        """TypeError for a value of the wrong type, ValueError naming the first bad value (the C++
        side's check: the group applies exactly what passes it)."""
        _C.check_options(self._as_c())

    def _as_c(self) -> "_C.Options":
        c = _C.Options()
        for name, _ in _FIELDS:
            v, want, nullable = getattr(self, name), _type_of(name), getattr(_DEFAULTS, name) is None
            if want is float and isinstance(v, int) and not isinstance(v, bool):  # link_gbit=1
                v = float(v)
            if not (v is None and nullable) and (not isinstance(v, want) or (want is int and isinstance(v, bool))):
                raise TypeError(f"ringzip.Options: {name} must be {want.__name__}{' or None' if nullable else ''}, "
                                f"got {v!r}")
            if want is int and v < 0:
                raise ValueError(f"ringzip.Options: {name} must be a non-negative int, got {v!r}")
            setattr(c, name, v)
        return c

    @classmethod
    def _from_c(cls, c: "_C.Options") -> "Options":
        return cls(**{name: getattr(c, name) for name, _ in _FIELDS})

    @property
    def _timeout(self) -> timedelta | None:
        """c10d's name for the timeout of a backend's options: torch's DeviceMesh reads it from
        the options of ``init_device_mesh(..., backend_override={dim: ("ringzip", Options(...))})``
        to create that dimension's groups."""
        return self.timeout

    def replace(self, **changes) -> "Options":
        unknown = set(changes) - {name for name, _ in _FIELDS}
        if unknown:
            raise TypeError(f"ringzip.Options: unknown field(s) {sorted(unknown)}")
        return dataclasses.replace(self, **changes)

    def _to_plain(self) -> dict:
        """Every field as JSON holds it (the timeout in seconds): what members of a group that
        changes exchange through its store (ringzip._membership)."""
        d = dataclasses.asdict(self)
        if d["timeout"] is not None:
            d["timeout"] = d["timeout"].total_seconds()
        return d

    @classmethod
    def _from_plain(cls, d: dict) -> "Options":
        d = dict(d)
        if d.get("timeout") is not None:
            d["timeout"] = timedelta(seconds=d["timeout"])
        return cls(**d)

    @classmethod
    def from_env(cls, base: "Options | None" = None) -> "Options":
        """Options from RINGZIP_* environment variables over ``base`` (or the defaults).

        The one place ringzip reads its environment: RINGZIP_<FIELD> for every field
        (RINGZIP_CODEC, RINGZIP_ALGORITHM, RINGZIP_BUCKET_SIZE, ...; RINGZIP_ERROR_FEEDBACK 0/1,
        RINGZIP_TIMEOUT_S in seconds). Explicit pg_options win over the environment.
        """
        changes = {}
        if base is None:
            for name, _ in _FIELDS:
                key = "RINGZIP_" + name.upper() + ("_S" if name == "timeout" else "")
                if key in os.environ:
                    try:
                        changes[name] = _from_text(_type_of(name), os.environ[key])
                    except ValueError as e:
                        raise ValueError(f"ringzip: bad {key}={os.environ[key]!r}: {e}") from None
        return (base or cls()).replace(**changes)


def _from_text(want: type, text: str):
    if want is bool:
        return text.lower() in ("1", "true", "yes", "on")
    if want is timedelta:
        return timedelta(seconds=float(text))
    return want(text)
