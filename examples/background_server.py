"""A server in the background: start it, learn its port from its output, use it, stop it.

``Lease.start`` returns a ``Process`` whose output can be read while it
runs; whatever is still running when the lease closes is terminated. Runs
against CreateOS when CREATEOS_API_KEY is set, else against the local
emulator (``pip install 'createos-sync[emulator]'``).
"""

from __future__ import annotations

import contextlib
import os
import re

import createos_sync as cs

# Port 0: the system picks a free port, and the server says which one.
SERVER = ["python3", "-u", "-m", "http.server", "0", "--bind", "127.0.0.1"]
FETCH = "import sys, urllib.request; print(urllib.request.urlopen(sys.argv[1]).read().decode())"


def main(client: cs.Client) -> None:
    with cs.lease(client=client) as box:
        box.write_file("/workspace/hello.txt", "hello from the sandbox\n")
        server = box.start(SERVER, cwd="/workspace")
        port = None
        for stream, text in server.output():  # live, while the server runs
            found = re.search(r"port (\d+)", text)
            if stream == "stdout" and found:
                port = int(found.group(1))
                break
        if port is None:
            raise RuntimeError(f"the server ended early: {server.wait()!r}")
        print(f"server {server.id} listens on port {port}")

        page = box.run(["python3", "-c", FETCH, f"http://127.0.0.1:{port}/hello.txt"], check=True)
        print(page.stdout, end="")

        server.terminate()
        log = server.wait()
        print(f"server stopped ({log.signal or log.exit_code}); its access log:")
        print(log.stderr, end="")


if __name__ == "__main__":
    if os.environ.get("CREATEOS_API_KEY"):
        with cs.Client() as remote:
            main(remote)
    else:
        from createos_sync.emulator import Emulator

        with Emulator() as emulator, contextlib.closing(emulator.client()) as local:
            main(local)
