"""One rank of the multi-process CUDA tests (run by test_multiprocess_cuda.py with a hard timeout).

argv: rank world store_file mode out_json    mode: gloo | nccl
Every case all-reduces the same data as a CUDA tensor and as a CPU tensor; the CPU tensor takes
the host path (CPU kernels over Gloo), so equal bits check the CUDA path end to end.
"""
import json
import os
import sys
import traceback
from datetime import timedelta

import torch
import torch.distributed as dist

rank, world, store_file, mode, out = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3], sys.argv[4], sys.argv[5]
if mode == "gloo":
    os.environ["RINGZIP_TRANSPORT"] = "gloo"
else:
    os.environ.setdefault("NCCL_MULTI_RANK_GPU_ENABLE", "1")
import ringzip  # noqa: E402

result = {"rank": rank, "cases": [], "error": None}
try:
    torch.cuda.set_device(0)  # every rank shares GPU 0
    store = dist.FileStore(store_file, world)
    dist.init_process_group("ringzip", store=store, rank=rank, world_size=world, timeout=timedelta(seconds=60))
    n = 100_003
    cases = [("none", "auto"), ("none", "ring"), ("none", "rd"), ("fp16", "auto"), ("bf16", "ring"),
             ("q8", "sra"), ("q4", "ring"), ("q4", "sra"), ("q2", "auto"), ("q1", "sra"),
             ("topk:0.01", "auto"), ("randomk:0.05", "auto")]
    for i, (codec, algo) in enumerate(cases):
        # nearest rounding: the CPU and CUDA calls have different sequence numbers (RNG keys)
        ringzip.set_options(codec=codec, algorithm=algo, min_numel=0, error_feedback=False, seed=11,
                            rounding="nearest")
        g = torch.Generator().manual_seed(100 * i + rank)
        # Exact calls: integer values, so any summation order (NCCL's own all-reduce, 3 ranks)
        # gives the host path's bits.
        x = torch.randint(-3, 4, (n,), generator=g).float() if codec == "none" else torch.randn(n, generator=g)
        a, b = x.clone(), x.cuda()
        dist.all_reduce(a)
        try:
            dist.all_reduce(b)
            torch.cuda.synchronize()
        except Exception as e:  # noqa: BLE001
            if "could not create the NCCL communicator" in str(e):
                result["nccl_init_failed"] = str(e)[:500]
                break
            raise
        bc = b.cpu()
        if codec.startswith("randomk"):  # the selection depends on the sequence number
            same = int((a != 0).sum()) == int((bc != 0).sum())
        else:
            same = bool(torch.equal(a.view(torch.int32), bc.view(torch.int32)))
        result["cases"].append({"codec": codec, "algorithm": algo, "same": same,
                                "max_diff": float((a - bc).abs().max())})
    if "nccl_init_failed" not in result:
        # broadcast and allgather on CUDA tensors
        ringzip.set_options(codec="none", algorithm="auto")
        t = torch.full((1000,), float(rank), device="cuda")
        dist.broadcast(t, src=world - 1)
        outp = torch.empty(1000 * world, device="cuda")
        dist.all_gather_into_tensor(outp, torch.full((1000,), float(rank), device="cuda"))
        ok = bool((t == world - 1).all()) and bool(torch.equal(outp.cpu(), torch.arange(world).repeat_interleave(1000).float()))
        result["cases"].append({"codec": "broadcast+allgather", "algorithm": "-", "same": ok, "max_diff": 0.0})
        dist.barrier()
    dist.destroy_process_group()
except Exception:  # noqa: BLE001
    result["error"] = traceback.format_exc()[-3000:]
with open(out, "w") as f:
    json.dump(result, f)
