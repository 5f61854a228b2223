"""Request budget: HTTP requests per SDK operation, counted from the emulator's request log.

Each operation runs ``--repeat`` times on a separate-process emulator (no rate
limit); the log (``GET /_emulator/requests``: method, path, operation,
status) is read before and after each one. Status polls while a sandbox is
``creating`` depend on timing, so lease open + close is reported as a range
with the polls counted apart.

    python bench/budget.py [--repeat 5]
"""

from __future__ import annotations

import argparse
import collections
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from _common import EmulatorProcess, counted, heading, machine

import createos_sync as cs

# Targets of issue 5; the directory transfers have none there (by design: the
# transfer itself, plus a managed run of tar, plus for downloads one exec
# removing the scratch archive).
TARGETS: dict[str, int | None] = {
    "lease open + close": 4,  # create, (polls), destroy; the target excludes polls
    # issue 36: a lease's first command starts its command session (session create,
    # connect, the command): 3, on top of open + close's 3 (create, the ttl watchdog,
    # destroy); polls excluded
    "lease + first run + close": 6,
    'run("true")': 3,
    "run with stdin": 4,
    "write_file": 1,
    "read_file": 1,
    "start + wait": 3,
    # issue 36: 10 commands of every kind (exit codes, stderr, env, cwd, stdin, argv) in an
    # open lease, <= 1.1 requests each (3.1 before the command session)
    "10 mixed runs": 11,
    "upload_dir": None,
    "download_dir": None,
}


def operations(box: cs.Lease, client: cs.Client, scratch: Path) -> dict[str, Callable[[], Any]]:
    tree = scratch / "tree"
    (tree / "sub").mkdir(parents=True, exist_ok=True)
    (tree / "a.txt").write_text("a" * 1000)
    (tree / "sub" / "b.bin").write_bytes(bytes(range(256)) * 40)
    box.write_file("/workspace/data.txt", b"x" * 10_000)

    def lease_cycle() -> None:
        with client.lease():
            pass

    def first_run() -> None:
        with client.lease() as fresh:
            fresh.run("true").check()

    def download_dir() -> None:
        target = scratch / "down"
        if target.exists():
            for path in sorted(target.rglob("*"), reverse=True):
                path.rmdir() if path.is_dir() else path.unlink()
        box.download_dir("/workspace/up", target)

    def mixed() -> None:
        assert box.run("exit 3").exit_code == 3
        assert box.run("echo e >&2").stderr == "e\n"
        assert box.run("echo $V", env={"V": "v"}).stdout == "v\n"
        assert box.run("pwd", cwd="/tmp").stdout == "/tmp\n"
        assert box.run("cat", stdin=b"in").stdout == "in"
        assert box.run(["printf", "%s", "a b"]).stdout == "a b"
        assert box.run("kill -TERM $$").signal == "SIGTERM"
        assert box.run("true").ok
        assert box.run("seq 1000 | wc -l").stdout.strip() == "1000"
        assert box.run("printf '\\377'").exit_code == 0

    return {
        "lease open + close": lease_cycle,
        "lease + first run + close": first_run,
        'run("true")': lambda: box.run("true").check(),
        "run with stdin": lambda: box.run("cat >/dev/null", stdin=b"hello\n").check(),
        "write_file": lambda: box.write_file("/workspace/w.txt", b"y" * 10_000),
        "read_file": lambda: box.read_file("/workspace/data.txt"),
        "start + wait": lambda: box.start("true").wait().check(),
        "10 mixed runs": mixed,
        "upload_dir": lambda: box.upload_dir(tree, "/workspace/up"),
        "download_dir": download_dir,
    }


def measure(repeat: int) -> dict[str, Any]:
    heading("1. Request budget per operation (from the emulator's request log)")
    results: dict[str, Any] = {}
    with EmulatorProcess() as emu, emu.client() as client, client.lease() as box:
        print(f"setup: {emu.setup}; client in this process; {machine()}")
        print(f"method: each operation {repeat} times; requests logged during each one")
        with tempfile.TemporaryDirectory() as scratch:
            ops = operations(box, client, Path(scratch))
            ops["upload_dir"]()  # download_dir needs the tree there
            for name, action in ops.items():
                totals, polls, kinds = [], [], collections.Counter[str]()
                for _ in range(repeat):
                    with counted(emu) as logged:
                        action()
                    statuses = [r for r in logged if r["operation"] == "sandbox.get"]
                    totals.append(len(logged))
                    polls.append(len(statuses) if name.startswith("lease") else 0)
                    kinds.update(r["operation"] for r in logged)
                    assert all(r["status"] and r["status"] < 400 for r in logged), logged
                results[name] = _line(name, totals, polls, kinds, repeat)
    return results


def _line(
    name: str, totals: list[int], polls: list[int], kinds: collections.Counter[str], repeat: int
) -> dict[str, Any]:
    target = TARGETS[name]
    without_polls = [t - p for t, p in zip(totals, polls, strict=True)]
    worst = max(without_polls)
    spread = f"{min(totals)}" if min(totals) == max(totals) else f"{min(totals)}-{max(totals)}"
    per_kind = ", ".join(
        f"{op} x{count / repeat:g}" for op, count in sorted(kinds.items(), key=lambda kv: kv[0])
    )
    poll_note = f" ({min(polls)}-{max(polls)} of them status polls)" if any(polls) else ""
    if target is None:
        verdict = "no target in issue 5"
    else:
        polls_too = " + polls" if any(polls) else ""
        verdict = f"target <= {target}{polls_too}: " + ("ok" if worst <= target else "OVER")
    print(f"- {name:25s} {spread:>5s} requests{poll_note}; {verdict}")
    print(f"    {per_kind}")
    ok = target is None or worst <= target
    return {"requests": totals, "polls": polls, "target": target, "ok": ok}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=5)
    measure(parser.parse_args().repeat)


if __name__ == "__main__":
    main()
