"""Over a real network: HTTPS and round trips, through a delaying proxy, side by side.

The loopback benchmarks hide what the real service costs: a new TCP + TLS
connection is free on loopback and two round trips on the internet. Here a
proxy (``_wanproxy.DelayProxy``, a process of its own) delays every byte by
half an RTT each way and holds a new connection's first bytes for one RTT
(the TCP handshake), in front of the emulator serving HTTPS
(``--tls``). Through it, in one run, interleaved, on one sandbox:

- ``createos-sync``: ``Lease.run`` (output to a counting callback as the others
  do, and also captured, which only it offers), ``write_file``, ``read_file``,
  ``client.lease().open()`` then ``close()``;
- ``floor``: the least raw ``requests`` code doing the same, with keep-alive
  (one session, every body read to its end so that connections are reused;
  ``_workloads.RawFloor``);
- ``official SDK``: ``createos-sandbox`` (``_official.OfficialRun``), when installed;
- ``/exec floor`` (``run("true")`` only): one buffered ``POST /exec`` with raw
  ``requests``, the one-request floor of a command (not cancellable, not resumable).

Per operation: wall time in RTTs (median and IQR over rounds, after one
warm-up round), new connections (counted by the proxy) and requests
(counted by the emulator's log). A client that drops a connection may find
a spare one in its pool for the next operation and pay for it later (in
whichever operation finds the pool empty); runs "in a row" show the steady
state of one operation repeated. ``--rtt 0`` runs the same through the proxy
without delay: the loopback figures, in milliseconds.

    python bench/wan.py [--rtt 40] [--rounds 12] [--only 'run("true")']
    PYTHONPATH=DIR python bench/wan.py   # the client from another copy (the emulator stays)
"""

from __future__ import annotations

import argparse
import os
import time
from collections.abc import Callable
from typing import Any
from urllib.parse import urlsplit

import _official
from _common import EmulatorProcess, Stats, heading, machine, paired_ratio
from _wanproxy import DelayProxy
from _workloads import Counter, RawFloor, gated_wrapper, generator_argv

import createos_sync as cs

OUTPUT_MB = 10
FILE_BYTES = 1_000_000
IN_A_ROW = 5
OPERATIONS = (
    'run("true")',
    f'run("true"), {IN_A_ROW} in a row, per run',
    f"run, {OUTPUT_MB} MB output to a callback",
    f"run, {OUTPUT_MB} MB output captured",
    "lease open + close",
    "write_file 1 MB",
    "read_file 1 MB",
)
OURS, FLOOR, OFFICIAL = "createos-sync", "floor", "official SDK"
EXEC = "/exec floor"  # one request, raw requests: the least any client pays for a command
MAX_OUTPUT = 4 * 1024 * 1024


def _ours(client: cs.Client, box: cs.Lease, blob: bytes) -> dict[str, Callable[[], None]]:
    argv, expected = generator_argv(OUTPUT_MB * 1_000_000)

    def callback() -> None:
        counter = Counter()
        assert box.run(argv, on_output=counter, max_output=1).exit_code == 0
        assert counter.chars == expected, counter.chars

    def captured() -> None:
        result = box.run(argv)
        assert result.exit_code == 0 and len(result.stdout) == min(expected["stdout"], MAX_OUTPUT)

    return dict(
        zip(
            OPERATIONS,
            (
                lambda: box.run("true").check() and None,
                _in_a_row(lambda: box.run("true").check() and None),
                callback,
                captured,
                lambda: client.lease().open().close(),
                lambda: box.write_file("/workspace/wan.bin", blob),
                lambda: _same(box.read_file("/workspace/wan.bin"), blob),
            ),
            strict=True,
        )
    )


def _theirs(runner: Any, blob: bytes) -> dict[str, Callable[[], None]]:
    """The floor's or the official SDK's operations (same method names; neither captures)."""
    true = gated_wrapper("true")
    argv, expected = generator_argv(OUTPUT_MB * 1_000_000)
    wrapper = gated_wrapper(argv)

    def run_true() -> None:
        assert runner.run(true)["exit_code"] == 0

    def output() -> None:
        counter = Counter()
        runner.run(wrapper, counter)
        assert counter.chars == expected, counter.chars

    operations = (
        run_true,
        _in_a_row(run_true),
        output,
        None,
        runner.open_close,
        lambda: runner.write_file("/workspace/wan.bin", blob),
        lambda: _same(runner.read_file("/workspace/wan.bin"), blob),
    )
    return {op: action for op, action in zip(OPERATIONS, operations, strict=True) if action}


def _exec_floor(floor: RawFloor) -> dict[str, Callable[[], None]]:
    """``run("true")`` as one buffered ``POST /exec``: not cancellable, not resumable, but
    one request and one round trip (issue 36's floor for a command)."""

    def run_true() -> None:
        reply = floor._call("POST", f"{floor.sandbox}/exec", json={"cmd": "true"})
        assert reply.json()["data"]["result"]["exit_code"] == 0

    return {OPERATIONS[0]: run_true, OPERATIONS[1]: _in_a_row(run_true)}


def _in_a_row(action: Callable[[], None]) -> Callable[[], None]:
    def repeated() -> None:
        for _ in range(IN_A_ROW):
            action()

    return repeated


def _same(got: bytes, expected: bytes) -> None:
    assert got == expected, (len(got), len(expected))


