"""Prints KEY=value lines about the installed torch for CMakeLists.txt."""
import os

import torch

print(f"TORCH_DIR={os.path.dirname(torch.__file__)}")
print(f"TORCH_VERSION={torch.__version__}")
print(f"TORCH_CUDA={torch.version.cuda or ''}")
print(f"TORCH_CXX11_ABI={int(torch._C._GLIBCXX_USE_CXX11_ABI)}")
arches = [a for a in getattr(torch.cuda, "get_arch_list", lambda: [])() if a.startswith("sm_")]
print("TORCH_CUDA_ARCHES=" + ",".join(a[3:] for a in arches))
try:
    import nvidia.nccl

    print(f"NCCL_DIR={list(nvidia.nccl.__path__)[0]}")
except ImportError:
    print("NCCL_DIR=")
