"""One sandbox's life, and this machine's record of it.

Creating (a lost answer recovered by name), forking, reaching ``running``, the ttl watchdog,
the containment rule, the lease journal and reaping, what a lease attached. Its doors: it
uses ``_resources`` and ``_wire`` below it and the public ``models``/``errors``/``config``;
never ``lease``, ``_files`` or ``_commands`` (pyproject's import contract checks it).
"""
