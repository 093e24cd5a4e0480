"""DiLoCo across sites: torchft forms the quorums, ringzip compresses the outer step.

Each replica (a site) trains the character-level transformer of ringzip's benchmark (the
Python standard library's sources as text) with its own data for --sync-every inner steps; then
the replicas average their pseudo-gradients (how far each moved) and take one outer Nesterov
step together. The pseudo-gradients travel as ``--codec`` (q4: 4 bits per value, stochastic
rounding, error feedback). Replicas may die and come back: torchft's Manager rebuilds the
process group without them, and a replica that comes back is healed from a peer.

    python examples/diloco.py                        # 3 replicas on this machine, q4
    python examples/diloco.py --codec none           # the same, exact (torchft + ringzip fp32)
    python examples/diloco.py --replicas 2 --outer-steps 20 --kill 1:4

Needs ``pip install 'ringzip[torchft]'``. With no --replica it starts torchft's Lighthouse and
one process per replica, and checks at the end that every replica holds the same parameters;
across machines, start torchft's Lighthouse once and this script with ``--replica I
--lighthouse http://HOST:PORT --host THIS_HOST`` on each site (``GLOO_SOCKET_IFNAME`` naming the
interface the sites reach each other through).
"""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from datetime import timedelta

import torch


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--replicas", type=int, default=3, help="replicas started on this machine")
    p.add_argument("--min-replicas", type=int, default=1, help="the fewest replicas a step may run with")
    p.add_argument("--codec", default="q4",
                   help="ringzip codec of the pseudo-gradients (none: exact; gloo: torchft's gloo group instead)")
    p.add_argument("--outer-steps", type=int, default=8)
    p.add_argument("--sync-every", type=int, default=10, help="inner steps per outer step")
    p.add_argument("--kill", action="append", default=[], metavar="REPLICA:STEP",
                   help="SIGKILL this replica when it reaches this outer step, then start it again")
    p.add_argument("--timeout", type=float, default=30.0, help="seconds before a step with a dead peer fails")
    p.add_argument("--link-gbit", type=float, default=0.0,
                   help="each site's link to the others, Gbit/s, where you know it (ringzip.Options(link_gbit=...))")
    p.add_argument("--replica", type=int, help="run this one replica (across machines; with --lighthouse)")
    p.add_argument("--lighthouse", help="the Lighthouse's address (http://HOST:PORT) for --replica")
    p.add_argument("--host", default="127.0.0.1", help="the address the other replicas reach this one at")
    p.add_argument("--out", help=argparse.SUPPRESS)
    return p.parse_args(argv)


def digest(model) -> str:
    h = hashlib.sha256()
    for p in model.parameters():
        h.update(p.detach().contiguous().view(torch.uint8).numpy().tobytes())
    return h.hexdigest()[:16]


