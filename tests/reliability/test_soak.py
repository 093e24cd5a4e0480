"""Short soak (python -m ringzip.bench.lab.soak --collectives 2000): two groups from two threads, every codec,
sizes 0..16 MB, sync and async; results checked, RSS growth < 5% after warm-up, no leaked
threads or file descriptors after destroy_process_group."""
import json
import os
import subprocess
import sys

import ringzip

# The ringzip under test (installed, or the tree on PYTHONPATH): the soak process imports it too.
PYDIR = os.path.dirname(os.path.dirname(os.path.abspath(ringzip.__file__)))


def test_short_soak(tmp_path):
    out = tmp_path / "soak.json"
    env = dict(os.environ, PYTHONPATH=PYDIR + os.pathsep + os.environ.get("PYTHONPATH", ""))
    p = subprocess.run([sys.executable, "-m", "ringzip.bench.lab.soak", "--collectives", "2000",
                        "--hard-timeout", "110", "--timeout", "60", "--json", str(out)],
                       env=env, capture_output=True, text=True, timeout=120)
    assert out.exists(), p.stderr[-3000:]
    res = json.loads(out.read_text())
    assert res["ok"], json.dumps(res["problems"], indent=1)
    for r in res["ranks"]:
        assert r["collectives"] == 2000
        assert r["rss_growth"] < 0.05
