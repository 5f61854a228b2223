"""App + database on a private network: two sandboxes, one talking to the other.

    python examples/app_and_database.py

An integration test's usual shape: a database in one sandbox, the app in
another, joined by a private network. The app reaches the database at the
database's ip on that network (``box.network_ip(net)``, not the sandbox's
own ``ip``). The database's lease makes the network, so it owns it: both
leases leave the network before their sandboxes go (the app's first: its
``with`` block is inside), and the database's lease deletes the network
after its own sandbox (asking again while the service still counts the
members that just left). Runs against CreateOS when CREATEOS_API_KEY is set,
else against a local emulator.
"""

from __future__ import annotations

import contextlib
import os
import sys

import createos_sync as cs

PORT = 5433
# A tiny "database": a key-value store over TCP, one request per connection.
DATABASE = f"""
import socketserver
rows = {{}}
class Handler(socketserver.StreamRequestHandler):
    def handle(self):
        verb, _, rest = self.rfile.readline().decode().strip().partition(" ")
        key, _, value = rest.partition("=")
        if verb == "SET":
            rows[key] = value
        self.wfile.write((rows.get(key, "(none)") + "\\n").encode())
socketserver.ThreadingTCPServer.allow_reuse_address = True
socketserver.ThreadingTCPServer(("0.0.0.0", {PORT}), Handler).serve_forever()
"""
# The "app": stores a row, then reads it back, through the network.
APP = f"""
import socket, sys
def ask(line):
    with socket.create_connection((sys.argv[1], {PORT}), timeout=10) as db:
        db.sendall(line.encode() + b"\\n")
        return db.makefile().readline().strip()
ask("SET greeting=hello from the database")
print("app got:", ask("GET greeting"))
"""


def main(client: cs.Client) -> None:
    with client.lease() as db:
        net = db.create_network("app-db-demo")  # deleted with the database's lease
        db.start(["python3", "-c", DATABASE])
        db.wait_for_port(PORT)
        db_ip = db.network_ip(net)
        print(f"database at {db_ip} on network {net.name}")
        with client.lease(networks=[net]) as app:
            print(app.run(["python3", "-c", APP, str(db_ip)], check=True).stdout.strip())
    print("networks left:", len(client.networks()))


if __name__ == "__main__":
    with contextlib.ExitStack() as stack:
        if os.environ.get("CREATEOS_API_KEY"):
            client = stack.enter_context(cs.Client())
        else:
            from createos_sync.emulator import Emulator

            print("(no CREATEOS_API_KEY: local emulator)", file=sys.stderr)
            emulator = stack.enter_context(Emulator())
            client = stack.enter_context(contextlib.closing(emulator.client()))
        main(client)
