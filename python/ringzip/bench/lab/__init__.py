"""ringzip.bench.lab: the studies built on the bench's core (ringzip.bench).

Subcommands of `ringzip-bench`: train.py (DDP training; with --task, tta.py: time to accuracy
on the real data of tasks/), grid.py (codec and algorithm "auto" against every fixed choice),
follow.py (auto under a link rate change), linkcheck.py (what the emulated links carry).
Run on their own, `python -m ringzip.bench.lab.NAME --help`: scale_model (flat vs node-aware on
paper), check_cost, deterministic_cost, repro_check, shm_vs_gloo, soak, and the GPU's
gpu_smoke and gpu_kernels (driven by bench/gpu_check.sh).

A study imports from the core, never the reverse; its results go to bench/results/.
"""
