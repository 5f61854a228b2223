"""``cs.map`` on a Dask cluster's executor: items run in the workers' processes, not here.

A local cluster of two worker processes stands in for machines: each worker
builds its own client from the caller's configuration, paces itself with its
own machine budget and journals its own leases. Needs the optional extra
``createos-sync[dask]`` (in the test extra: a cluster starts in about a
second); skipped cleanly without it.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from concurrent.futures import Executor
from pathlib import Path

import pytest

import createos_sync as cs
from createos_sync import Client, Lease
from createos_sync.emulator import Emulator
from createos_sync.journal import Journal

from ..waiting import wait_until

distributed = pytest.importorskip("distributed")


@pytest.fixture(scope="module")
def workers_state(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("workers-state")


@pytest.fixture(scope="module")
def dask_executor(workers_state: Path) -> Iterator[Executor]:
    # The worker processes take their environment (the state directory) at start.
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("CREATEOS_SYNC_STATE_DIR", str(workers_state))
        cluster = distributed.LocalCluster(
            n_workers=2, threads_per_worker=2, processes=True, dashboard_address=None
        )
    with cluster, distributed.Client(cluster) as dask:
        yield dask.get_executor()


def test_items_run_on_the_cluster_workers_and_every_lease_closes(
    emulator: Emulator, client: Client, dask_executor: Executor, workers_state: Path
) -> None:
    def fn(box: Lease, n: int) -> tuple[int, int, str]:
        return n, os.getpid(), box.run(f"echo {n}").stdout

    results = cs.map(fn, range(6), client=client, executor=dask_executor, concurrency=4)
    assert [(n, out) for n, _, out in results] == [(n, f"{n}\n") for n in range(6)]
    assert os.getpid() not in {pid for _, pid, _ in results}
    assert emulator.live_sandboxes() == []
    journal = Journal(workers_state)
    assert journal.path.exists() and journal.entries() == []  # the workers journaled, cleanly


def test_remote_failures_come_back_whole(
    emulator: Emulator, client: Client, dask_executor: Executor
) -> None:
    def fn(box: Lease, n: int) -> int:
        return box.run(f"exit {n}", check=True).exit_code or 0

    results = cs.map(fn, range(3), client=client, executor=dask_executor, return_exceptions=True)
    assert results[0] == 0
    assert [type(r) for r in results[1:]] == [cs.CommandFailed, cs.CommandFailed]
    assert [r.result.exit_code for r in results[1:]] == [1, 2]  # type: ignore[union-attr]
    assert emulator.live_sandboxes() == []  # nothing was cancelled: every item came back
    with pytest.raises(cs.CommandFailed) as raised:
        cs.map(fn, [0, 5], client=client, executor=dask_executor)
    assert raised.value.result.exit_code == 5
    # Item 0 may still run when item 1's failure cancels it (a Dask cancel cannot stop a
    # running task, nor tell it from a queued one): cs.map has raised, and the worker
    # closes that lease itself when fn returns.
    wait_until(lambda: not emulator.live_sandboxes(), "the workers to close every lease")
