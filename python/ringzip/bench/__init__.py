"""ringzip.bench: the `ringzip-bench` microbenchmark CLI.

The core, here: what measures the collectives and the kernels (collective.py, worker.py,
kernels.py, ops.py, plan.py, report.py), starts and follows ranks (launch.py, rank.py,
netem.py for --net and --nodes) and the CLI (cli.py). Every study built on it lives in lab/.
The core never imports lab/; cli.py alone names lab's subcommands.

Run `ringzip-bench --help` or `python -m ringzip.bench --help`.
"""
