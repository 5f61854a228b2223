"""The integrations tier: each framework's own judges against the adapters, on the emulator.

The frameworks are optional extras, absent from the default test install:
``.ci/integrations.sh`` makes a virtual environment for each one (Python
3.12 for Harbor) and runs the tests of that framework there. Elsewhere
these modules skip, saying which package is missing.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from createos_sync import Client
from createos_sync.emulator import Emulator

from ..integration.helpers import FAST


@pytest.fixture(scope="module")
def emulator(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Emulator]:
    """An emulator, and a state directory of the module's own for the lease journal.

    Module-scoped fixtures run before the suite's per-test isolation, so the
    journal's directory is set here too: a lease opened at module scope must
    never write to the developer's own state.
    """
    with pytest.MonkeyPatch.context() as patch, Emulator(rate_limit=None) as emu:
        patch.setenv("CREATEOS_SYNC_STATE_DIR", str(tmp_path_factory.mktemp("module-state")))
        yield emu


@pytest.fixture(scope="module")
def shared_client(emulator: Emulator) -> Iterator[Client]:
    """The adapters' one client of the process, pointed at the emulator."""
    from createos_sync.integrations import _threads

    with emulator.client(requests_per_minute=FAST, rate_scope="process") as client:
        _threads.use_client(client)
        try:
            yield client
        finally:
            _threads.use_client(None)
