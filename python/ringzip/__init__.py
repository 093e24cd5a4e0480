"""ringzip: a gradient-compression communication backend for torch.distributed."""
import torch  # noqa: F401  (loads libtorch before our extension)

from . import _C  # noqa: F401

__version__ = "0.1.0"
