"""What the dask tests of vp-gen and vp-rollout share: a LocalCluster of 2 worker processes on localhost, and
a worker killed while it runs a block (both engines must then compute that block again elsewhere)."""

from __future__ import annotations

import contextlib
import os
import signal
import threading
import time
from typing import Callable


@contextlib.contextmanager
def local_cluster():
    """``(cluster, client)``: 2 single-thread worker processes on 127.0.0.1, no dashboards."""
    import distributed

    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True, host="127.0.0.1",
                                  dashboard_address=None, worker_dashboard_address=None) as c:
        with distributed.Client(c) as client:
            yield c, client


def with_a_worker_killed(client, run: Callable[[], object], *, settle: float, deadline: float) -> dict:
    """Call ``run()`` while a thread SIGKILLs the first worker found busy, ``settle`` seconds into its block
    (inside it, not at its start), trying for ``deadline`` seconds; returns {address: its tasks} of the
    killed worker (empty: none was busy)."""
    pids = client.run(os.getpid)  # worker address -> pid
    killed: dict = {}

    def kill_one_busy_worker():
        end = time.monotonic() + deadline
        while time.monotonic() < end and not killed:
            busy = {w: keys for w, keys in client.processing().items() if keys}
            if busy:
                addr = sorted(busy)[0]
                time.sleep(settle)
                still = client.processing().get(addr)
                if still:  # the worker still has a block: kill it there
                    killed[addr] = still
                    os.kill(pids[addr], signal.SIGKILL)
            time.sleep(0.02)

    killer = threading.Thread(target=kill_one_busy_worker)
    killer.start()
    try:
        run()
    finally:
        killer.join()
    return killed
