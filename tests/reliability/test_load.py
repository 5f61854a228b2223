"""Load: many leases and runs at once through one client, against the emulator's rate limit.

The service allows a number of requests per minute and answers 429 beyond
it; the client's pacer must keep every lease of the client under that limit
together, so that no caller ever sees a 429. For the pacer to have real work
in a test of seconds, the emulator's rate limiter and the client's pacer
share one clock that runs ``SCALE`` times faster than the wall clock (a real
fake, given to both through their constructors): a minute of the limit lasts
three seconds. ``test_soak`` does the same on the real clock for minutes, with
faults mixed in; it only runs when asked for (``-m soak``, see RELIABILITY.md).
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import random
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest
import requests

import createos_sync as cs
from createos_sync._wire.http import Transport
from createos_sync._wire.pacer import Pacer
from createos_sync.emulator import Emulator, Fault
from createos_sync.emulator._service.ratelimit import RateLimiter

from ..integration.helpers import sha256
from .ledger import LEDGER, Ledger
from .support import KEY, check_no_leaks, same_digest

SCALE = 20.0  # a rate-limit minute lasts 3 s of wall time
LIMIT = 60  # requests per (scaled) minute, for the emulator and the client alike
LEASES = 4
THREADS_PER_LEASE = 2
RUNS_PER_THREAD = 3


class ScaledTime:
    """A monotonic clock running ``scale`` times faster than the real one, and its sleep."""

    def __init__(self, scale: float) -> None:
        self.scale = scale
        self._origin = time.monotonic()
        self.slept: list[float] = []
        self._lock = threading.Lock()

    def clock(self) -> float:
        return self._origin + (time.monotonic() - self._origin) * self.scale

    def sleep(self, seconds: float) -> None:
        with self._lock:
            self.slept.append(seconds)
        time.sleep(seconds / self.scale)


class LimitedEmulator(Emulator):
    """An emulator whose rate limiter reads ``clock`` (Emulator takes no clock of its own)."""

    def __init__(self, limit: int, clock: Callable[[], float], **options: Any) -> None:
        super().__init__(rate_limit=limit, api_key=KEY, transition_delay=0, **options)
        self._limiter = RateLimiter(limit, clock=clock)


def paced_client(emu: Emulator, limit: int, time_: ScaledTime) -> cs.Client:
    """A client whose pacer and waits run on ``time_`` (Client builds its transport from
    the interpreter-wide pacer; Transport accepts another one)."""
    client = emu.client(requests_per_minute=limit, sleep=time_.sleep, timeout=300)
    client._transport.close()
    pacer = Pacer(limit, clock=time_.clock, sleep=time_.sleep)
    client._transport = Transport(client.config, sleep=time_.sleep, pacer=pacer)
    return client


@contextlib.contextmanager
def surfaced_429s() -> Iterator[None]:
    """Count a 429 that reaches a caller (it fails the test all the same)."""
    try:
        yield
    except cs.CreateosApiError as exc:
        if exc.status == 429:
            LEDGER.add(surfaced_429=1)
        raise


def expected(tag: str) -> tuple[str, str]:
    lines = [f"{tag} {i} \u00e9\u20ac" for i in range(200)]
    return "".join(f"{line}\n" for line in lines), f"{tag} done\n"


def script(tag: str) -> str:
    return f'for i in $(seq 0 199); do echo "{tag} $i \u00e9\u20ac"; done; echo "{tag} done" >&2'


def lease_work(client: cs.Client, index: int, ledger: Ledger) -> int:
    """One lease: runs from several threads at once, a file round trip; bytes checked."""
    checked = 0
    with client.lease() as box:

        def runs(thread: int) -> int:
            done = 0
            for run in range(RUNS_PER_THREAD):
                tag = f"L{index}T{thread}R{run}"
                result = box.run(script(tag), check=True)
                want = expected(tag)
                same_digest(sha256(result.stdout), sha256(want[0]), f"stdout of {tag}")
                same_digest(sha256(result.stderr), sha256(want[1]), f"stderr of {tag}")
                done += len(result.stdout.encode()) + len(result.stderr.encode())
            return done

        with ThreadPoolExecutor(THREADS_PER_LEASE) as pool:
            checked += sum(pool.map(runs, range(THREADS_PER_LEASE)))
        blob = hashlib.sha256(str(index).encode()).digest() * 4096
        box.write_file(f"/workspace/blob{index}", blob)
        same_digest(sha256(box.read_file(f"/workspace/blob{index}")), sha256(blob), "a file")
        checked += 2 * len(blob)
    ledger.add(leases=1, runs=THREADS_PER_LEASE * RUNS_PER_THREAD)
    return checked


def test_concurrent_leases_stay_under_the_rate_limit_and_lose_nothing(ledger: Ledger) -> None:
    scaled = ScaledTime(SCALE)
    with LimitedEmulator(LIMIT, scaled.clock) as emu, paced_client(emu, LIMIT, scaled) as client:
        with ThreadPoolExecutor(LEASES) as pool, surfaced_429s():
            checked = sum(pool.map(lambda i: lease_work(client, i, ledger), range(LEASES)))

        log = emu.request_log
        throttled = sum(r.status == 429 for r in log)
        # More than a minute's worth of requests: the pacer had to hold some back...
        assert len(log) > LIMIT
        assert max(scaled.slept, default=0) > 10, "the pacer never waited"
        # ...so that the emulator refused (nearly) none, and callers saw no 429 at all
        # (any exception above would have failed the test). Without the pacer about a
        # third of these requests would be refused.
        assert throttled <= 2, f"{throttled} answers of 429"
        assert check_no_leaks(emu, set()) == []
        # The limiter was really on: past the limit, a request that is not paced is refused.
        refused = 0
        for _ in range(LIMIT + 1):
            refused += requests.get(emu.url + "/healthz", timeout=30).status_code == 429
            if refused:
                break
        assert refused
    ledger.add(bytes_checked=checked, throttled_answers=throttled)


# --- the soak: minutes on the real clock, with faults ------------------------------------

SOAK_SECONDS = float(os.environ.get("CREATEOS_SOAK_SECONDS", "180"))
SOAK_LIMIT = 300  # the service's own limit
SOAK_WORKERS = 6
SOAK_FAULTS = (
    Fault("process.connect", drop_after_frames=2),
    Fault("process.connect", drop=True),
    Fault("process.connect", status=503),
    Fault("process.stdin_close", status=502, perform=True),
    Fault("process.create", status=429, retry_after=1),
    Fault("process.delete", status=502, perform=True),
    Fault("file.write", status=502, perform=True),
    Fault("file.read", drop=True),
    Fault("sandbox.get", status=503),
    Fault("sandbox.delete", status=502, perform=True),
)


@pytest.mark.soak
def test_soak(ledger: Ledger) -> None:
    """Leases open, run, transfer and close for SOAK_SECONDS on the real clock, at the
    service's real limit, while one recoverable fault after another is injected: every
    output and file must arrive whole, no 429 may surface, nothing may leak."""
    held = ScaledTime(1.0)  # the real clock; it records the pacer's waits
    with Emulator(rate_limit=SOAK_LIMIT, api_key=KEY) as emu, emu.client() as client:
        client._transport.close()
        pacer = Pacer(SOAK_LIMIT, clock=held.clock, sleep=held.sleep)
        client._transport = Transport(client.config, pacer=pacer)
        stop_at = time.monotonic() + SOAK_SECONDS
        totals = {"leases": 0, "runs": 0, "bytes": 0, "faults": 0, "scripted_429": 0}
        lock = threading.Lock()

        def worker(seed: int) -> None:
            rng = random.Random(seed)
            while time.monotonic() < stop_at:
                with client.lease() as box:
                    for _ in range(rng.randint(1, 6)):
                        if rng.random() < 0.3:
                            fault = rng.choice(SOAK_FAULTS)
                            emu.faults.add(fault)
                            with lock:
                                totals["faults"] += 1
                                totals["scripted_429"] += fault.status == 429
                        tag = f"S{seed}-{rng.getrandbits(32):x}"
                        result = box.run(script(tag), check=True)
                        want = expected(tag)
                        same_digest(sha256(result.stdout), sha256(want[0]), f"stdout of {tag}")
                        same_digest(sha256(result.stderr), sha256(want[1]), f"stderr of {tag}")
                        blob = rng.randbytes(rng.randint(0, 300_000))
                        box.write_file(f"/tmp/{tag}", blob)
                        same_digest(sha256(box.read_file(f"/tmp/{tag}")), sha256(blob), "a file")
                        with lock:
                            totals["runs"] += 1
                            totals["bytes"] += len(result.stdout.encode())
                            totals["bytes"] += len(result.stderr.encode())
                            totals["bytes"] += 2 * len(blob)
                with lock:
                    totals["leases"] += 1

        with ThreadPoolExecutor(SOAK_WORKERS) as pool, surfaced_429s():
            list(pool.map(worker, range(SOAK_WORKERS)))  # re-raises the first failure
        log = emu.request_log
        # A scripted 429 is answered only if its fault was taken before the end.
        throttled = sum(r.status == 429 for r in log)
        pending = emu.faults.pending()
        untaken = sum(f.status == 429 for f in pending)
        throttled_by_limit = throttled - (totals["scripted_429"] - untaken)
        emu.faults.clear()
        assert check_no_leaks(emu, set()) == []
    ledger.add(
        leases=totals["leases"],
        runs=totals["runs"],
        bytes_checked=totals["bytes"],
        throttled_answers=throttled_by_limit,
    )
    print(
        f"\nsoak: {SOAK_SECONDS:g} s, {totals['leases']} leases, {totals['runs']} runs, "
        f"{len(log)} requests, {totals['faults']} faults injected "
        f"({totals['faults'] - len(pending)} of them met a request), "
        f"{len(held.slept)} waits of the pacer (up to {max(held.slept, default=0):.1f} s), "
        f"{throttled_by_limit} answers of 429 from the rate limit, {totals['bytes']} bytes checked"
    )
