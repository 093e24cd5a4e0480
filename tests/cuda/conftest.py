"""CUDA tests: skipped, with the reason, where there is no GPU or no CUDA build."""
import pytest
import torch

import ringzip


def cuda_skip_reason():
    if not hasattr(ringzip._C, "cuda"):
        return "ringzip was built without CUDA (torch without CUDA, no nvcc, or RINGZIP_CUDA=0)"
    if not torch.cuda.is_available():
        return "no CUDA device visible"
    return None


def pytest_collection_modifyitems(config, items):
    reason = cuda_skip_reason()
    for item in items:
        if "tests/cuda" in str(item.fspath).replace("\\", "/"):
            item.add_marker(pytest.mark.cuda)
            if reason:
                item.add_marker(pytest.mark.skip(reason=reason))
