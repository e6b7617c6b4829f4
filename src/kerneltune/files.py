"""Files written whole or not at all: what the cache and the command line write.

A temporary sibling (so ``os.replace`` stays within one filesystem) is written,
flushed and fsynced, then renamed over the target and the directory fsynced;
a crash leaves the previous file or the new one, never half of either.
"""

from __future__ import annotations

import contextlib
import os
import secrets
from pathlib import Path


def temporary_sibling(target: Path) -> Path:
    """A unique ``<name>.<random>.tmp`` next to ``target``, the pattern cleaners look for."""
    return target.with_name(f"{target.name}.{secrets.token_hex(8)}.tmp")


def write_atomically(target: Path, text: str) -> None:
    """Replace ``target`` by ``text`` atomically and durably; raise ``OSError`` if impossible.

    The temporary is opened with mode 0o666 so the process umask applies as to
    any new file (a ``mkstemp`` file would stay 0600). Whatever fails, the
    temporary is removed and the previous file is intact.
    """
    temporary: Path | None = temporary_sibling(target)
    try:
        fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_BINARY", 0),
                     0o666)
        with os.fdopen(fd, "wb") as stream:
            stream.write(text.encode("utf-8"))
            stream.flush()
            os.fsync(stream.fileno())
        os.replace(temporary, target)
        temporary = None
        sync_directory(target.parent)
    finally:
        if temporary is not None:
            with contextlib.suppress(OSError):
                temporary.unlink()


def sync_directory(directory: Path) -> None:
    """Make a rename durable; directories cannot be opened for syncing on Windows."""
    if not hasattr(os, "O_DIRECTORY"):
        return
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
