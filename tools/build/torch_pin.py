"""scikit-build-core metadata provider: pins the torch minor the wheel is built against.

c10d's Backend class changes layout between torch minors, so a wheel only works
with the torch it was compiled against.
"""


def dynamic_metadata(field, settings=None, project=None):
    import torch

    major, minor = (int(x) for x in torch.__version__.split("+")[0].split(".")[:2])
    if field == "dependencies":
        return [f"torch>={major}.{minor},<{major}.{minor + 1}"]
    raise ValueError(f"torch_pin provides only 'dependencies', not {field!r}")
