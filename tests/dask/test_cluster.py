"""Real Dask clusters on btl://: a LocalCluster with two worker processes, and a scheduler and
a worker started by hand with the ``dask`` command, computing known answers."""

from __future__ import annotations

import operator
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytest.importorskip("distributed")
da = pytest.importorskip("dask.array")

from functools import partial  # noqa: E402

from distributed import Client, LocalCluster  # noqa: E402

# (a function a scheduler in another process can unpickle: this test module is not importable there)
inc = partial(operator.add, 1)


def _job(client: Client) -> tuple[int, int]:
    """A dask.array reduction and many small tasks: (sum of 0..N-1, sum of inc over 0..299)."""
    x = da.arange(2_000_000, chunks=100_000)
    total = int(x.sum().compute())
    futures = client.map(inc, range(300), pure=False)
    return total, int(sum(client.gather(futures)))


EXPECTED = (2_000_000 * 1_999_999 // 2, sum(range(1, 301)))


def test_local_cluster_with_two_worker_processes_on_btl() -> None:
    with LocalCluster(n_workers=2, threads_per_worker=1, processes=True, protocol="btl://",
                      dashboard_address=None) as cluster, Client(cluster) as client:
        assert cluster.scheduler_address.startswith("btl://127.0.0.1:")
        workers = client.scheduler_info()["workers"]
        assert len(workers) == 2 and all(w.startswith("btl://") for w in workers)
        assert _job(client) == EXPECTED
        # the workers' own comms (to the scheduler, to each other) are btl:// too
        pids = client.run(os.getpid)
        assert len(set(pids.values())) == 2 and os.getpid() not in pids.values()


def _dask_cli() -> str:
    exe = Path(sys.executable).parent / "dask"
    if exe.exists():
        return str(exe)
    found = shutil.which("dask")
    if found is None:
        pytest.skip("the dask command is not installed")
    return found


def test_dask_scheduler_and_worker_commands_on_btl(tmp_path: Path) -> None:
    dask = _dask_cli()
    sched_file = tmp_path / "scheduler.json"
    env = {**os.environ, "DASK_DISTRIBUTED__WORKER__DAEMON": "False"}
    scheduler = subprocess.Popen([dask, "scheduler", "--protocol", "btl", "--host", "127.0.0.1", "--port", "0",
                                  "--scheduler-file", str(sched_file), "--no-dashboard"],
                                 stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=env)
    worker = None
    try:
        deadline = time.monotonic() + 60
        while not sched_file.exists():
            assert scheduler.poll() is None, scheduler.stderr.read() if scheduler.stderr else ""
            assert time.monotonic() < deadline, "the scheduler did not start"
            time.sleep(0.1)
        import json

        address = json.loads(sched_file.read_text())["address"]
        assert address.startswith("btl://127.0.0.1:")
        worker = subprocess.Popen([dask, "worker", address, "--nthreads", "1", "--no-dashboard",
                                   "--host", "127.0.0.1"],
                                  stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
        with Client(address, timeout=60) as client:
            client.wait_for_workers(1, timeout=60)
            assert all(w.startswith("btl://") for w in client.scheduler_info()["workers"])
            assert _job(client) == EXPECTED
    finally:
        for proc in (worker, scheduler):
            if proc is not None:
                proc.terminate()
        for proc in (worker, scheduler):
            if proc is not None:
                try:
                    proc.wait(timeout=20)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()
