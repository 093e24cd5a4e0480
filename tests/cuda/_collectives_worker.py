"""One rank of the 2-rank CUDA collective sweep (run by test_multiprocess_cuda.py under a hard
timeout): every case of _cases.py on CPU tensors, then on CUDA tensors, compared bit for bit.

argv: rank world store_file out_json
"""
import json
import os
import sys
import traceback
from datetime import timedelta

os.environ.setdefault("NCCL_MULTI_RANK_GPU_ENABLE", "1")
os.environ.pop("RINGZIP_TRANSPORT", None)

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import _cases  # noqa: E402

import ringzip  # noqa: E402,F401

rank, world, store_file, out = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3], sys.argv[4]
result = {"rank": rank, "passed": [], "failed": {}, "error": None}
try:
    torch.cuda.set_device(0)  # every rank shares GPU 0
    store = dist.FileStore(store_file, world)
    dist.init_process_group("ringzip", store=store, rank=rank, world_size=world, timeout=timedelta(seconds=60))
    table = _cases.cases(world)
    for name, fn in table.items():
        try:
            _cases.run(name, fn, rank, world)
            result["passed"].append(name)
        except AssertionError as e:  # a wrong result: the group is still in step
            result["failed"][name] = str(e)[:600]
        except Exception as e:  # noqa: BLE001 -- the group may be unusable now: stop here
            if "could not create the NCCL communicator" in str(e):
                result["nccl_init_failed"] = str(e)[:500]
            else:
                result["failed"][name] = traceback.format_exc()[-1500:]
            break
    dist.destroy_process_group()
except Exception:  # noqa: BLE001
    result["error"] = traceback.format_exc()[-3000:]
with open(out, "w") as f:
    json.dump(result, f)
