"""The client's output hot path alone, replayed offline: CPU time and instruction counts.

Network, emulator and command are taken out: the NDJSON body that the
emulator would send for the throughput workload is built in memory (with the
emulator's own line encoder, frames cut the way its pipe reader cuts them),
sliced into 64 KiB chunks as ``requests`` delivers them, and fed to:

- ``sdk capture``: the SDK's ``Follower`` (line splitting, frame parsing,
  sequence checks, incremental UTF-8 decoding) into ``Capture`` (default
  ``max_output``), as ``run()`` does without callbacks;
- ``sdk on_output``: the same into a character counter, as ``run(on_output=)``;
- ``sdk capture all``: the same into ``Output`` with a ``max_output`` over the
  output (everything kept, then read), as ``run(max_output=1 << 30)``;
- ``floor``: a minimal loop doing the same decoding (find-based line split,
  ``json.loads``, ``base64.b64decode``, incremental UTF-8) into the counter;
- ``official``: the official SDK's ``ProcessStream`` over an ``httpx``
  response with the same chunks, plus the same UTF-8 decoding (if installed).

CPU time is split into user and kernel time, with the minor page faults
(fresh memory touched): capturing everything builds a result of up to 4 bytes
a character in memory the kernel must fault in, which the callback path never
does. CPU time is noisy on a shared machine; ``--callgrind`` also counts
instructions under valgrind (repeatable whatever else the machine does),
net of a baseline run that only builds the body.

    python bench/hotpath.py [--mb 50] [--repeat 7] [--callgrind] [--src DIR]

``--src DIR`` measures another copy of ``createos_sync`` (for example the
previous commit, ``git archive HEAD~1 createos_sync | tar -x -C DIR``).
"""

from __future__ import annotations

import argparse
import inspect
import math
import os
import resource
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

VARIANTS = ("floor", "sdk on_output", "sdk capture", "sdk capture all", "official")


