"""examples/ddp_train.py runs under torchrun with 4 processes (hard timeout) and trains."""
from __future__ import annotations

import os
import re
import signal
import subprocess
import sys

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TIMEOUT = 150


def test_torchrun_example():
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "4",
           os.path.join(REPO, "examples", "ddp_train.py"), "--steps", "20"]
    env = dict(os.environ, OMP_NUM_THREADS="1")
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env, cwd=REPO,
                            start_new_session=True, text=True)
    try:
        out, _ = proc.communicate(timeout=TIMEOUT)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, _ = proc.communicate()
        raise AssertionError(f"torchrun did not finish within {TIMEOUT} s:\n{out[-6000:]}")
    assert proc.returncode == 0, f"torchrun exited with {proc.returncode}:\n{out[-6000:]}"
    losses = [float(v) for v in re.findall(r"step +\d+ +loss ([0-9.eE+-]+)", out)]
    assert len(losses) >= 4, f"expected loss lines from rank 0:\n{out[-3000:]}"
    assert losses[-1] < losses[0], f"loss did not decrease: {losses}"
    assert re.search(r"OK: 4 ranks", out), out[-3000:]
