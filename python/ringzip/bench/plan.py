"""The sweep plan, computed identically by the launcher and by every rank."""
from __future__ import annotations


def configs(backends: list[str], codecs: list[str], algorithms: list[str],
            hierarchies: list[str] | None = None) -> list[dict]:
    """One configuration per backend x codec x algorithm (x hierarchy, when a list is given:
    flat and node-aware rows of one codec side by side); non-ringzip backends appear once."""
    out = []
    for b in backends:
        if b == "ringzip":
            for c in codecs:
                for a in algorithms:
                    for h in hierarchies or [None]:
                        key = f"{b}/{c}/{a}" + (f"/{h}" if h else "")
                        out.append({"backend": b, "codec": c, "algorithm": a, "hierarchy": h, "key": key})
        else:
            out.append({"backend": b, "codec": "none", "algorithm": "-", "hierarchy": None, "key": b})
    return out


def build_plan(spec: dict) -> list[dict]:
    """Rows in run order: per size, `repeat` rounds of every configuration in turn (so slow
    drifts of a shared machine hit all configurations alike)."""
    reps = int(spec.get("repeat", 1))
    return [{"size": s, "cfg": c, "rep": k} for s in spec["sizes"] for k in range(reps) for c in spec["configs"]]
