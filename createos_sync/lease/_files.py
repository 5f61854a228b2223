"""The lease's file transfers; the engine is ``createos_sync.files``."""

from __future__ import annotations

from typing import TYPE_CHECKING

from .. import files
from ._commands import CommandMethods

if TYPE_CHECKING:
    import os


class FileMethods(CommandMethods):
    """Files and directory trees, to and from the sandbox (archives use ``run``)."""

    def write_file(
        self, path: str, data: files.FileData, *, progress: files.Progress | None = None
    ) -> None:
        """Write ``data`` (bytes, str, or a binary file object, streamed) to the remote ``path``.

        Request budget: 1 PUT. Bytes, str and seekable files are retried after
        a 5xx or a lost answer (rewinding the file); a stream that cannot be
        rewound is sent once. ``progress(done_bytes, total_bytes)`` is called
        as bytes go out (at most ten times a second, plus a first and a final
        call); ``total_bytes`` is None for a stream of unknown size.
        """
        files.check_remote_path(path)
        files.check_data(data)
        files.check_progress(progress)
        files.write(self._usable_box(), path, data, self._op_deadline(), files.Meter(progress))

    def read_file(self, path: str) -> bytes:
        """Read a whole remote file into memory. Request budget: 1 GET."""
        files.check_remote_path(path)
        return files.read(self._usable_box(), path, self._op_deadline())

    def upload(
        self,
        local_path: str | os.PathLike[str],
        remote_path: str,
        *,
        progress: files.Progress | None = None,
    ) -> None:
        """Stream a local file to ``remote_path``, retried like ``write_file``.

        Request budget: 1 PUT. ``progress`` as in ``write_file``.
        """
        files.check_remote_path(remote_path)
        files.check_progress(progress)
        files.upload(
            self._usable_box(), local_path, remote_path, self._op_deadline(), files.Meter(progress)
        )

    def download(
        self,
        remote_path: str,
        local_path: str | os.PathLike[str],
        *,
        progress: files.Progress | None = None,
    ) -> None:
        """Stream ``remote_path`` to a temporary file beside ``local_path``, then rename it
        into place; nothing is left behind on failure (Ctrl-C included).

        Request budget: 1 GET (a stream that breaks midway starts again).
        ``progress`` as in ``write_file``; ``total_bytes`` is the announced size.
        """
        files.check_remote_path(remote_path)
        files.check_progress(progress)
        files.download(
            self._usable_box(), remote_path, local_path, self._op_deadline(), files.Meter(progress)
        )

    def upload_dir(
        self,
        local_dir: str | os.PathLike[str],
        remote_dir: str,
        *,
        progress: files.Progress | None = None,
    ) -> None:
        """Copy the tree under ``local_dir`` into ``remote_dir`` (created if missing; files
        already there with the same names are replaced).

        The tree is packed into a local temporary tar (symlinks stored as
        symlinks, never followed; sockets, FIFOs and devices skipped), sent
        to a scratch file in the sandbox's /tmp, and extracted there by
        ``tar``, which then removes the scratch file. ``progress`` counts the
        archive's bytes.

        Request budget: 4 (1 PUT, then a 3-request run), plus 1 exec that
        removes the scratch file if anything fails.

        Raises:
            NotADirectoryError: ``local_dir`` is not a directory (before any request).
            CommandFailed: ``tar`` failed in the sandbox (``.result`` has its stderr).
        """
        files.check_remote_path(remote_dir)
        files.check_progress(progress)
        files.upload_dir(
            self._usable_box(),
            local_dir,
            remote_dir,
            self._op_deadline(),
            self._housekeeping_run,
            files.Meter(progress),
        )

    def download_dir(
        self,
        remote_dir: str,
        local_dir: str | os.PathLike[str],
        *,
        progress: files.Progress | None = None,
    ) -> None:
        """Copy the tree under ``remote_dir`` to the new directory ``local_dir``.

        ``local_dir`` must not exist, or be an empty directory: the tree is
        extracted beside it and renamed into place, so a failure leaves
        nothing behind. ``tar`` archives the tree into a scratch file in the
        sandbox's /tmp; it is downloaded, removed from the sandbox, and every
        entry is checked before anything is extracted (see
        ``UnsafeArchiveError``). Devices and FIFOs are refused, and so are
        symlinks that lead outside the tree (absolute ones included).
        ``progress`` counts the archive's bytes.

        Request budget: 5 (a 3-request run, 1 GET, 1 exec that removes the
        scratch file).

        Raises:
            FileExistsError: ``local_dir`` is not an empty directory (before any request).
            UnsafeArchiveError: the archive was refused; nothing was extracted.
            CommandFailed: ``tar`` failed in the sandbox (``.result`` has its stderr).
        """
        files.check_remote_path(remote_dir)
        files.check_progress(progress)
        files.download_dir(
            self._usable_box(),
            remote_dir,
            local_dir,
            self._op_deadline(),
            self._housekeeping_run,
            files.Meter(progress),
        )
