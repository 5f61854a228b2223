"""The account's other resources and a sandbox's extras: templates (built from a
Dockerfile), disks, private networks, access tokens, SSH keys, disk size, bandwidth.
Arguments are checked here, before any request;
the endpoints are in ``_wire.api``, the lease's side in ``lease`` and ``_sandboxes.attachments``.
"""
