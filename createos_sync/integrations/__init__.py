"""Adapters for the frameworks CreateOS users already work in, each behind an optional extra.

- ``createos_sync.integrations.inspect``: Inspect AI's sandbox environment
  ``createos`` (``pip install 'createos-sync[inspect]'``).
- ``createos_sync.integrations.harbor``: Harbor's ``CreateOSEnvironment``
  (``[harbor]``, Python >= 3.12).
- ``createos_sync.integrations.openai_agents``: a sandbox client for the
  OpenAI Agents SDK (``[openai-agents]``).

The room and its doors: an adapter is a thin layer over leases and imports
only the public surface, ``createos_sync`` (and ``createos_sync.errors``),
never an underscore module of the SDK, so that every promise of a lease
holds inside it: containment, the journal, the ttl watchdog, the machine's
request budget. What the adapters share, blocking calls run from an event
loop and leases closed on cancellation, is ``_threads``; files with Python's
own errors, ``_files``. Importing this package imports no framework.
"""
