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

Add --net RATE[,DELAY] (root) to run every rank in its own shaped network namespace, and
--nodes N --nproc-per-node P to group the ranks into N emulated machines with one shaped NIC each.
"""
from __future__ import annotations

import argparse
import sys

SUBCOMMANDS = ("collective", "kernels", "train", "grid", "follow", "linkcheck")


def build_parser() -> argparse.ArgumentParser:
    from . import collective, follow, grid, kernels, linkcheck, train

    p = argparse.ArgumentParser(prog="ringzip-bench", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="command")
    c = sub.add_parser("collective", help="collective sweep (default)",
                       formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    collective.add_arguments(c)
    c.add_argument("-q", "--quiet", action="store_true", help="no progress lines on stderr")
    c.set_defaults(func=collective.run)
    k = sub.add_parser("kernels", help="kernel throughput", formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    kernels.add_arguments(k)
    k.set_defaults(func=kernels.run)
    t = sub.add_parser("train", help="DDP training per codec", formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    train.add_arguments(t)
    t.set_defaults(func=train.run)
    g = sub.add_parser("grid", help="auto vs fixed choices", formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    grid.add_arguments(g)
    g.set_defaults(func=grid.run)
    f = sub.add_parser("follow", help="auto under a link rate change",
                       formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    follow.add_arguments(f)
    f.set_defaults(func=follow.run)
    lc = sub.add_parser("linkcheck", help="link ceiling per traffic pattern",
                        formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    linkcheck.add_arguments(lc)
    lc.set_defaults(func=linkcheck.run)
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
