"""Files: bytes, text, local files and whole directories, to a sandbox and back, verified.

Transfers are streamed in constant memory; a download lands in a temporary
file that is renamed into place only when complete. Runs against CreateOS
when CREATEOS_API_KEY is set, else against the local emulator
(``pip install 'createos-sync[emulator]'``).
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import tempfile
from pathlib import Path

import createos_sync as cs


def sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def show_progress(done: int, total: int | None) -> None:
    if total:
        print(f"  {done * 100 // total:3d}% of {total} bytes")


def main(client: cs.Client, workdir: Path) -> None:
    with cs.lease(client=client) as box:
        # small data straight from memory
        box.write_file("/workspace/hello.txt", "héllo\n")
        assert box.read_file("/workspace/hello.txt") == "héllo\n".encode()

        # a local file up, changed in the sandbox, and down again
        original = workdir / "data.bin"
        original.write_bytes(os.urandom(3 * 1024 * 1024))
        print("uploading data.bin")
        box.upload(original, "/workspace/data.bin", progress=show_progress)
        box.run("cp data.bin copy.bin && sha256sum data.bin copy.bin", echo=True, check=True)
        returned = workdir / "copy.bin"
        box.download("/workspace/copy.bin", returned)
        assert sha256(returned) == sha256(original)

        # a directory tree, up and back
        tree = workdir / "tree"
        (tree / "docs").mkdir(parents=True)
        (tree / "docs" / "readme.md").write_text("# tree\n")
        (tree / "numbers.csv").write_text("n\n1\n2\n")
        box.upload_dir(tree, "/workspace/tree")
        box.run("echo 3 >> tree/numbers.csv", check=True)
        back = workdir / "tree-back"
        box.download_dir("/workspace/tree", back)
        assert (back / "docs" / "readme.md").read_text() == "# tree\n"
        assert (back / "numbers.csv").read_text() == "n\n1\n2\n3\n"
    print("every file came back intact")


if __name__ == "__main__":
    with tempfile.TemporaryDirectory() as scratch, contextlib.ExitStack() as stack:
        if os.environ.get("CREATEOS_API_KEY"):
            client = stack.enter_context(cs.Client())
        else:
            from createos_sync.emulator import Emulator

            emulator = stack.enter_context(Emulator())
            client = stack.enter_context(contextlib.closing(emulator.client()))
        main(client, Path(scratch))
