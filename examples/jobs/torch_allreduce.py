#!/usr/bin/env python3
"""A torch.distributed job on CPUs (the gloo backend): every iteration all-reduces a tensor of --size-kb
(gloo's ring algorithm for CPU tensors) and prints one JSON line on stdout, {"t": <unix time it completed>,
"dur": <its seconds>}: the per-iteration contract of hpnlab's command workload.

It takes its rank and rendezvous from the environment, as torchrun's ranks do (RANK, WORLD_SIZE,
MASTER_ADDR, MASTER_PORT; GLOO_SOCKET_IFNAME for the interface its connections use); hpnlab's command
workload sets them per rank. Run by hand, two ranks on one machine:

    MASTER_ADDR=127.0.0.1 MASTER_PORT=29500 WORLD_SIZE=2 RANK=0 python examples/jobs/torch_allreduce.py &
    MASTER_ADDR=127.0.0.1 MASTER_PORT=29500 WORLD_SIZE=2 RANK=1 python examples/jobs/torch_allreduce.py

It runs until --iterations are done, or until SIGTERM or SIGINT, and then exits 0 at once: an all-reduce
blocked on a dead path cannot be interrupted from Python, so the collective runs in a thread and the main
thread only waits for the signal (nothing is torn down: a peer still in its all-reduce would wait for this
rank's part until its timeout).
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import signal
import sys
import threading
import time


def loop(size_kb: int, iterations: int, timeout: float, state: dict) -> None:
    import torch
    import torch.distributed as dist

    try:
        dist.init_process_group("gloo", init_method="env://", timeout=datetime.timedelta(seconds=timeout))
        x = torch.ones(size_kb * 1024 // 4, dtype=torch.float32)
        k = 0
        while not iterations or k < iterations:
            t = time.time()
            dist.all_reduce(x)
            x.div_(dist.get_world_size())  # keep the values bounded
            print(json.dumps({"t": round(time.time(), 6), "dur": round(time.time() - t, 6)}), flush=True)
            k += 1
        state["done"] = k
    except BaseException as e:  # noqa: BLE001 - a failed collective ends the job with its reason on stderr
        state["error"] = f"{e.__class__.__name__}: {e}"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--size-kb", type=int, default=1024, help="bytes each iteration all-reduces, KB (float32)")
    ap.add_argument("--iterations", type=int, default=0, help="stop after this many (default: run until signalled)")
    ap.add_argument("--timeout", type=float, default=120.0, help="gloo's collective timeout, seconds")
    a = ap.parse_args(argv)
    if a.size_kb < 1 or a.iterations < 0 or a.timeout <= 0:
        ap.error("--size-kb >= 1, --iterations >= 0, --timeout > 0")
    # the collective thread inherits this mask: only the main thread takes SIGTERM/SIGINT, in sigtimedwait
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM, signal.SIGINT})
    state: dict = {}
    worker = threading.Thread(target=loop, args=(a.size_kb, a.iterations, a.timeout, state), daemon=True)
    worker.start()
    while worker.is_alive():
        sig = signal.sigtimedwait({signal.SIGTERM, signal.SIGINT}, 0.2)
        if sig is not None:
            print(f"rank {os.environ.get('RANK')}: {signal.Signals(sig.si_signo).name}, exiting", file=sys.stderr,
                  flush=True)
            sys.stdout.flush()
            os._exit(0)  # not through interpreter shutdown: the blocked collective thread would hold it
    if "error" in state:
        print(f"rank {os.environ.get('RANK')}: {state['error']}", file=sys.stderr, flush=True)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
