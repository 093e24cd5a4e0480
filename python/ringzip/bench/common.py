"""Small helpers shared by the bench subcommands: unit parsing, environment header, paths."""
from __future__ import annotations

import os
import platform
import re
import socket
import sys
from pathlib import Path
from typing import NamedTuple

_SIZE_RE = re.compile(r"^\s*([0-9]*\.?[0-9]+)\s*([kmgt]?)(i?b?)\s*$", re.IGNORECASE)
_SIZE_MUL = {"": 1, "k": 1024, "m": 1024**2, "g": 1024**3, "t": 1024**4}


def parse_size(text: str) -> int:
    """'4', '64K', '16M', '1G' -> bytes (binary multiples, like nccl-tests)."""
    m = _SIZE_RE.match(str(text))
    if not m:
        raise ValueError(f"bad size {text!r} (expected e.g. 8, 64K, 16M, 1G)")
    return int(float(m.group(1)) * _SIZE_MUL[m.group(2).lower()])


_RATE_RE = re.compile(r"^\s*([0-9]*\.?[0-9]+)\s*([kmg]?)(bit|bps)?\s*$", re.IGNORECASE)
_RATE_MUL = {"": 1, "k": 1e3, "m": 1e6, "g": 1e9}


def parse_rate_bits(text: str) -> float:
    """'1gbit', '100mbit', '10g' -> bits per second (decimal multiples, like tc)."""
    m = _RATE_RE.match(str(text))
    if not m:
        raise ValueError(f"bad link rate {text!r} (expected e.g. 1gbit, 100mbit, 10gbit)")
    return float(m.group(1)) * _RATE_MUL[m.group(2).lower()]


_TIME_RE = re.compile(r"^\s*([0-9]*\.?[0-9]+)\s*(us|ms|s)?\s*$", re.IGNORECASE)


def parse_delay_s(text: str) -> float:
    m = _TIME_RE.match(str(text))
    if not m:
        raise ValueError(f"bad delay {text!r} (expected e.g. 0.2ms, 50us)")
    unit = (m.group(2) or "ms").lower()
    return float(m.group(1)) * {"us": 1e-6, "ms": 1e-3, "s": 1.0}[unit]


class NetSpec(NamedTuple):
    """An emulated link: rate (bits/s, None: unshaped), one-way delay (s), random loss per
    packet (0..1) and which emulation carries it (`link`: auto, tbf or tun; netem.py)."""
    rate: float | None
    delay: float = 0.0
    loss: float = 0.0
    link: str = "auto"


LINKS = ("auto", "tbf", "tun")


def parse_loss(text: str) -> float:
    t = str(text).strip()
    try:
        v = float(t[:-1]) / 100 if t.endswith("%") else float(t)
    except ValueError:
        raise ValueError(f"bad loss {text!r} (expected e.g. 0.1% or 0.001)") from None
    if not 0 <= v < 1:
        raise ValueError(f"loss {text!r} must be in [0, 100%)")
    return v


def parse_net(text: str) -> NetSpec:
    """'RATE[,DELAY[,LOSS]][,LINK]' -> NetSpec. LINK (auto, tbf, tun) may end the list at any
    point: '1gbit,50ms,tun'."""
    parts = [p.strip() for p in str(text).split(",") if p.strip()]
    link = parts.pop() if parts and parts[-1].lower() in LINKS else "auto"
    if not parts or len(parts) > 3:
        raise ValueError(f"bad --net {text!r} (expected RATE[,DELAY[,LOSS]][,LINK], e.g. 1gbit, "
                         f"10gbit,0.2ms or 1gbit,50ms,0.1%; LINK one of {', '.join(LINKS)})")
    rate = parse_rate_bits(parts[0])
    delay = parse_delay_s(parts[1]) if len(parts) >= 2 else 0.0
    loss = parse_loss(parts[2]) if len(parts) == 3 else 0.0
    if rate <= 0:
        raise ValueError("--net rate must be positive")
    return NetSpec(rate, delay, loss, link.lower())


def size_sweep(begin: int, end: int, factor: float) -> list[int]:
    if begin <= 0 or end < begin:
        raise ValueError(f"bad size range -b {begin} -e {end}")
    if factor <= 1 and begin != end:
        raise ValueError("-f must be > 1")
    out, s = [], begin
    while s <= end:
        out.append(int(s))
        if factor <= 1:
            break
        s = s * factor
    return out


def parse_key_values(items: list[str], flag: str = "--ropt") -> dict:
    """['min_numel=0', 'check=off'] -> {'min_numel': 0, 'check': 'off'}: ints, floats,
    true/false/none as Python values, anything else as the text."""
    out = {}
    for it in items:
        if "=" not in it:
            raise ValueError(f"{flag} wants KEY=VALUE, got {it!r}")
        k, v = it.split("=", 1)
        for conv in (int, float):
            try:
                v = conv(v)
                break
            except ValueError:
                continue
        else:
            v = {"true": True, "false": False, "none": None}.get(v.lower(), v)
        out[k.strip()] = v
    return out


SHM_PREFIX = "ringzip-"  # /dev/shm/ringzip-<pid>-<pid namespace, hex>-<random> (csrc/transport/shm/segment.cc)


