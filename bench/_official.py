"""The official ``createos-sandbox`` SDK doing the same managed-process run, when installed.

It is installed in the benchmark environment only (``bench/setup_venv.sh``),
never a dependency of the project. It exposes the managed-process endpoints
one by one (``processes.create / connect / close_standard_input``) and yields
raw bytes per frame, so the UTF-8 decoding (incremental, per stream, as
``Lease.run`` does it) is done here.
"""

from __future__ import annotations

import codecs
from typing import Any

from _workloads import Sink

try:
    import createos
except ImportError as exc:  # reported by the scripts, never faked
    createos = None
    IMPORT_ERROR: str | None = f"{type(exc).__name__}: {exc}"
else:
    IMPORT_ERROR = None


def version() -> str | None:
    return None if createos is None else str(createos.__version__)


class OfficialRun:
    """Managed-process runs through the official SDK, on an existing sandbox."""

    def __init__(self, url: str, api_key: str, sandbox_id: str) -> None:
        if createos is None:
            raise RuntimeError(f"createos-sandbox is not importable ({IMPORT_ERROR})")
        self.client = createos.Client(api_key, base_url=url)
        self.sandbox = self.client.get_sandbox(sandbox_id)

    def run(self, wrapper_args: list[str], sink: Sink | None = None) -> dict[str, Any]:
        processes = self.sandbox.processes
        assert createos is not None
        created = processes.create(
            createos.ManagedProcessCreateRequest(command="/bin/bash", arguments=wrapper_args)
        )
        pid = created.process_id
        decoders = {
            n: codecs.getincrementaldecoder("utf-8")("replace") for n in ("stdout", "stderr")
        }
        with processes.connect(pid) as stream:
            processes.close_standard_input(pid)
            for event in stream:
                kind = str(event.type)
                if kind == "data":
                    name = "stderr" if str(event.stream) == "stderr" else "stdout"
                    text = decoders[name].decode(event.data)
                    if sink is not None and text:
                        sink(name, text)
                elif kind == "exit":
                    for name, decoder in decoders.items():
                        tail = decoder.decode(b"", final=True)
                        if sink is not None and tail:
                            sink(name, tail)
                    return {"exit_code": event.exit_code, "signal": event.signal}
                elif kind == "error":
                    raise RuntimeError(f"stream error {event.error_message}")
        raise RuntimeError("the stream ended before the exit frame")

    def close(self) -> None:
        self.client.close()
