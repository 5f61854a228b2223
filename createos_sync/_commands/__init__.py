"""One command's life: from the user's argv to its exit status, output never lost.

Quoting and the start gate, running a managed process to its end, following its output
stream across reconnections, the capture, terminals. Its doors: it uses ``_sandboxes`` (the
box a command runs in) and ``_wire``; the public ``process`` and ``lease`` sit above it.
"""