def shm_segments(pids=None) -> list[str]:
    """Names of ringzip's shared-memory segments in /dev/shm (of these pids only, when given)."""
    out = []
    for f in os.listdir("/dev/shm"):
        if not f.startswith(SHM_PREFIX):
            continue
        try:
            pid = int(f[len(SHM_PREFIX):].split("-")[0])
        except ValueError:
            pid = -1
        if pids is None or pid in pids:
            out.append(f)
    return sorted(out)


def split_list(text: str | None) -> list[str]:
    if text is None:
        return []
    return [t.strip() for t in str(text).split(",") if t.strip()]


def fmt_bytes(n: float) -> str:
    for unit, div in (("G", 1024**3), ("M", 1024**2), ("K", 1024)):
        if n >= div and n % div == 0:
            return f"{int(n // div)}{unit}"
    return str(int(n))


def fmt_rate(bits: float | None) -> str:
    if not bits:
        return "loopback (unshaped)"
    if bits >= 1e9:
        return f"{bits / 1e9:g} Gbit/s"
    return f"{bits / 1e6:g} Mbit/s"


def cpu_model() -> str:
    """The CPU's model name, with its family and model numbers where the name alone does not say
    which generation it is (virtual machines often report just "AMD EPYC")."""
    fields = {}
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if not line.strip():
                    break  # the first CPU's fields
                key, _, value = line.partition(":")
                fields[key.strip()] = value.strip()
    except OSError:
        pass
    name = fields.get("model name")
    if not name:
        return platform.processor() or platform.machine()
    if "cpu family" in fields and "model" in fields:
        name += f" (family {fields['cpu family']} model {fields['model']})"
    return name


def simd_level() -> str:
    """The widest vector ISA the codec kernels dispatch to on this CPU (they pick AVX-512, then
    AVX2, then scalar code at run time), and the fused q-codec kernel set in use."""
    try:
        with open("/proc/cpuinfo") as f:
            flags = next((ln.split(":", 1)[1].split() for ln in f if ln.startswith("flags")), [])
    except OSError:
        flags = []
    level = "AVX-512" if "avx512f" in flags else "AVX2" if "avx2" in flags else "scalar"
    try:  # the fused q8/q4/q2 kernels need more than avx512f (BW/VL/VBMI): name the set in use
        import ringzip

        return f"{level} (q-codec kernels: {ringzip._C.codec.quant_kernels()})"
    except Exception:  # noqa: BLE001 - the header must not fail
        return level


def versions() -> dict:
    """Versions for the header; importing ringzip must not be fatal here."""
    import torch

    info = {"torch": torch.__version__, "python": platform.python_version()}
    try:
        import ringzip

        info["ringzip"] = getattr(ringzip, "__version__", "?")
    except Exception as e:  # noqa: BLE001 - report, never crash the header
        info["ringzip"] = f"unavailable ({type(e).__name__}: {e})"
    return info


def header_lines(nproc: int, link: str, extra: dict | None = None) -> list[str]:
    v = versions()
    lines = [
        f"# ringzip-bench  host={socket.gethostname()}  python={v['python']}",
        f"# torch {v['torch']}  ringzip {v['ringzip']}",
        f"# cpu: {cpu_model()} x {os.cpu_count()} logical cores, SIMD {simd_level()}",
        f"# nproc {nproc}  link: {link}",
    ]
    try:
        la = os.getloadavg()
        lines[2] += f"  load avg {la[0]:.2f} (other work on the machine adds noise)" if la[0] > 0.5 else ""
    except OSError:
        pass
    for k, val in (extra or {}).items():
        lines.append(f"# {k}: {val}")
    return lines


def repo_root() -> Path | None:
    """The source checkout holding this package (python/ringzip/bench -> repo), if any."""
    here = Path(__file__).resolve()
    cand = here.parents[3] if len(here.parents) > 3 else None
    if cand and (cand / "pyproject.toml").exists() and (cand / "bench").is_dir():
        return cand
    return None


def default_results_dir() -> Path:
    root = repo_root()
    return (root / "bench" / "results") if root else (Path.cwd() / "bench" / "results")


def threads_and_fds() -> tuple[int, int]:
    """This process's threads and open files, less the TCP connections closed groups keep for the
    next group (bounded and reused: they are no leak)."""
    from ringzip import _C

    return len(os.listdir("/proc/self/task")), len(os.listdir("/proc/self/fd")) - _C.tcp_kept_connections()


def results_dir(out_dir: str | None) -> Path:
    """Where a benchmark writes its results: `out_dir` (created if missing), else bench/results."""
    d = Path(out_dir) if out_dir else default_results_dir()
    d.mkdir(parents=True, exist_ok=True)
    return d


def python_path_env() -> str:
    """PYTHONPATH that lets a child `python -m ringzip.bench.*` import this very package."""
    pkg_parent = str(Path(__file__).resolve().parents[2])
    cur = os.environ.get("PYTHONPATH", "")
    parts = [pkg_parent] + [p for p in cur.split(os.pathsep) if p and p != pkg_parent]
    return os.pathsep.join(parts)


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)
