"""A real Dask cluster on loopback for tests and benchmarks: `dask scheduler` and `dask worker`
processes from this interpreter's environment, on free ports, killed when the block ends."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import orjson

DASK = Path(sys.executable).parent / "dask"
START_TIMEOUT_S = 60.0


@dataclass
class Cluster:
    """A running scheduler and its workers."""

    address: str
    scheduler: subprocess.Popen[bytes]
    workers: list[subprocess.Popen[bytes]] = field(default_factory=list)
    logs: Path | None = None
    scheduler_file: Path | None = None
    """The scheduler's address file (`dask scheduler --scheduler-file`), also accepted by `--scheduler`."""

    def worker_pids(self) -> dict[str, int]:
        """Worker address → pid of the process running its tasks, as the scheduler knows them."""
        from distributed import Client

        with Client(self.address, timeout=10, set_as_default=False) as client:
            return client.run(os.getpid)


def _wait(until: object, what: str, procs: list[subprocess.Popen[bytes]], logs: Path) -> None:
    deadline = time.monotonic() + START_TIMEOUT_S
    while not until():  # type: ignore[operator]
        for p in procs:
            if p.poll() is not None:
                raise RuntimeError(f"{what}: a process exited with {p.returncode}; logs in {logs}")
        if time.monotonic() > deadline:
            raise RuntimeError(f"{what}: not ready after {START_TIMEOUT_S} s; logs in {logs}")
        time.sleep(0.1)


@contextmanager
def dask_cluster(
    tmp: Path, *, workers: int = 2, nanny: bool = True, cwd: Path | None = None, env: dict[str, str] | None = None
) -> Iterator[Cluster]:
    """A scheduler and `workers` single-threaded workers on 127.0.0.1 (ports picked by the OS), run
    in `cwd` (default: this process's) with `env` added to the environment (Dask settings such as
    `DASK_DISTRIBUTED__SCHEDULER__ALLOWED_FAILURES`); every process is killed when the block ends."""
    tmp.mkdir(parents=True, exist_ok=True)
    scheduler_file = tmp / "scheduler.json"
    scheduler_file.unlink(missing_ok=True)  # a file from an earlier cluster names a dead scheduler
    env = {**os.environ, **(env or {})}
    procs: list[subprocess.Popen[bytes]] = []

    def start(args: list[str], log: str) -> subprocess.Popen[bytes]:
        with open(tmp / log, "wb") as out:
            p = subprocess.Popen(
                [str(DASK), *args], stdout=out, stderr=subprocess.STDOUT, cwd=cwd, env=env, start_new_session=True
            )
        procs.append(p)
        return p

    try:
        scheduler = start(
            ["scheduler", "--host", "127.0.0.1", "--port", "0", "--no-dashboard", "--scheduler-file",
             str(scheduler_file)],
            "scheduler.log",
        )
        _wait(lambda: scheduler_file.is_file() and scheduler_file.stat().st_size > 0, "scheduler", procs, tmp)
        address = orjson.loads(scheduler_file.read_bytes())["address"]
        cluster = Cluster(address=address, scheduler=scheduler, logs=tmp, scheduler_file=scheduler_file)
        for i in range(workers):
            cluster.workers.append(
                start(
                    ["worker", address, "--host", "127.0.0.1", "--nthreads", "1", "--no-dashboard",
                     "--nanny" if nanny else "--no-nanny", "--name", f"w{i}", "--local-directory", str(tmp / f"w{i}")],
                    f"worker{i}.log",
                )
            )
        _wait(lambda: len(cluster.worker_pids()) >= workers, "workers", procs, tmp)
        yield cluster
    finally:
        for p in procs:  # each process group we started: a nanny's worker goes with it
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGKILL)
            p.wait(timeout=30)
