"""The emulator's HTTP side: what a client talks to.

The server and its TLS, routing, the rate limit, scripted faults, the request log, the
endpoint handlers, output streams and the ingress proxy. Its doors: it uses ``_state`` and
``_machine`` below it, and the shared ``_wire`` vocabulary.
"""