def build_body(total_bytes: int) -> tuple[list[bytes], dict[str, int], int]:
    """64 KiB chunks of the NDJSON body, the characters expected, the output bytes."""
    from _workloads import UNIT, UNIT_CHARS

    from createos_sync.emulator._machine.journal import End, Frame
    from createos_sync.emulator._service.streams import data_line, exit_line

    units = total_bytes // len(UNIT)
    left = [units * 3 // 4 * len(UNIT), (units - units * 3 // 4) * len(UNIT)]
    expected = {
        "stdout": left[0] // len(UNIT) * UNIT_CHARS,
        "stderr": left[1] // len(UNIT) * UNIT_CHARS,
    }
    buf = UNIT * (70000 // len(UNIT) + 2)
    sizes = (65536, 8191, 32771, 16411, 49999)  # as the generator writes, one frame per write
    offsets, lines, i, seq = [0, 0], [], 0, 0
    while left[0] or left[1]:
        fd = 1 if (i % 4 != 3 and left[0]) or not left[1] else 2
        n = min(sizes[i % len(sizes)], left[fd - 1])
        off = offsets[fd - 1]
        seq += 1
        lines.append(data_line(Frame(seq, "stdout" if fd == 1 else "stderr", buf[off : off + n])))
        offsets[fd - 1] = (off + n) % len(UNIT)
        left[fd - 1] -= n
        i += 1
    lines.append(exit_line(End(seq, 0, None)))
    body = b"".join(lines)
    chunk = 64 * 1024
    return [body[i : i + chunk] for i in range(0, len(body), chunk)], expected, units * len(UNIT)


class FakeStream:
    """Just enough of ``createos_sync._wire.http.Stream`` for the ``Follower``."""

    def __init__(self, chunks: list[bytes]) -> None:
        self._chunks = chunks

    def chunks(self, size: int = 0) -> Iterator[bytes]:
        return iter(self._chunks)

    def finish(self) -> bool:
        return True

    def close(self) -> None:
        pass

    def __enter__(self) -> FakeStream:
        return self

    def __exit__(self, *exc: object) -> None:
        pass


def variant(name: str, chunks: list[bytes], expected: dict[str, int]) -> Callable[[], None]:
    from _workloads import Counter, read_ndjson

    from createos_sync._commands.follow import Follower
    from createos_sync._commands.output import Capture
    from createos_sync._wire.deadline import Deadline

    def sdk(deliver: Callable[[str, str], None] | None, keep: Any = None) -> None:
        def open_stream(after: int, deadline: Any) -> Any:
            return FakeStream(chunks)

        if "deliver" not in inspect.signature(Follower).parameters:
            # Since issue 37 the follower hands on bytes only; ``Output`` decodes at its edge.
            from createos_sync._commands.output import Output

            output = Output(0, sinks=(deliver,))
            follower = Follower(open_stream, keep if keep is not None else output.write)
            assert follower.follow(Deadline.after(math.inf)) is not None
            output.end()
            return
        if keep is None:
            follower = Follower(open_stream, deliver)
        else:
            follower = Follower(open_stream, deliver, keep=keep)
        assert follower.follow(Deadline.after(math.inf)) is not None

    def sdk_capture() -> None:
        capture = Capture(4 * 1024 * 1024)
        if "keep" in inspect.signature(Follower).parameters:
            sdk(None, keep=capture.write)  # since issue 11: the capture takes raw bytes
        else:
            sdk(capture.write)
        assert len(capture.stdout.getvalue()) == min(expected["stdout"], 4 * 1024 * 1024)

    def sdk_capture_all() -> None:
        from createos_sync._commands.output import Output

        output = Output(1 << 30)
        sdk(None, keep=output.write)
        assert (len(output.stdout), len(output.stderr)) == (expected["stdout"], expected["stderr"])
        assert not output.truncated

    def sdk_callback() -> None:
        counter = Counter()
        sdk(counter)
        assert counter.chars == expected, counter.chars

    def floor() -> None:
        counter = Counter()
        read_ndjson(iter(chunks), counter)
        assert counter.chars == expected, counter.chars

    def official() -> None:
        import codecs

        import httpx
        from createos._streams import ProcessStream

        counter = Counter()
        decoders = {
            n: codecs.getincrementaldecoder("utf-8")("replace") for n in ("stdout", "stderr")
        }
        for event in ProcessStream(httpx.Response(200, content=iter(chunks))):
            if str(event.type) == "data":
                name = "stderr" if str(event.stream) == "stderr" else "stdout"
                counter(name, decoders[name].decode(event.data))
            elif str(event.type) == "exit":
                break
        for name, decoder in decoders.items():
            counter(name, decoder.decode(b"", final=True))
        assert counter.chars == expected, counter.chars

    return {
        "floor": floor,
        "sdk on_output": sdk_callback,
        "sdk capture": sdk_capture,
        "sdk capture all": sdk_capture_all,
        "official": official,
        "none": lambda: None,
    }[name]


def official_available() -> str | None:
    try:
        import createos._streams  # noqa: F401
        import httpx  # noqa: F401
    except ImportError as exc:
        return f"{type(exc).__name__}: {exc}"
    return None


def time_variants(mb: int, repeat: int) -> dict[str, list[tuple[float, float, float]]]:
    """Per variant and round: (user s, kernel s, minor page faults), per 100 MB of output."""
    chunks, expected, nbytes = build_body(mb * 1_000_000)
    names = [n for n in VARIANTS if n != "official" or official_available() is None]
    actions = {n: variant(n, chunks, expected) for n in names}
    for action in actions.values():
        action()  # warm up: imports, caches
    per100 = 100_000_000 / nbytes
    usage: dict[str, list[tuple[float, float, float]]] = {n: [] for n in names}
    for i in range(repeat):
        for name in names if i % 2 == 0 else reversed(names):
            before = resource.getrusage(resource.RUSAGE_SELF)
            actions[name]()
            after = resource.getrusage(resource.RUSAGE_SELF)
            usage[name].append(
                (
                    (after.ru_utime - before.ru_utime) * per100,
                    (after.ru_stime - before.ru_stime) * per100,
                    (after.ru_minflt - before.ru_minflt) * per100,
                )
            )
    return usage


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mb", type=int, default=50)
    parser.add_argument("--repeat", type=int, default=7)
    parser.add_argument("--callgrind", action="store_true", help="also count instructions")
    parser.add_argument("--callgrind-mb", type=int, default=4)
    parser.add_argument("--src", help="import createos_sync from this directory")
    parser.add_argument("--once", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.src:
        sys.path.insert(0, os.path.abspath(args.src))
    if args.once:
        chunks, expected, _ = build_body(args.mb * 1_000_000)
        variant(args.once, chunks, expected)()
        return
    run(args.mb, args.repeat, args.callgrind, args.callgrind_mb, args.src)


def run(
    mb: int, repeat: int, with_callgrind: bool, callgrind_mb: int, src: str | None
) -> dict[str, Any]:
    from _common import Stats, callgrind, heading, machine, paired_ratio

    import createos_sync

    heading(f"3b. Output hot path, offline: {mb} MB of NDJSON replayed from memory")
    print(f"createos_sync from {Path(createos_sync.__file__).parent}; {machine()}")
    print(
        "method: CPU time (user + kernel, getrusage) per 100 MB of output, variants "
        "interleaved; then user and kernel time and minor page faults apart"
    )
    usage = time_variants(mb, repeat)
    cpu = {name: [user + kernel for user, kernel, _ in rounds] for name, rounds in usage.items()}
    floor = Stats(cpu["floor"])
    results: dict[str, Any] = {}
    for name, values in cpu.items():
        stats = Stats(values)
        user = Stats([u for u, _, _ in usage[name]]).median
        kernel = Stats([k for _, k, _ in usage[name]]).median
        faults = Stats([f for _, _, f in usage[name]]).median
        results[name] = {"cpu_per_100mb": stats.median, "user": user, "kernel": kernel}
        print(
            f"- {name:16s} {stats.describe('s / 100 MB')}  "
            f"floor/this {floor.median / stats.median:.2f}x"
        )
        print(f"    user {user:.3f} s, kernel {kernel:.3f} s, {faults:,.0f} minor page faults")
    everything, callback = "sdk capture all", "sdk on_output"
    both = paired_ratio(cpu[callback], cpu[everything]).median
    user_only = paired_ratio(
        [u for u, _, _ in usage[callback]], [u for u, _, _ in usage[everything]]
    ).median
    print(
        f"- capturing everything vs the callback path: CPU {both:.2f}x, "
        f"user time alone {user_only:.2f}x (1.00x = as cheap)"
    )
    if "official" not in cpu:
        print(f"- official: not measured ({official_available()})")
    if with_callgrind:
        print(
            f"method: instructions under callgrind for {callgrind_mb} MB, minus a run that "
            "only builds the body, per MB of output"
        )
        base = callgrind(__file__, ["--once", "none", "--mb", str(callgrind_mb)], src)
        counts = {
            n: (callgrind(__file__, ["--once", n, "--mb", str(callgrind_mb)], src) - base)
            / callgrind_mb
            for n in cpu
        }
        for name, count in counts.items():
            results[name]["instructions_per_mb"] = count
            print(
                f"- {name:16s} {count / 1e6:8.1f} M instructions / MB  "
                f"floor/this {counts['floor'] / count:.2f}x"
            )
    return results


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    main()
