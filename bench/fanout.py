"""Fan-out under the rate limit: requests per item and items per minute, three ways.

The emulator runs in its own process with its rate limit on (300 requests
per minute per client address, 429 with Retry-After past it, as the
service); each way gets an emulator of its own, so a fresh window. Clients of
createos-sync are left at their defaults: 300 per minute, machine-wide
budget, kept in a state directory of this run's own.

1. ``--items`` items (``box.run("echo N")`` each, concurrency 8), three ways:
   ``cs.map`` (a lease per item), ``cs.map(..., reuse=True)`` (a pool of 8
   leases), and the official SDK's straightforward loop (a thread pool of 8:
   create a sandbox, the same start-gated managed-process run, destroy; when
   ``createos-sandbox`` is installed). For each: requests (and per item),
   items per minute, wall time, 429s the emulator answered and 429s surfaced
   to the caller (goal 0), and the wall-time floor of its own requests under
   the limit. The limit is a sliding window (300 in any 60 s at the
   emulator, 300 in any 61 s at the client's pacer), not a bucket refilling
   at 5 a second: a fresh window admits 300 at once, and the 301st request
   can only leave a whole window after the first. So the floor of N requests
   is 61 s x ((N - 1) // 300), a step function, and it is what bounds these
   runs. The job's floor: the fewest requests the protocol allows for it (a
   managed run is 3: create, attach, release the start gate; 8 sandboxes
   created and destroyed), under the window and at a sustained 5 a second.
2. ``--processes`` processes, each one lease doing ``--runs`` runs at once:
   more than a minute's budget together. With the machine-wide budget (the
   default) the emulator should answer no 429; the same with
   ``rate_scope="process"`` is shown for contrast (``--no-contrast`` skips it;
   ``--processes 0`` skips the part).

Takes minutes by design (the rate limit).

    python bench/fanout.py [--items 120] [--ways default,reuse,official]
                           [--processes 3] [--runs 45] [--no-contrast]
"""

from __future__ import annotations

import argparse
import collections
import concurrent.futures as cf
import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from typing import Any

from _common import EmulatorProcess, heading, machine
from _official import IMPORT_ERROR, version
from _workloads import gated_wrapper

import createos_sync as cs

LIMIT = 300  # requests in any window
WINDOW = 61.0  # the client pacer's window (the service's minute, and a second of margin)
PER_SECOND = 5.0  # the limit as a sustained rate
CONCURRENCY = 8
RUN_REQUESTS = 3  # a managed run: create, attach its output, release the start gate
WAYS = ("default", "reuse", "official")


def statuses(logged: list[dict[str, Any]]) -> collections.Counter[int | None]:
    return collections.Counter(r["status"] for r in logged)


