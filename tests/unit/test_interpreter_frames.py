"""The client's reading of the kernel's frames, and the kernel source it sends."""

from __future__ import annotations

import base64

import pytest

from createos_sync._commands import processes
from createos_sync._commands.command import Command
from createos_sync.errors import ProtocolError
from createos_sync.interpreter import _frames


def _line(token: str, kind: str, payload: bytes) -> str:
    return f"{token} {kind} {base64.b64encode(payload).decode()}\n"


def test_frames_split_anywhere_and_continued_come_out_whole() -> None:
    text = _line("t1", "out", b"hello") + _line("t1", "res+", b'{"a":') + _line("t1", "res", b"1}")
    text += _line("t1", "end", b"{}")
    for cut in range(len(text)):
        reader = _frames.FrameReader()
        frames = reader.feed(text[:cut]) + reader.feed(text[cut:])
        assert [(f.kind, f.payload) for f in frames] == [
            ("out", b"hello"),
            ("res", b'{"a":1}'),
            ("end", b"{}"),
        ]


@pytest.mark.parametrize(
    "line", ["not a frame\n", "t1 out !!!notbase64\n", "t1 out\n", "a b c d\n"]
)
def test_a_line_that_is_not_a_frame_is_a_protocol_error(line: str) -> None:
    with pytest.raises(ProtocolError, match="the interpreter wrote"):
        _frames.FrameReader().feed(line)


def test_a_runaway_line_is_refused_before_it_fills_memory() -> None:
    reader = _frames.FrameReader()
    with pytest.raises(ProtocolError, match="too long"):
        for _ in range(5):
            reader.feed("x" * (1024 * 1024))


def test_the_kernel_source_is_one_module_of_the_standard_library() -> None:
    source = _frames.kernel_source().decode()
    compile(source, "<createos-kernel>", "exec")
    assert source.count("from __future__ import annotations") == 1
    assert "from ." not in source and "import createos_sync" not in source
    assert "joined in the sandbox" not in source and source.endswith("main()\n")
    payload = _frames.boot_payload()
    assert int(payload[:8]) == len(payload) - 8


def test_tokens_differ_and_requests_are_single_lines() -> None:
    assert len({_frames.new_token() for _ in range(100)}) == 100
    line = _frames.request("run", "t", code="print('a\\nb')\n# é")
    assert line.endswith(b"\n") and line.count(b"\n") == 1


def test_a_continued_frame_larger_than_any_result_is_refused() -> None:
    reader = _frames.FrameReader()
    piece = _line("t", "res+", b"x" * (1024 * 1024))
    with pytest.raises(ProtocolError, match="larger than any of its own"):
        for _ in range(_frames.MAX_FRAME // (1024 * 1024) + 1):
            reader.feed(piece)


@pytest.mark.parametrize("closed", [{"stdin": b"data"}, {"stdin": None, "pty": (24, 80)}])
def test_a_first_input_rides_only_a_gate_released_by_a_line(closed: dict[str, object]) -> None:
    # (how the kernel and its first cell reach it: with the start gate's release)
    command = Command.parse(["python3"])
    with pytest.raises(ValueError, match="first_input needs an open stdin and no terminal"):
        processes.start(
            None,  # type: ignore[arg-type]  (refused before the box is used)
            command,
            max_output=0,
            text=True,
            on_output=None,
            echo=None,
            first_input=b"x",
            **closed,  # type: ignore[arg-type]
        )
