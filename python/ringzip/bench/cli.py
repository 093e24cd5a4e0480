"""Entry point of `ringzip-bench` (also `python -m ringzip.bench`).

    ringzip-bench                          the default sweep (= collective --preset default):
                                           allreduce, 4 ranks, 4 B..64 MB, ringzip codecs vs gloo,
                                           results under bench/results/
    ringzip-bench collective [options]     nccl-tests-style sweep (the default subcommand)
    ringzip-bench kernels [options]        codec kernel throughput (memcpy, casts, codecs)
    ringzip-bench train [options]          small DDP training run per codec, side by side
    ringzip-bench grid [options]           codec/algorithm "auto" vs every fixed choice over sizes x
                                           links x world sizes (= collective --preset auto_grid)
    ringzip-bench follow [options]         codec "auto" while the emulated link's rate changes
    ringzip-bench linkcheck --net RATE     what the emulated links carry per traffic pattern
                                           (ring vs all-to-all, plain TCP): the ceiling of eff
    ringzip-bench simulate [options]       replay the messages a schedule really posts (recorded
                                           over the loopback transport) through a link and kernel
                                           model: machines x ranks this host cannot run

Add --net RATE[,DELAY[,LOSS]][,LINK] (root) to run every rank in its own shaped network namespace, and
--nodes N --nproc-per-node P to group the ranks into N emulated machines with one shaped NIC each.
"""
from __future__ import annotations

import argparse
import sys

SUBCOMMANDS = ("collective", "kernels", "train", "grid", "follow", "linkcheck", "simulate")


def build_parser() -> argparse.ArgumentParser:
    from . import collective, kernels, simulate
    from .lab import follow, grid, linkcheck, train, tta

    p = argparse.ArgumentParser(prog="ringzip-bench", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="command")

    def command(name, summary, *modules, func=None):
        c = sub.add_parser(name, help=summary, formatter_class=argparse.ArgumentDefaultsHelpFormatter)
        for m in modules:
            m.add_arguments(c)
        c.set_defaults(func=func or modules[0].run)
        return c

    command("collective", "collective sweep (default)", collective).add_argument(
        "-q", "--quiet", action="store_true", help="no progress lines on stderr")
    command("kernels", "kernel throughput", kernels)
    command("train", "DDP training per codec", train, tta,
            func=lambda a: (train.run if a.task == "synthetic" else tta.run)(a))
    command("grid", "auto vs fixed choices", grid)
    command("follow", "auto under a link rate change", follow)
    command("linkcheck", "link ceiling per traffic pattern", linkcheck)
    command("simulate", "replay recorded schedules on modelled links", simulate)
    return p


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv:
        argv = ["collective", "--preset", "default"]
    elif argv[0] not in SUBCOMMANDS and argv[0] not in ("-h", "--help"):
        argv = ["collective", *argv]
    if argv[0] == "collective" and "auto_grid" in argv:  # the grid is its own subcommand
        i = argv.index("auto_grid")
        if i > 0 and argv[i - 1] == "--preset":
            argv = ["grid", *argv[1:i - 1], *argv[i + 1:]]
    parser = build_parser()
    args = parser.parse_args(argv)
    args.argv = argv
    try:
        return int(args.func(args) or 0)
    except ValueError as e:  # bad sizes, rates, dtypes: a clear message, not a traceback
        parser.exit(2, f"ringzip-bench: error: {e}\n")
    except KeyboardInterrupt:
        return 130