def measure(rtt_ms: float, rounds: int, only: str = "") -> dict[str, Any]:
    where = f"{rtt_ms:g} ms RTT" if rtt_ms else "loopback (no delay)"
    heading(f"6. Over HTTPS through a delaying proxy: {where}")
    blob = bytes(range(256)) * (FILE_BYTES // 256) + bytes(FILE_BYTES % 256)
    with EmulatorProcess(tls=True) as emu:
        parts = urlsplit(emu.url)
        assert parts.hostname is not None and parts.port is not None and emu.ca_path
        with DelayProxy((parts.hostname, parts.port), rtt_ms / 1000) as proxy:
            url = f"https://127.0.0.1:{proxy.port}"
            print(f"setup: {emu.setup}; proxy RTT {rtt_ms:g} ms; client in this process; "
                  f"{machine()}")  # fmt: skip
            client = _client(emu.api_key, url, emu.ca_path)
            with client, client.lease() as box:
                assert box.id is not None
                runners: dict[str, Any] = {FLOOR: RawFloor(url, emu.api_key, box.id, emu.ca_path)}
                if _official.createos is not None:
                    runners[OFFICIAL] = _official.OfficialRun(url, emu.api_key, box.id, emu.ca_path)
                variants = {OURS: _ours(client, box, blob)}
                variants.update({n: _theirs(r, blob) for n, r in runners.items()})
                variants[EXEC] = _exec_floor(runners[FLOOR])
                variants = {
                    n: {op: a for op, a in v.items() if only in op} for n, v in variants.items()
                }
                figures = _rounds(emu, proxy, variants, rounds)
                for runner in runners.values():
                    runner.close()
    return _report(figures, rtt_ms, rounds)


def _client(api_key: str, url: str, ca_path: str) -> cs.Client:
    """createos-sync's client, unpaced (the emulator has no rate limit; the others do not pace)."""
    try:
        return cs.Client(api_key, url, ca_bundle=ca_path, timeout=600, requests_per_minute=10**6)
    except TypeError:  # a copy from before issue 11 (PYTHONPATH): trust the CA through requests
        os.environ["REQUESTS_CA_BUNDLE"] = ca_path
        return cs.Client(api_key, url, timeout=600, requests_per_minute=10**6)


def _rounds(
    emu: EmulatorProcess,
    proxy: DelayProxy,
    variants: dict[str, dict[str, Callable[[], None]]],
    rounds: int,
) -> dict[str, dict[str, dict[str, list[float]]]]:
    """Every operation of every variant, once per round, the variants' order rotating."""
    names = list(variants)
    figures = {
        op: {n: {"wall": [], "connections": [], "requests": []} for n in names if op in variants[n]}
        for op in OPERATIONS
        if any(op in actions for actions in variants.values())
    }
    for i in range(rounds + 1):  # round 0 warms up pools, imports and the sandbox's caches
        for op in figures:
            for name in names[i % len(names) :] + names[: i % len(names)]:
                if op not in variants[name]:
                    continue
                logged, connections = len(emu.requests()), proxy.accepted
                started = time.perf_counter()
                variants[name][op]()
                wall = time.perf_counter() - started
                if i == 0:
                    continue
                record, calls = figures[op][name], IN_A_ROW if "in a row" in op else 1
                record["wall"].append(wall / calls)
                record["connections"].append((proxy.accepted - connections) / calls)
                record["requests"].append((len(emu.requests()) - logged) / calls)
    return figures


def _report(
    figures: dict[str, dict[str, dict[str, list[float]]]], rtt_ms: float, rounds: int
) -> dict[str, Any]:
    unit = rtt_ms / 1000 if rtt_ms else 0.001
    label = "RTT" if rtt_ms else "ms"
    print(
        f"method: {rounds} rounds after a warm-up round, variants interleaved (order rotating); "
        f"wall time in {label} (median, IQR); new connections and requests per operation "
        "(median, [min-max])"
    )
    results: dict[str, Any] = {}
    for op, by_variant in figures.items():
        print(f"- {op}")
        results[op] = {}
        for name, record in by_variant.items():
            wall = Stats(record["wall"])
            conns, reqs = Stats(record["connections"]), Stats(record["requests"])
            line = (
                f"    {name:14s} {wall.median / unit:7.2f} {label} "
                f"(IQR {wall.q1 / unit:.2f}-{wall.q3 / unit:.2f}); "
                f"connections {conns.median:g} [{conns.min:g}-{conns.max:g}]; "
                f"requests {reqs.median:g} [{reqs.min:g}-{reqs.max:g}]"
            )
            entry = {"wall": wall.median / unit, "connections": conns.median,
                     "requests": reqs.median}  # fmt: skip
            if name != OURS and OURS in by_variant:
                ratio = paired_ratio(by_variant[OURS]["wall"], record["wall"])
                line += f"; {OURS} takes {ratio.median:.3f}x (IQR {ratio.q1:.3f}-{ratio.q3:.3f})"
                entry["ours_over_this"] = ratio.median
            print(line)
            results[op][name] = entry
    if _official.createos is None:
        print(f"- official SDK: not measured ({_official.IMPORT_ERROR})")
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rtt", type=float, default=40.0, help="round trip in ms (0: none)")
    parser.add_argument("--rounds", type=int, default=12)
    parser.add_argument("--only", default="", help="the operations whose name holds this text")
    args = parser.parse_args()
    measure(args.rtt, args.rounds, args.only)


if __name__ == "__main__":
    main()
