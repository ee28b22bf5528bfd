"""Start one process per rank on this machine and supervise them.

Workers of a plain local run are forked from a server that imported torch once
(`cadence.launch.forked`); inside emulated hosts they are subprocesses, each started in its
host's network namespace with `ip netns exec`. The supervisor stops every worker as soon as one
fails and reports the rank whose failure came first, with its cause.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Protocol

from cadence.config import TrainConfig
from cadence.errors import UserError, WorkerFailed
from cadence.launch.env import BANDWIDTH_ENV, ERROR_FILE_ENV, LOG_FILE_ENV, THREADS_ENV
from cadence.launch.errors import RankError, read_error
from cadence.launch.forked import ForkedWorker, WorkerServer, start_server
from cadence.placement import check_strategy, place_worker
from cadence.ps.auth import SECRET_ENV, new_secret
from cadence.ps.config import survives_dead_workers

Worker = subprocess.Popen[bytes] | ForkedWorker
"""A running worker: forked locally, or a subprocess inside an emulated host."""

POLL_S = 0.2
GRACE_S = 5.0


class HostLike(Protocol):
    @property
    def ip(self) -> str: ...
    @property
    def iface(self) -> str: ...


class ClusterLike(Protocol):
    """What the launcher needs from an emulated cluster."""

    bandwidth_bps: float

    @property
    def hosts(self) -> Sequence[HostLike]: ...

    def exec_prefix(self, index: int) -> list[str]: ...


def torchrun_env_present() -> bool:
    return "RANK" in os.environ and "WORLD_SIZE" in os.environ


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def check_port_free(port: int) -> None:
    with socket.socket() as sock:
        try:
            sock.bind(("0.0.0.0", port))
        except OSError:
            raise UserError(
                f"port {port} is busy: pick another --master-port, "
                "or leave it out to use a free one"
            ) from None


def worker_threads(config: TrainConfig) -> int:
    """Intra-op threads each local worker runs with: `--threads`, else this machine's cores
    shared evenly among the workers (at least one). A profile meant to predict the run is
    taken at the same count (`cadence bench sim --held-out`)."""
    return config.cluster.threads or max(1, (os.cpu_count() or 1) // config.cluster.workers)


def _worker_env(
    rank: int, config: TrainConfig, port: int, logs: Path, cluster: ClusterLike | None
) -> dict[str, str]:
    env = dict(os.environ)
    threads = worker_threads(config)
    env.update(
        RANK=str(rank),
        LOCAL_RANK=str(rank),
        WORLD_SIZE=str(config.cluster.workers),
        LOCAL_WORLD_SIZE=str(config.cluster.workers),
        MASTER_PORT=str(port),
        OMP_NUM_THREADS=str(threads),
        PYTHONUNBUFFERED="1",
    )
    env[ERROR_FILE_ENV] = str(error_file(logs, rank))
    env[LOG_FILE_ENV] = str(log_file(logs, rank))
    env[THREADS_ENV] = str(threads)
    # c10d warns about every reverse-DNS miss inside namespaces; keep real errors only.
    env.setdefault("TORCH_CPP_LOG_LEVEL", "ERROR")
    if cluster is None:
        env.update(MASTER_ADDR="127.0.0.1", GLOO_SOCKET_IFNAME="lo")
    else:
        env.update(MASTER_ADDR=cluster.hosts[0].ip, GLOO_SOCKET_IFNAME=cluster.hosts[rank].iface)
        env[BANDWIDTH_ENV] = repr(cluster.bandwidth_bps)
    return env


def error_file(logs: Path, rank: int) -> Path:
    return logs / f"rank{rank}.error.json"


def log_file(logs: Path, rank: int) -> Path:
    return logs / f"rank{rank}.log"


def stop_all(procs: Sequence[Worker]) -> None:
    for proc in procs:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
    deadline = time.monotonic() + GRACE_S
    for proc in procs:
        try:
            proc.wait(timeout=max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def failure_cause(
    procs: Sequence[Worker],
    logs: Path,
    dead: list[int],
    timeout_s: float | None = None,
) -> Exception:
    """Name the root cause among the ranks in `dead` (seen exiting badly before the supervisor
    stopped the others, whose SIGTERM is a consequence, not a cause); `timeout_s`: the job's
    collective timeout, said when that is what ended it.

    A rank that died without recording anything crashed natively (abort, segfault, OOM kill);
    errors its peers recorded are then almost always their sockets closing under them. Otherwise
    the earliest recorded failure is the cause.
    """
    records = {rank: read_error(error_file(logs, rank)) for rank in range(len(procs))}
    silent = [rank for rank in dead if records[rank] is None]
    if silent:
        rank = silent[0]
        code = procs[rank].returncode or 0
        cause = f"signal {signal.Signals(-code).name}" if code < 0 else f"exit code {code}"
        log = log_file(logs, rank)
        where = f" (its output is in {log})" if log.exists() else ""
        return WorkerFailed(f"rank {rank} died with {cause} before recording an error{where}")
    errors = [e for e in records.values() if e is not None]
    errors = [e for e in errors if e.kind != "KeyboardInterrupt"] or errors
    if not errors:
        return WorkerFailed("a worker failed without a recorded cause")
    first: RankError = min(errors, key=lambda e: e.time)
    if first.user_error:
        return UserError(first.message)
    log = log_file(logs, first.rank)
    if first.timed_out():  # a peer alive but silent: stalled, or the link to it is down
        waited = f" after {timeout_s:g} s" if timeout_s is not None else ""
        return WorkerFailed(
            f"rank {first.rank} timed out{waited} waiting for a peer in a collective "
            f"(--timeout): a peer stalled or a link between them is down "
            f"({first.summary()}; traceback in {log})"
        )
    return WorkerFailed(f"rank {first.rank} failed: {first.summary()} (traceback in {log})")


def launch_local(
    config: TrainConfig, run_dir: Path, cluster: ClusterLike | None = None
) -> dict[str, Any]:
    """Run `config.workers` ranks here and return rank 0's metrics once all succeed."""
    from cadence.placement import visible_gpus

    placement = place_worker(config.cluster.device, 0, config.cluster.workers, visible_gpus())
    check_strategy(config.job.strategy, placement.device, placement.backend)
    if placement.note:
        print(f"cadence: {placement.note}", file=sys.stderr, flush=True)
    logs = run_dir / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    config_path = run_dir / "config.json"
    config_path.write_text(json.dumps(config.to_json(), indent=2) + "\n")
    if cluster is None:
        port = config.cluster.master_port or free_port()
        if config.cluster.master_port:
            check_port_free(port)
    else:
        port = config.cluster.master_port or 29500  # inside a fresh namespace every port is free
    for rank in range(config.cluster.workers):
        error_file(logs, rank).unlink(missing_ok=True)

    # This job's parameter servers take messages only from its own workers: the secret they
    # sign with lives in the workers' environment, never in a file or a log.
    secret = new_secret().hex()
    procs: list[Worker] = []
    server: WorkerServer | None = None
    try:
        for rank in range(config.cluster.workers):
            argv = [str(config_path), str(run_dir)]
            env = {**_worker_env(rank, config, port, logs, cluster), SECRET_ENV: secret}
            # Rank 0 owns the terminal (progress bar); the others write to their log files.
            log = log_file(logs, rank) if rank else None
            if cluster is None:  # forked from a server that imported torch once
                server = server or start_server(argv)
                procs.append(server.start(argv, env, log))
                continue
            cmd = [*cluster.exec_prefix(rank), sys.executable, "-m", "cadence.launch.worker", *argv]
            stream = open(log, "ab") if log else None  # noqa: SIM115
            procs.append(
                subprocess.Popen(
                    cmd,
                    env=env,
                    stdout=subprocess.DEVNULL if stream else None,
                    stderr=stream,
                )
            )
            if stream:
                stream.close()  # the child holds its own descriptor
        # Parameter server with asp/ssp/backup: a worker other than rank 0 (which writes the
        # outputs) may die and the others train on; its servers, if any, die with it, and then
        # the workers that need them fail in turn.
        survivable = survives_dead_workers(config.job.strategy, config.ps.consistency)
        lost: set[int] = set()
        while True:
            codes = [p.poll() for p in procs]
            dead = [r for r, c in enumerate(codes) if c not in (None, 0) and r not in lost]
            if dead and survivable and 0 not in dead:
                for rank in dead:
                    print(
                        f"cadence: worker {rank} exited with code {codes[rank]} "
                        f"(log: {log_file(logs, rank)}); the others train on without it "
                        f"(--consistency {config.ps.consistency})",
                        file=sys.stderr,
                        flush=True,
                    )
                lost.update(dead)
                dead = []
            if dead:
                time.sleep(POLL_S)  # let the root cause finish writing its error file
                # A rank that died natively may be reaped after the peer its death broke:
                # every rank dead by now is a candidate cause, not only the first seen.
                dead = [r for r, p in enumerate(procs) if p.poll() not in (None, 0)]
                dead = [r for r in dead if r not in lost]
                stop_all(procs)
                raise failure_cause(procs, logs, dead, config.cluster.timeout_s)
            if all(c == 0 or r in lost for r, c in enumerate(codes)):
                break
            time.sleep(POLL_S)
    finally:
        stop_all(procs)
        if server is not None:
            server.close()
    return json.loads((run_dir / "metrics.json").read_text())
