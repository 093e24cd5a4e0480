"""ringzip: a gradient-compression communication backend for torch.distributed.

``import ringzip`` registers the backend ``ringzip``; then
``torch.distributed.init_process_group("ringzip")`` (or ``"cpu:ringzip,cuda:nccl"``, ...).
Compression is configured with ``pg_options=ringzip.Options(codec="q4")``, RINGZIP_*
environment variables, or ``ringzip.set_options(codec=...)`` at run time. With NCCL in a mixed
backend string, leave pg_options out (torch hands them to NCCL too) and call set_options after
init_process_group. ``ringzip.new_process_group(store, rank, world_size)`` builds a group
outside torch's registry (for libraries that own their groups); ``ringzip.torchft`` is torchft's
process group (``pip install 'ringzip[torchft]'``).
"""
import torch  # noqa: F401  (loads libtorch before our extension)

from . import _C
from ._registry import backend_of, register
from . import hooks
from ._membership import new_process_group
from .api import compress, error_feedback_state, exact, get_options, load_error_feedback_state, set_options, stats
from .options import Options

__version__ = "0.1.0"

register()

__all__ = [
    "Options",
    "backend_of",
    "compress",
    "exact",
    "hooks",
    "error_feedback_state",
    "get_options",
    "load_error_feedback_state",
    "new_process_group",
    "set_options",
    "stats",
    "__version__",
]
