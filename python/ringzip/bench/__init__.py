"""ringzip.bench: the `ringzip-bench` microbenchmark CLI (collective sweeps, kernels, training).

Run `ringzip-bench --help` or `python -m ringzip.bench --help`.
"""
