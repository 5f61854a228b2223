"""HTTPS for the emulator: a throwaway certificate authority and a certificate for loopback.

The real service is HTTPS: a new connection costs a TCP and a TLS handshake,
which is what connection reuse saves and what benchmarks must be able to
see. ``trustme`` (a small, maintained library made for exactly this, on top
of ``cryptography``) makes a fresh CA for each emulator and issues a
certificate for ``127.0.0.1``, ``::1``, ``localhost`` and ``*.sb.localhost``
(preview hosts). Only the CA's
certificate is written out, for clients to trust; the keys stay in memory
(trustme passes the server's through a private temporary file to
``load_cert_chain``, which reads only from files). Nothing is ever trusted
system-wide.
"""

from __future__ import annotations

import ssl
from pathlib import Path

CA_FILE = "ca.pem"


def server_context(directory: Path) -> tuple[ssl.SSLContext, Path]:
    """A server-side TLS context for loopback, and the path of the CA that signed it."""
    try:
        import trustme
    except ImportError:
        raise RuntimeError(
            "serving HTTPS needs the trustme package: pip install 'createos-sync[emulator]'"
        ) from None
    authority = trustme.CA(organization_name="createos-sync emulator")
    leaf = authority.issue_cert("127.0.0.1", "::1", "localhost", "*.sb.localhost")  # previews
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    leaf.configure_cert(context)
    ca_path = directory / CA_FILE
    authority.cert_pem.write_to_path(str(ca_path))
    return context, ca_path
