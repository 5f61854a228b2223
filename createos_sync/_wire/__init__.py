"""The wire: everything that talks to the CreateOS service, and nothing that knows a lease.

Transport (session, pacing, retries, JSend decoding, error mapping), the request budget shared
by the machine, deadlines and cut-offs, the output stream's format, and ``api/``: one function
per endpoint. Its doors: it imports only ``errors``, ``result`` and ``config``, the layers
below it (pyproject's import contract checks it).
"""
