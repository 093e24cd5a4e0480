"""First check after a GPU build (bench/gpu_check.sh): a world-size-1 ringzip group, one exact
and one q4 all-reduce of a CUDA tensor through the NCCL transport, checked against the input, and
an error message with a number in it (on the H200 machine of 2026-11-30 every number the
extension formatted through iostreams crashed it, until libstdc++ was linked in: CMakeLists.txt).
Prints one line per step, so a later hang still leaves the basics on record."""
import os
import sys
import tempfile
from datetime import timedelta

import torch
import torch.distributed as dist

import ringzip

print("ringzip", ringzip.__file__, "cuda module:", hasattr(ringzip._C, "cuda"), flush=True)
print("nccl (linked):", ringzip._C.cuda.nccl_version(), " torch:", torch.__version__,
      "torch's nccl:", ".".join(map(str, torch.cuda.nccl.version())), flush=True)
store = dist.FileStore(os.path.join(tempfile.mkdtemp(), "store"), 1)
dist.init_process_group("ringzip", store=store, rank=0, world_size=1, timeout=timedelta(seconds=30))
print("cuda path enabled:", ringzip._C.cuda.enabled(ringzip.backend_of()), flush=True)
x = torch.randn(1 << 20, device="cuda")
y = x.clone()
dist.all_reduce(y)
torch.cuda.synchronize()
print("exact all_reduce, world 1: equal", torch.equal(x, y), flush=True)
ringzip.set_options(codec="q4", min_numel=0)
z = x.clone()
dist.all_reduce(z)
torch.cuda.synchronize()
rel = ((z - x).norm() / x.norm()).item()
print(f"q4 all_reduce, world 1: rel-L2 {rel:.3e} (q4 at world 1 is exact or quantized, by design)", flush=True)
try:
    dist.all_gather([torch.zeros(2), torch.zeros(2)], torch.zeros(2))  # a list of 2 for 1 rank
    sys.exit("smoke: all_gather with a wrong output list raised nothing")
except ValueError as e:
    print(f"error message with numbers: {str(e)[:120]}", flush=True)
dist.destroy_process_group()
print("smoke ok", flush=True)
sys.exit(0)
