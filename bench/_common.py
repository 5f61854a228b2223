"""What every benchmark script shares: an emulator in its own process, statistics, printing.

The emulator runs as a separate process (``python -m createos_sync.emulator``)
so that the client measured here does not share a GIL with the server.
"""

from __future__ import annotations

import os
import re
import secrets
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import requests

import createos_sync as cs

BENCH_DIR = Path(__file__).resolve().parent
REPO = BENCH_DIR.parent
OFFICIAL_PYTHON = BENCH_DIR / ".venv" / "bin" / "python"
MB = 1_000_000
MIB = 1 << 20


class EmulatorProcess:
    """``python -m createos_sync.emulator`` in a child process, on a free loopback port."""

    def __init__(
        self, *, rate_limit: bool = False, journal_bytes: int | None = None, tls: bool = False
    ) -> None:
        self.api_key = secrets.token_urlsafe(24)
        argv = [sys.executable, "-m", "createos_sync.emulator", f"--api-key={self.api_key}"]
        if not rate_limit:
            argv.append("--no-rate-limit")
        if journal_bytes is not None:
            argv += ["--journal-bytes", str(journal_bytes)]
        if tls:
            argv.append("--tls")
        self.setup = "emulator in a separate process" + (
            ", rate limit 300/min" if rate_limit else ", no rate limit"
        )
        self._session = requests.Session()
        self._errors = tempfile.TemporaryFile("w+")  # noqa: SIM115 (closed by close())
        # The emulator is always this repository's, even when PYTHONPATH points the
        # client measured here at another copy of createos_sync (a before/after run).
        env = {name: value for name, value in os.environ.items() if name != "PYTHONPATH"}
        self._proc = subprocess.Popen(
            argv, stdout=subprocess.PIPE, stderr=self._errors, text=True, cwd=REPO, env=env
        )
        self.url = ""
        self.isolation = ""
        self.ca_path: str | None = None
        assert self._proc.stdout is not None
        for line in self._proc.stdout:
            if line.startswith("CreateOS emulator listening on "):
                self.url = line.split()[-1]
            elif line.startswith("isolation: "):
                self.isolation = line.split()[-1]
            elif line.startswith("CA certificate: "):
                self.ca_path = line.split(": ", 1)[1].strip()
            elif line.startswith("export "):
                break
        if not self.url:
            self._proc.wait(30)
            self._errors.seek(0)
            errors = self._errors.read()[-2000:]
            self.close()
            raise RuntimeError(f"the emulator did not start: {errors}")
        self.setup += f", isolation {self.isolation}" + (", HTTPS" if tls else "")

    def client(self, **options: Any) -> cs.Client:
        if self.ca_path is not None:
            options.setdefault("ca_bundle", self.ca_path)
        return cs.Client(api_key=self.api_key, base_url=self.url, **options)

    def requests(self) -> list[dict[str, Any]]:
        """The emulator's request log (method, path, operation, status; never the key)."""
        reply = self._session.get(
            self.url + "/_emulator/requests",
            headers={"X-Api-Key": self.api_key},
            timeout=30,
            verify=self.ca_path or True,
        )
        reply.raise_for_status()
        return list(reply.json()["data"])

    def state(self) -> dict[str, Any]:
        reply = self._session.get(
            self.url + "/_emulator/state",
            headers={"X-Api-Key": self.api_key},
            timeout=30,
            verify=self.ca_path or True,
        )
        reply.raise_for_status()
        return dict(reply.json()["data"])

    def cpu_seconds(self) -> float:
        """CPU time the emulator process has used (user + system, its own threads)."""
        fields = Path(f"/proc/{self._proc.pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    def close(self) -> None:
        self._session.close()
        self._errors.close()
        if self._proc.poll() is None:
            self._proc.terminate()
            try:
                self._proc.wait(30)
            except subprocess.TimeoutExpired:
                self._proc.kill()
                self._proc.wait()

    def __enter__(self) -> EmulatorProcess:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


@contextmanager
def counted(emulator: EmulatorProcess) -> Iterator[list[dict[str, Any]]]:
    """Collect the requests the emulator logged while the block ran."""
    before = len(emulator.requests())
    logged: list[dict[str, Any]] = []
    yield logged
    logged.extend(emulator.requests()[before:])


class Stats:
    """Median and spread of repeated measurements."""

    def __init__(self, values: Sequence[float]) -> None:
        if not values:
            raise ValueError("no measurements")
        self.values = sorted(values)
        self.median = statistics.median(self.values)
        self.min = self.values[0]
        self.max = self.values[-1]
        quartiles = statistics.quantiles(self.values, n=4) if len(values) > 1 else [self.median] * 3
        self.q1, self.q3 = quartiles[0], quartiles[2]

    def spread(self) -> float:
        """Interquartile range relative to the median."""
        return (self.q3 - self.q1) / self.median if self.median else 0.0

    def describe(self, unit: str, scale: float = 1.0, digits: int = 2) -> str:
        med, q1, q3, lo, hi = (
            f"{x * scale:.{digits}f}" for x in (self.median, self.q1, self.q3, self.min, self.max)
        )
        return f"median {med} {unit} (IQR {q1}-{q3}, min {lo}, max {hi}, n={len(self.values)})"


def ratio(numerator: Stats, denominator: Stats) -> float:
    return numerator.median / denominator.median


def paired_ratio(numerators: Sequence[float], denominators: Sequence[float]) -> Stats:
    """Ratios of interleaved pairs: less sensitive to slow drifts of the machine's load."""
    return Stats([a / b for a, b in zip(numerators, denominators, strict=True)])


def cpu_and_wall(action: Callable[[], Any]) -> tuple[float, float, Any]:
    """(CPU seconds of this process, wall seconds, result) for one call."""
    cpu0, wall0 = time.process_time(), time.perf_counter()
    result = action()
    return time.process_time() - cpu0, time.perf_counter() - wall0, result


def heading(title: str) -> None:
    print()
    print("=" * 78)
    print(title)
    print("=" * 78)


def machine() -> str:
    load = os.getloadavg()
    return (
        f"{os.cpu_count()} cores, Python {sys.version.split()[0]}, "
        f"load average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}"
    )


def callgrind(script: str, args: Sequence[str], src: str | None) -> int:
    """Instructions of ``python SCRIPT ARGS`` (``--src``: another copy), under callgrind."""
    argv = ["valgrind", "--tool=callgrind", "--callgrind-out-file=/dev/null", sys.executable]
    argv += [script, *args, *(["--src", src] if src else [])]
    done = subprocess.run(argv, capture_output=True, text=True, check=True)
    match = re.search(r"Collected : (\d+)", done.stderr)
    if match is None:
        raise RuntimeError("callgrind printed no instruction count")
    return int(match[1])
