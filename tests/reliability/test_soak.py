"""Short soak (python -m ringzip.bench.lab.soak --collectives 2000): two groups from two threads (one over
shared memory, one over Gloo's TCP), every codec and codec="auto", sizes 0..16 MB, sync and async;
also with 4 ranks on two emulated nodes, the default group node-aware. Results checked, ranks
bit-identical, RSS growth < 5% after warm-up, no leaked threads or file descriptors after
destroy_process_group."""
import pytest
import json
import os
import subprocess
import sys

import ringzip

# The ringzip under test (installed, or the tree on PYTHONPATH): the soak process imports it too.
PYDIR = os.path.dirname(os.path.dirname(os.path.abspath(ringzip.__file__)))


@pytest.mark.parametrize("world,nodes", [(2, 1), (4, 2)], ids=["one_node", "two_nodes"])
def test_short_soak(tmp_path, world, nodes):
    out = tmp_path / "soak.json"
    env = dict(os.environ, PYTHONPATH=PYDIR + os.pathsep + os.environ.get("PYTHONPATH", ""))
    p = subprocess.run([sys.executable, "-m", "ringzip.bench.lab.soak", "--collectives", "2000", "--world", str(world),
                        "--nodes", str(nodes), "--hard-timeout", "170", "--timeout", "60", "--json", str(out)],
                       env=env, capture_output=True, text=True, timeout=180)
    assert out.exists(), p.stderr[-3000:]
    res = json.loads(out.read_text())
    assert res["ok"], json.dumps(res["problems"], indent=1)
    assert res["world"] == world and res["nodes"] == nodes and res["second_transport"] == "gloo"
    for r in res["ranks"]:
        assert r["collectives"] == 2000
        assert r["rss_growth"] < 0.05