def replica(args) -> None:
    import torchft
    from torch.distributed import TCPStore
    from torchft.local_sgd import DiLoCo

    import ringzip
    from ringzip.bench.lab.tasks import charlm
    from ringzip.torchft import ProcessGroupRingzip

    torch.set_num_threads(1)
    cfg = dict(charlm.DEFAULTS)
    data = charlm.load(cfg)
    torch.manual_seed(0)  # every replica starts from the same model
    model = charlm.model(cfg)
    inner = torch.optim.AdamW(model.parameters(), lr=cfg["lr"])
    outer = torch.optim.SGD(model.parameters(), lr=0.7, momentum=0.9, nesterov=True)

    def state_dict():
        return {"model": model.state_dict(), "inner": inner.state_dict()}

    def load_state_dict(sd):
        model.load_state_dict(sd["model"])
        inner.load_state_dict(sd["inner"])

    # The replica's own store (torchft's Manager joins it; one rank per replica here).
    store = TCPStore(args.host, 0, is_master=True, wait_for_workers=False)
    # Every value of the pseudo-gradients compressed (min_numel=0: the biases too), with error
    # feedback: what rounding leaves out of one outer step goes out with the next.
    if args.codec == "gloo":  # the baseline: torchft's own gloo group, float32 on the wire
        from torchft.process_group import ProcessGroupGloo
        pg = ProcessGroupGloo(timeout=timedelta(seconds=args.timeout))
    else:
        pg = ProcessGroupRingzip(ringzip.Options(codec=args.codec, error_feedback=True, min_numel=0,
                                                 link_gbit=args.link_gbit),
                                 timeout=timedelta(seconds=args.timeout))
    manager = torchft.Manager(
        pg=pg, min_replica_size=args.min_replicas, load_state_dict=load_state_dict, state_dict=state_dict,
        replica_id=f"site{args.replica}", store_addr=args.host, store_port=store.port, rank=0, world_size=1,
        hostname=args.host,
        lighthouse_addr=args.lighthouse, use_async_quorum=False, timeout=timedelta(seconds=args.timeout),
        quorum_timeout=timedelta(seconds=120), connect_timeout=timedelta(seconds=60))
    kill_at = {int(s) for r, s in (k.split(":") for k in args.kill) if int(r) == args.replica}
    log = open(args.out, "a") if args.out else None
    inner_step, last = 0, manager.current_step()
    with DiLoCo(manager, [model], inner, outer, sync_every=args.sync_every):
        while manager.current_step() < args.outer_steps:
            if manager.current_step() in kill_at and not os.environ.get("DILOCO_RESTARTED"):
                os.kill(os.getpid(), signal.SIGKILL)  # the launcher starts it again
            x, y = charlm.batch(data, cfg, 0, inner_step, args.replica, args.replicas)
            loss = charlm.loss(model, x, y)
            inner.zero_grad()
            loss.backward()
            inner.step()  # DiLoCo's hook: every sync_every inner steps, the outer step
            inner_step += 1
            if manager.current_step() != last:  # an outer step committed
                last = manager.current_step()
                with torch.no_grad():
                    num, den = charlm.evaluate(model, data, cfg, 0, 1).tolist()
                row = {"replica": args.replica, "step": last, "t": time.time(), "digest": digest(model),
                       "val_bpc": round(charlm.metric(num, den), 4), "participants": manager.num_participants()}
                print(json.dumps(row), flush=True)
                if log:
                    log.write(json.dumps(row) + "\n")
                    log.flush()
    manager.shutdown(wait=False)


def launch(args) -> int:
    os.environ.setdefault("RUST_LOG", "warn")  # torchft's quorum log, line by line, otherwise
    from torchft.coordination import LighthouseServer

    lighthouse = LighthouseServer(bind="[::]:0", min_replicas=args.min_replicas, join_timeout_ms=1000)
    out = os.path.join(tempfile.mkdtemp(prefix="diloco-"), "steps.jsonl")
    base = [sys.executable, os.path.abspath(__file__), "--lighthouse", lighthouse.address(), "--out", out,
            "--replicas", str(args.replicas), "--min-replicas", str(args.min_replicas), "--codec", args.codec,
            "--outer-steps", str(args.outer_steps), "--sync-every", str(args.sync_every),
            "--timeout", str(args.timeout)] + [a for k in args.kill for a in ("--kill", k)]

    def start(i, again=False):
        env = dict(os.environ, **({"DILOCO_RESTARTED": "1"} if again else {}))
        return subprocess.Popen(base + ["--replica", str(i)], env=env)

    procs = {i: start(i) for i in range(args.replicas)}
    restarted, rc = set(), 0
    while procs:
        time.sleep(0.2)
        for i, p in list(procs.items()):
            code = p.poll()
            if code is None:
                continue
            if code == -signal.SIGKILL and i not in restarted and len(procs) > 1:  # it rejoins the others
                print(f"replica {i} was killed; starting it again", flush=True)
                restarted.add(i)
                procs[i] = start(i, again=True)
                continue
            del procs[i]
            rc = rc or code
    lighthouse.shutdown()
    rows = [json.loads(line) for line in open(out)]
    by_step = {}
    for r in rows:
        by_step.setdefault(r["step"], set()).add(r["digest"])
    split = sorted(s for s, d in by_step.items() if len(d) > 1)
    print(f"{len(by_step)} outer steps; replicas {'differ after steps ' + str(split) if split else 'identical after every one'}; "
          f"last val_bpc {rows[-1]['val_bpc'] if rows else float('nan')}")
    return rc or (1 if split or not rows else 0)


def main(argv=None) -> int:
    args = parse_args(argv)
    if args.replica is not None:
        replica(args)
        return 0
    return launch(args)


if __name__ == "__main__":
    sys.exit(main())
