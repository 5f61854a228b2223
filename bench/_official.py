"""The official ``createos-sandbox`` SDK doing the same managed-process run, when installed.

It is installed in the benchmark environment only (``bench/setup_venv.sh``),
never a dependency of the project. It exposes the managed-process endpoints
one by one (``processes.create / connect / close_standard_input``) and yields
raw bytes per frame, so the UTF-8 decoding (incremental, per stream, as
``Lease.run`` does it) is done here.
"""

from __future__ import annotations

import codecs
import ssl
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

    def __init__(self, url: str, api_key: str, sandbox_id: str, ca_path: str | None = None) -> None:
        if createos is None:
            raise RuntimeError(f"createos-sandbox is not importable ({IMPORT_ERROR})")
        http_client = None
        if ca_path is not None:  # its documented hook: an httpx client of our own
            import httpx

            http_client = httpx.Client(verify=ssl.create_default_context(cafile=ca_path))
        self._http = http_client
        self.client = createos.Client(api_key, base_url=url, http_client=http_client)
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

    def write_file(self, path: str, data: bytes) -> None:
        self.sandbox.files.upload(path, data)

    def read_file(self, path: str) -> bytes:
        with self.sandbox.files.download(path) as stream:
            return stream.read()

    def open_close(self, shape: str = "s-1vcpu-1gb") -> None:
        """Create a sandbox, wait until it runs (its own polling), destroy it."""
        assert createos is not None
        sandbox = self.client.create_sandbox(createos.CreateSandboxRequest(shape=shape))
        sandbox.wait_until_running()
        sandbox.destroy()

    def close(self) -> None:
        self.client.close()
        if self._http is not None:
            self._http.close()
