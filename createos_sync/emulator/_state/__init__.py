"""The emulator's records: sandboxes, templates and their builds, the published catalog.

Status transitions and what each record owns. Its doors: it drives ``_machine`` for the real
processes and storage, and uses ``_wire``; it never handles a request itself.
"""
