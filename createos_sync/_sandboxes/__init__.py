"""One sandbox's life, and this machine's record of it.

Creating (a lost answer recovered by name), forking, reaching ``running``, the ttl watchdog,
the containment rule, the lease journal and reaping, the interpreter's open leases. Its doors:
it uses ``_wire`` below it and the public ``models``/``errors``; never ``lease`` or ``_commands``.
"""
