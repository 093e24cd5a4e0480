"""One torchft replica for the fault tests: ``python -m tests.torchft.replica OUT LIGHTHOUSE ID
STEPS NUMEL FAULT``. Each step: quorum, a compressed all-reduce (q4, error feedback) of NUMEL
floats through torchft's Manager, should_commit. One JSON line per step into OUT: the step, whether
it committed, when the all-reduce began and ended (time.time()), the result's digest and its
projection on the input over the input's square (every replica's input is the same and rounding
is unbiased, so the mean of their compressed copies projects to about 1; a lost contribution
would leave 2/3 or less).

Steps are torchft's (a replica that joins late is healed to the others' step); it runs until
step STEPS. FAULT ``none``, or ``WHAT@STEP``: once, at that step or the first after it (a replica
healed late may skip it), a third as far into its all-reduce as the quickest one took, this replica
``kill``s itself (SIGKILL), ``stop``s itself (SIGSTOP: the test kills it later), or with
``killhost`` does so only if it hosts the quorum's store. It writes the moment and the step into
OUT first.
"""
from __future__ import annotations

import hashlib
import json
import os
import signal
import sys
import threading
import time
from datetime import timedelta

import torch

TIMEOUT_S = 5.0  # the group's: a stopped peer fails the step after this


def main(out, lighthouse, me, steps, numel, fault):
    import torchft
    from torch.distributed import TCPStore

    import ringzip
    from ringzip.torchft import ProcessGroupRingzip

    torch.set_num_threads(1)
    what, _, at = fault.partition("@")
    at = int(at) if at else -1
    store = TCPStore("127.0.0.1", 0, is_master=True, wait_for_workers=False)
    pg = ProcessGroupRingzip(ringzip.Options(codec="q4", error_feedback=True, timeout=timedelta(seconds=TIMEOUT_S)),
                             timeout=timedelta(seconds=30))
    configured = []
    configure = pg.configure
    pg.configure = lambda addr, *a, **k: (configured.append(addr), configure(addr, *a, **k))[1]
    manager = torchft.Manager(
        pg=pg, min_replica_size=1, load_state_dict=lambda sd: None, state_dict=lambda: {}, replica_id=f"r{me}",
        store_addr="127.0.0.1", store_port=store.port, rank=0, world_size=1, lighthouse_addr=lighthouse,
        use_async_quorum=False, timeout=timedelta(seconds=30), quorum_timeout=timedelta(seconds=60),
        connect_timeout=timedelta(seconds=30))
    log = open(out, "a")

    def write(row):
        log.write(json.dumps({"replica": me, **row}) + "\n")
        log.flush()

    x = torch.empty(numel)
    fastest = 0.1  # the quickest all-reduce so far (the first ones include a peer's healing)
    while manager.current_step() < steps:
        manager.start_quorum()
        step = manager.current_step()  # torchft's: a replica that joins late is healed to it
        x.copy_(torch.randn(numel, generator=torch.Generator().manual_seed(step)))
        if 0 <= at <= step:
            hosts = configured and configured[-1].startswith(f"127.0.0.1:{store.port}/")
            faulted = any('"fault"' in line for line in open(out))  # once: the retried step goes on
            if (what != "killhost" or hosts) and not faulted:
                sig = signal.SIGSTOP if what == "stop" else signal.SIGKILL

                def fault_now(delay=fastest / 3):  # a third of the way through
                    time.sleep(delay)
                    write({"fault": what, "at": time.time(), "in_step": step})
                    os.kill(os.getpid(), sig)

                threading.Thread(target=fault_now, daemon=True).start()
        began = time.time()
        inp = x.clone()
        manager.allreduce(x).wait()
        ended = time.time()
        fastest = min(fastest, ended - began)
        committed = manager.should_commit()
        write({"step": step, "committed": committed, "began": began, "ended": ended,
               "participants": manager.num_participants(),
               "digest": hashlib.sha256(x.numpy().tobytes()).hexdigest()[:16],
               "scale": float(x.dot(inp) / inp.dot(inp))})
    manager.shutdown(wait=False)


if __name__ == "__main__":
    a = sys.argv[1:]
    main(a[0], a[1], int(a[2]), int(a[3]), int(a[4]), a[5])
