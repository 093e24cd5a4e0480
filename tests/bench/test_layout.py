"""The bench's one rule of layout (docs/design.md, "The benchmark"): the studies in lab/ build on
the core, and the core never imports them; cli.py alone names lab's subcommands."""
import ast
from pathlib import Path

import ringzip.bench

CORE = Path(ringzip.bench.__file__).parent


def _imports_lab(node) -> bool:
    if isinstance(node, ast.Import):
        return any(a.name.startswith("ringzip.bench.lab") for a in node.names)
    if isinstance(node, ast.ImportFrom):
        mod = node.module or ""
        if node.level:
            return mod.split(".")[0] == "lab" or (not mod and any(a.name == "lab" for a in node.names))
        named = any(a.name == "lab" for a in node.names)
        return mod.startswith("ringzip.bench.lab") or (mod == "ringzip.bench" and named)
    return False


def test_the_core_never_imports_lab():
    offenders = [p.name for p in sorted(CORE.glob("*.py")) if p.name != "cli.py"
                 and any(_imports_lab(n) for n in ast.walk(ast.parse(p.read_text())))]
    assert not offenders
    assert any(_imports_lab(n) for n in ast.walk(ast.parse((CORE / "cli.py").read_text())))
