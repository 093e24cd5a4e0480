"""ringzip: a gradient-compression communication backend for torch.distributed.

``import ringzip`` registers the backend ``ringzip``; then
``torch.distributed.init_process_group("ringzip")`` (or ``"cpu:ringzip,cuda:nccl"``, ...).
"""
import torch  # noqa: F401  (loads libtorch before our extension)

from . import _C
from ._registry import backend_of, register
from .options import Options

__version__ = "0.1.0"

register()

__all__ = ["Options", "backend_of", "__version__"]
