#!/usr/bin/env bash
# Installs a ringzip wheel the way a user would (a fresh venv, torch pulled in by the wheel's own
# pin) and runs a 2-process all-reduce through it, from outside the source tree so that nothing
# can come from the checkout.
# Usage: tools/check_wheel.sh dist/ringzip-*.whl   (PYTHON=... when python3 is not the wheel's Python)
set -euo pipefail
if [ $# -ne 1 ] || [ ! -f "$1" ]; then
  echo "usage: $0 WHEEL" >&2
  exit 2
fi
wheel=$(realpath "$1")
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

"${PYTHON:-python3}" -m venv "$tmp/venv"
start=$SECONDS
"$tmp/venv/bin/pip" install -q "$wheel"
echo "check_wheel: install took $((SECONDS - start)) s"

# A file, not stdin: spawned workers re-import the main module by its path.
cat >"$tmp/smoke.py" <<'PY'
import sys
from datetime import timedelta

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

N = 1 << 20


def data(rank):
    return torch.randn(N, generator=torch.Generator().manual_seed(rank))


def worker(rank, tmp):
    want = data(0) + data(1)
    kw = dict(rank=rank, world_size=2, timeout=timedelta(seconds=60))

    # By name alone: torch has to find the backend through the package's entry point.
    assert "ringzip" not in sys.modules
    dist.init_process_group("ringzip", init_method=f"file://{tmp}/store-plain", **kw)
    got = data(rank)
    dist.all_reduce(got)
    assert torch.allclose(got, want, rtol=1e-6, atol=1e-6), "exact all_reduce differs from the sum"
    dist.destroy_process_group()

    import ringzip

    assert ringzip.__file__.startswith(sys.prefix), f"ringzip imported from {ringzip.__file__}"
    dist.init_process_group("ringzip", init_method=f"file://{tmp}/store-q8",
                            pg_options=ringzip.Options(codec="q8"), **kw)
    got = data(rank)
    dist.all_reduce(got)
    err = ((got - want).norm() / want.norm()).item()
    assert err < 0.05, f"q8 all_reduce: relative error {err:.4f}"
    dist.destroy_process_group()
    if rank == 0:
        print(f"check_wheel: torch {torch.__version__}, exact and q8 all_reduce on 2 ranks "
              f"(q8 relative error {err:.4f})")


if __name__ == "__main__":
    mp.spawn(worker, args=(sys.argv[1],), nprocs=2)
PY
cd "$tmp"
# A rank that dies mid-collective can leave its peer waiting: bound the whole run.
timeout -k 10 300 "$tmp/venv/bin/python" smoke.py "$tmp"
echo "check_wheel: OK"
