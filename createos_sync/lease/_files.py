"""The lease's file transfers; the engine is ``createos_sync._files``."""

from __future__ import annotations

import os
from collections.abc import Sequence

from .. import _files as files
from ._commands import CommandMethods


class FileMethods(CommandMethods):
    """Files and directory trees, to and from the sandbox (archives use ``run``)."""

    def write_file(
        self, path: str, data: files.FileData, *, progress: files.Progress | bool | None = None
    ) -> None:
        """Write ``data`` to the remote file ``path`` (replacing it), streamed.

        Request budget: 1 PUT. Bytes, str and seekable files are retried after
        a 5xx or a lost answer (rewinding the file); a stream that cannot be
        rewound is sent once.

        Args:
            path: an absolute path in the sandbox.
            data: ``bytes``, ``str`` (sent as UTF-8), or a binary file object
                (read in chunks, never whole into memory).
            progress: ``True`` for a ready-made display on stderr (a tqdm
                bar on a terminal or in a Jupyter notebook, a plain line per
                quarter elsewhere); a callable ``progress(done_bytes,
                total_bytes)``, called as bytes move (at most ten times a
                second, plus a first and a final call; ``total_bytes`` is None
                when the size is not known in advance; a retried transfer
                starts again from 0); or None / False for nothing.

        Raises:
            ValueError, TypeError: invalid arguments, before any request.
            CreateosApiError: the service refused or the transfer failed.
        """
        files.check_remote_path(path)
        files.check_data(data)
        files.check_progress(progress)
        with files.metered(progress, f"write {path}") as meter:
            files.write(self._usable_box(), path, data, self._op_deadline(), meter)

    def read_file(self, path: str) -> bytes:
        """Read the whole remote file ``path`` (absolute) into memory. Request budget: 1 GET.

        Use ``download`` for big files: it streams to disk in constant memory.

        Raises:
            RemoteFileNotFoundError: no such file (also a ``FileNotFoundError``).
        """
        files.check_remote_path(path)
        return files.read(self._usable_box(), path, self._op_deadline())

    def upload(
        self,
        local_path: str | os.PathLike[str],
        remote_path: str,
        *,
        progress: files.Progress | bool | None = None,
    ) -> None:
        """Stream the local file ``local_path`` to the absolute ``remote_path``, retried like
        ``write_file``. Request budget: 1 PUT.

        Args:
            local_path: the file to send (a directory needs ``upload_dir``).
            remote_path: an absolute path in the sandbox.
            progress: as in ``write_file``.
        """
        files.check_remote_path(remote_path)
        files.check_progress(progress)
        label = f"upload {os.path.basename(os.fspath(local_path))}"
        with files.metered(progress, label) as meter:
            files.upload(self._usable_box(), local_path, remote_path, self._op_deadline(), meter)

    def download(
        self,
        remote_path: str,
        local_path: str | os.PathLike[str],
        *,
        progress: files.Progress | bool | None = None,
    ) -> None:
        """Stream the remote file ``remote_path`` to a temporary file beside ``local_path``,
        then rename it into place; nothing is left behind on failure (Ctrl-C included).

        Request budget: 1 GET (a stream that breaks midway starts again).

        Args:
            remote_path: an absolute path of a file in the sandbox (a
                directory needs ``download_dir``).
            local_path: where the file goes (replaced if it exists).
            progress: as in ``write_file``; ``total_bytes`` is the announced size.

        Raises:
            RemoteFileNotFoundError: no such remote file (also a ``FileNotFoundError``).
        """
        files.check_remote_path(remote_path)
        files.check_progress(progress)
        with files.metered(progress, f"download {remote_path}") as meter:
            files.download(self._usable_box(), remote_path, local_path, self._op_deadline(), meter)

    def upload_dir(
        self,
        local_dir: str | os.PathLike[str],
        remote_dir: str,
        *,
        progress: files.Progress | bool | None = None,
    ) -> None:
        """Copy the tree under ``local_dir`` into ``remote_dir`` (created if missing; files
        already there with the same names are replaced).

        The tree is packed into a local temporary tar (symlinks stored as
        symlinks, never followed; sockets, FIFOs and devices skipped), sent
        to a scratch file in the sandbox's /tmp, and extracted there by
        ``tar``, which then removes the scratch file.

        Request budget: 4 (1 PUT, then a 3-request run), plus 1 exec that
        removes the scratch file if anything fails.

        Args:
            local_dir: the local directory to copy.
            remote_dir: an absolute path in the sandbox.
            progress: as in ``write_file``, counting the archive's bytes.

        Raises:
            NotADirectoryError: ``local_dir`` is not a directory (before any request).
            CommandFailed: ``tar`` failed in the sandbox (``.result`` has its stderr).
        """
        files.check_remote_path(remote_dir)
        files.check_progress(progress)
        label = f"upload {os.path.basename(os.path.abspath(local_dir))}/"
        with files.metered(progress, label) as meter:
            files.upload_dir(
                self._usable_box(),
                local_dir,
                remote_dir,
                self._op_deadline(),
                self._housekeeping_run,
                meter,
            )

    def download_dir(
        self,
        remote_dir: str,
        local_dir: str | os.PathLike[str],
        *,
        progress: files.Progress | bool | None = None,
    ) -> None:
        """Copy the tree under ``remote_dir`` to the new directory ``local_dir``.

        ``local_dir`` must not exist, or be an empty directory: the tree is
        extracted beside it and renamed into place, so a failure leaves
        nothing behind. ``tar`` archives the tree into a scratch file in the
        sandbox's /tmp; it is downloaded, removed from the sandbox, and every
        entry is checked before anything is extracted (see
        ``UnsafeArchiveError``). Devices and FIFOs are refused, and so are
        symlinks that lead outside the tree (absolute ones included).

        Request budget: 5 (a 3-request run, 1 GET, 1 exec that removes the
        scratch file).

        Args:
            remote_dir: an absolute path of a directory in the sandbox.
            local_dir: a new (or empty) local directory to create.
            progress: as in ``write_file``, counting the archive's bytes.

        Raises:
            FileExistsError: ``local_dir`` is not an empty directory (before any request).
            UnsafeArchiveError: the archive was refused; nothing was extracted.
            RemoteFileNotFoundError: ``remote_dir`` does not exist (also a
                ``FileNotFoundError``).
            CommandFailed: ``tar`` failed in the sandbox (``.result`` has its stderr).
        """
        files.check_remote_path(remote_dir)
        files.check_progress(progress)
        with files.metered(progress, f"download {remote_dir.rstrip('/') or '/'}/") as meter:
            files.download_dir(
                self._usable_box(),
                remote_dir,
                local_dir,
                self._op_deadline(),
                self._housekeeping_run,
                meter,
            )

    def _remote_directories(self, paths: Sequence[str]) -> frozenset[str]:
        """Which of the remote ``paths`` are directories (1 exec request); for the CLI."""
        for path in paths:
            files.check_remote_path(path)
        if not paths:
            return frozenset()
        return files.directories(self._usable_box(), paths, self._op_deadline())