def floor(requests: int, window: float = WINDOW) -> float:
    """The least wall time a sliding ``window`` allows ``requests`` from a fresh one."""
    return window * ((requests - 1) // LIMIT) if requests else 0.0


def job_floor(items: int) -> int:
    """The fewest requests the protocol allows for the job: a run each, 8 sandboxes."""
    return items * RUN_REQUESTS + 2 * min(CONCURRENCY, items)


def with_createos_sync(reuse: bool) -> Callable[[EmulatorProcess, int], list[Any]]:
    def job(emu: EmulatorProcess, items: int) -> list[Any]:
        with emu.client(timeout=1800) as client:
            more = {"reuse": True} if reuse else {}  # (a client from before it, PYTHONPATH)
            return cs.map(
                lambda box, n: box.run(f"echo {n}").stdout,
                range(items),
                concurrency=CONCURRENCY,
                client=client,
                return_exceptions=True,
                progress=False,
                **more,
            )

    return job


def with_official(emu: EmulatorProcess, items: int) -> list[Any]:
    """A user of the official SDK: a thread pool, and per item create, run, destroy."""
    import createos

    client = createos.Client(emu.api_key, base_url=emu.url)

    def item(n: int) -> Any:
        try:
            sandbox = client.create_sandbox(createos.CreateSandboxRequest(shape="s-1vcpu-1gb"))
            try:
                return _official_run(createos, sandbox, gated_wrapper(f"echo {n}"))
            finally:
                sandbox.destroy()
        except Exception as exc:
            return exc

    try:
        with cf.ThreadPoolExecutor(CONCURRENCY) as pool:
            return list(pool.map(item, range(items)))
    finally:
        client.close()


def _official_run(createos: Any, sandbox: Any, wrapper_args: list[str]) -> str:
    processes = sandbox.processes
    created = processes.create(
        createos.ManagedProcessCreateRequest(command="/bin/bash", arguments=wrapper_args)
    )
    pid = created.process_id
    out = b""
    with processes.connect(pid) as stream:
        processes.close_standard_input(pid)
        for event in stream:
            kind = str(event.type)
            if kind == "data" and str(event.stream) != "stderr":
                out += event.data
            elif kind == "exit":
                return out.decode()
    raise RuntimeError("the stream ended before the exit frame")


def surfaced_429(result: Any) -> bool:
    if isinstance(result, cs.CreateosApiError):
        return result.status == 429
    return getattr(result, "status_code", None) == 429  # the official SDK's APIError


def fan_out(way: str, items: int) -> dict[str, Any] | None:
    heading(f"Fan-out, {way}: {items} items, concurrency {CONCURRENCY}, emulator rate limit on")
    if way == "official" and IMPORT_ERROR is not None:
        print(f"left out: the official SDK is not importable ({IMPORT_ERROR})")
        return None
    job = with_official if way == "official" else with_createos_sync(way == "reuse")
    with EmulatorProcess(rate_limit=True) as emu:
        label = f"createos-sandbox {version()}" if way == "official" else "createos-sync"
        print(f"setup: {emu.setup}; {label}; {machine()}")
        before = len(emu.requests())
        started = time.perf_counter()
        results = job(emu, items)
        wall = time.perf_counter() - started
        logged = emu.requests()[before:]
    counted = statuses(logged)
    surfaced = sum(surfaced_429(r) for r in results)
    other = collections.Counter(
        type(r).__name__ for r in results if isinstance(r, Exception) and not surfaced_429(r)
    )
    correct = sum(r == f"{n}\n" for n, r in enumerate(results))
    figures = {
        "way": way,
        "requests": len(logged),
        "per item": len(logged) / items,
        "items per minute": items / wall * 60,
        "wall": wall,
        "429 answered": counted[429],
        "429 surfaced": surfaced,
        # What the window admitted (a 429 is not counted): the service's own 60 s window
        # binds a client that does not pace (the official SDK), the pacer's 61 s ours.
        "floor": floor(len(logged) - counted[429], 60.0 if way == "official" else WINDOW),
        "correct": correct,
    }
    print(f"requests: {len(logged)} ({figures['per item']:.2f} per item); statuses {dict(counted)}")
    print(f"429 answered by the emulator: {counted[429]}; surfaced to the caller: {surfaced}")
    print(f"other errors: {dict(other) or 'none'}; correct results: {correct}/{items}")
    print(
        f"wall {wall:.1f} s, {figures['items per minute']:.1f} items per minute; the floor of "
        f"the requests admitted under the window: {figures['floor']:.0f} s"
    )
    return figures


def summary(rows: list[dict[str, Any]], items: int) -> None:
    heading("Summary")
    fewest = job_floor(items)
    print(
        f"the job's floor: {fewest} requests ({fewest / items:.2f} per item), "
        f"{floor(fewest):.0f} s under the window, {fewest / PER_SECOND:.1f} s at 5 a second"
    )
    print(
        f"{'way':<10} {'req/item':>9} {'items/min':>10} {'wall s':>8} {'floor s':>8} "
        f"{'429 ans':>8} {'429 surf':>9} {'correct':>8}"
    )
    for row in rows:
        print(
            f"{row['way']:<10} {row['per item']:>9.2f} {row['items per minute']:>10.1f} "
            f"{row['wall']:>8.1f} {row['floor']:>8.1f} {row['429 answered']:>8} "
            f"{row['429 surfaced']:>9} {row['correct']:>8}"
        )
    by_way = {row["way"]: row for row in rows}
    if "default" in by_way and "reuse" in by_way:
        gain = by_way["reuse"]["items per minute"] / by_way["default"]["items per minute"]
        print(f"reuse=True: {gain:.2f}x the items per minute of the default (goal >= 1.8x)")


CHILD = """
import json, sys, createos_sync as cs
url, key, runs, scope = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
surfaced = 0
with cs.Client(key, url, timeout=1800, rate_scope=scope) as client, client.lease() as box:
    print("ready", flush=True)
    sys.stdin.readline()  # all start together
    for i in range(runs):
        try:
            box.run(f"echo {i}").check()
        except cs.CreateosApiError as exc:
            surfaced += exc.status == 429
print(json.dumps({"surfaced": surfaced}))
"""


def processes(count: int, runs: int, scope: str) -> dict[str, Any]:
    heading(f"Shared budget: {count} processes x {runs} runs at once, rate_scope={scope!r}")
    with EmulatorProcess(rate_limit=True) as emu:
        print(f"setup: {emu.setup}; {count} client processes; {machine()}")
        before = len(emu.requests())
        procs = [
            subprocess.Popen(
                [sys.executable, "-c", CHILD, emu.url, emu.api_key, str(runs), scope],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                text=True,
            )
            for _ in range(count)
        ]
        for proc in procs:
            assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
        started = time.perf_counter()
        for proc in procs:
            assert proc.stdin is not None
            proc.stdin.write("go\n")
            proc.stdin.flush()
        outputs = [proc.communicate(timeout=1800)[0] for proc in procs]
        wall = time.perf_counter() - started
        logged = emu.requests()[before:]
    surfaced = sum(json.loads(out.strip().splitlines()[-1])["surfaced"] for out in outputs)
    counted = statuses(logged)
    print(f"requests: {len(logged)}; statuses {dict(counted)}")
    print(f"429 answered by the emulator: {counted[429]}; surfaced: {surfaced}; wall {wall:.1f} s")
    return {"requests": len(logged), "429 answered": counted[429], "surfaced": surfaced}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--items", type=int, default=120)
    parser.add_argument("--ways", default=",".join(WAYS), help="a comma-separated subset")
    parser.add_argument("--processes", type=int, default=3)
    parser.add_argument("--runs", type=int, default=45)
    parser.add_argument("--no-contrast", action="store_true")
    args = parser.parse_args()
    ways = [way for way in args.ways.split(",") if way]
    if not set(ways) <= set(WAYS):
        parser.error(f"--ways: choose among {', '.join(WAYS)}")
    with tempfile.TemporaryDirectory() as state:
        os.environ["CREATEOS_SYNC_STATE_DIR"] = state  # this run's own machine budget
        rows = [row for way in ways if (row := fan_out(way, args.items)) is not None]
        summary(rows, args.items)
        if args.processes:
            processes(args.processes, args.runs, "machine")
            if not args.no_contrast:
                processes(args.processes, args.runs, "process")


if __name__ == "__main__":
    main()
