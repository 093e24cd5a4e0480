"""examples/diloco.py as a user runs it: 3 local replicas, one SIGKILLed at an outer step and
started again; the launcher must report every outer step with identical replicas and exit 0."""
from __future__ import annotations

import os
import subprocess
import sys

import pytest

pytest.importorskip("torchft")

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def test_diloco_example_with_a_replica_killed():
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    try:
        res = subprocess.run([sys.executable, "examples/diloco.py", "--outer-steps", "16", "--sync-every", "5",
                              "--kill", "1:2", "--timeout", "10"], cwd=ROOT, env=env, capture_output=True,
                             text=True, timeout=300)
    except subprocess.TimeoutExpired as e:
        raise AssertionError(f"examples/diloco.py hung: {(e.stdout or '')[-2000:]}") from None
    out = res.stdout
    assert res.returncode == 0, out[-3000:] + res.stderr[-3000:]
    assert "replica 1 was killed; starting it again" in out, out[-2000:]
    assert "16 outer steps; replicas identical after every one" in out, out[-2000:]
