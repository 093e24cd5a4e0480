"""Does ringzip's extension format numbers in its error messages on this machine?

A C++ check with a number in its message (c10::str -> std::ostringstream) runs on the host path
of a world-size-1 CPU group: all_gather with an output list of the wrong length. On the H200
machine of 2026-11-30 (torch 2.11, the extension built there with GCC 13) such formatting crashed
with SIGSEGV inside the extension; bench/gpu_check.sh runs this once per link variant."""
import os
import tempfile

import torch
import torch.distributed as dist

import ringzip  # noqa: F401

store = dist.FileStore(os.path.join(tempfile.mkdtemp(), "s"), 1)
dist.init_process_group("ringzip", store=store, rank=0, world_size=1)
try:
    dist.all_gather([torch.zeros(2), torch.zeros(2)], torch.zeros(2))
    print("stdlib check: no error raised (unexpected)")
except Exception as e:  # noqa: BLE001
    print(f"stdlib check: numeric message ok: {type(e).__name__}: {str(e)[:160]}")
dist.destroy_process_group()
