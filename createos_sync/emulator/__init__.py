"""A local emulator of the CreateOS sandbox HTTP API, for development and tests.

``Emulator`` serves the API of PROTOCOL.md on a loopback port from a
background thread and runs commands as real processes: output journal with
sequence numbers, replay and eviction, asynchronous status transitions, pause
by SIGSTOP, rate limiting, and scripted faults (``Fault``) for testing a
client's recovery paths. ``python -m createos_sync.emulator`` serves it
standalone.

It is a test stand-in, NEVER a security boundary: commands run as the user
that runs the emulator, on the host's kernel and network.

Isolation modes (``Emulator.isolation`` says which one is in use):

- ``bwrap``: each command runs under bubblewrap, in its own PID namespace,
  with the host's system directories read-only and the sandbox's own storage
  mounted at ``/workspace``, ``/tmp`` and ``/home/user`` (HOME). Paths inside
  a command mean what they mean on the service. A small reporter (this
  Python, when the sandbox can see it) is the namespace's PID 1 so that exit
  codes and signals are reported exactly.
- ``none`` (when bubblewrap is missing or does not work): plain child
  processes under a subreaper that keeps every descendant in the tree (so
  termination and destroy leave nothing behind, ``setsid`` included), with
  the working directory, HOME and TMPDIR in the sandbox's storage. The
  sandbox paths ``/workspace``, ``/tmp`` and ``/home/user`` written in a
  command's arguments, working directory or environment are rewritten into
  the storage; a path a program computes at run time still reaches the host
  (see ``_isolation``). The host's own ``/workspace`` is never touched.

In both modes a one-shot exec's whole tree ends with its command (what it
left in the background included), and the files API maps ``/workspace``,
``/tmp`` and ``/home/user`` into the sandbox's storage; the rest of the tree
is served where the sandbox has a writable layer (bubblewrap and overlayfs),
else refused. Run as root, bubblewrap drops every capability of the
sandboxed root (``isolation``), and the files API opens paths beneath the
sandbox's tree without following a symlink out of it (``beneath``).

Network (``Emulator.network`` says which): ``private`` where bubblewrap
works, namespaces can be made (root) and ``slirp4netns`` is installed: each
sandbox has a network namespace of its own, with its guest agent at
``http://127.0.0.1:1029`` and egress through slirp4netns's NAT; else
``shared``: commands use the host's network, a sandbox's port is a port of
the host (two sandboxes cannot listen on the same one at once), and each
sandbox's guest agent listens on a loopback port named to its processes in
``CREATEOS_AGENT_URL``. The agent (``POST /self/delete``, ``/self/pause``)
acts on its own sandbox only (``_agent``, ``_netns``). Every launch
(processes, terminals, template build steps, whose network has no agent)
starts inside the network. Egress rules are
stored and returned (``GET``/``PUT .../egress``) but NOT enforced.
Preview URLs (``ingress_url_template``: an origin per sandbox port,
``http://<port>-<sandbox id>.sb.localhost:PORT/``, or the path form
``http://127.0.0.1:PORT/_ingress/<sandbox id>/<port>/`` where names under
``localhost`` do not resolve; ``previews``) go through a reverse proxy in
the emulator that refuses a sandbox with ingress off and forwards only to a
port whose every listener a process of that sandbox holds (``ingress``,
``listeners``); ``preview_session()`` opens them as a browser would.
``PATCH /v1/sandboxes/{id}`` switches ingress and changes auto-pause; a
sandbox idle for its auto-pause limit is paused.

Output journal: while no stream is attached, the oldest frames are evicted
beyond ``journal_bytes`` (a later ``connect`` gets 410). While a stream is
attached, the emulator stops reading the process's pipes instead of evicting
frames that stream has not sent, so the process blocks on write: a reading
client loses nothing.
"""

from ..errors import missing_extra

try:
    import werkzeug  # noqa: F401  (the [emulator] extra: the HTTP server)
except ModuleNotFoundError as exc:
    raise missing_extra("emulator", "createos_sync.emulator", exc) from None

from ._service.faults import OPERATIONS, Fault
from ._service.previews import session as preview_session
from ._service.requestlog import RequestRecord
from ._service.server import Emulator
from ._state.sandbox import LiveProcess

__all__ = ["OPERATIONS", "Emulator", "Fault", "LiveProcess", "RequestRecord", "preview_session"]
