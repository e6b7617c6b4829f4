"""Files written whole or not at all, and the lock that serialises their writers.

A temporary sibling (so ``os.replace`` stays within one filesystem) is written,
flushed and fsynced, then renamed over the target and the directory fsynced;
a crash leaves the previous file or the new one, never half of either. Writers
of one file take an inter-process lock on its ``.lock`` sibling, re-read the
file under it and only then write, so no update is lost to a concurrent one.
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path
from typing import TYPE_CHECKING

import platformdirs

if TYPE_CHECKING:
    import filelock

#: the value of a file's environment variable that turns that file off
DISABLED = "off"
#: seconds a writer waits for another writer's lock of the same file before giving up
LOCK_TIMEOUT = 10.0


def user_file_path(variable: str, file_name: str) -> Path | None:
    """A per-user file: the one ``variable`` names, None when it says ``off``, else ``file_name``.

    ``file_name`` lives in platformdirs' user cache directory for kerneltune,
    so each operating system's convention (XDG on Linux, Library/Caches on
    macOS, LOCALAPPDATA on Windows) is followed, and kerneltune's files sit
    side by side.
    """
    override = os.environ.get(variable, "").strip()
    if override.lower() == DISABLED:
        return None
    if override:
        return Path(override)
    return Path(platformdirs.user_cache_dir("kerneltune", appauthor=False)) / file_name


def temporary_sibling(target: Path) -> Path:
    """A unique ``<name>.<random>.tmp`` next to ``target``, the pattern cleaners look for."""
    return target.with_name(f"{target.name}.{os.urandom(8).hex()}.tmp")


def write_atomically(target: Path, text: str | bytes, mode: int | None = None) -> None:
    """Replace ``target`` by ``text`` (UTF-8 if a string) atomically and durably; raise
    ``OSError`` if impossible.

    The temporary is opened with mode 0o666 so the process umask applies as to
    any new file (a ``mkstemp`` file would stay 0600); ``mode`` (0o444 for a
    read-only file) is set before the rename, so the file never appears under
    its name with another. Whatever fails, the temporary is removed and the
    previous file is intact.
    """
    temporary: Path | None = temporary_sibling(target)
    try:
        fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_BINARY", 0),
                     0o666)
        with os.fdopen(fd, "wb") as stream:
            stream.write(text.encode("utf-8") if isinstance(text, str) else text)
            stream.flush()
            if mode is not None:
                os.chmod(temporary, mode)
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


def file_lock(target: Path, timeout: float) -> filelock.FileLock:
    """The inter-process lock of ``target``: its ``.lock`` sibling, never deleted.

    Deleting a lock file that another process waits on would let two writers in.
    filelock is imported here: only writers lock, and a first session writes nothing.
    """
    import filelock

    return filelock.FileLock(str(target) + ".lock", timeout=timeout)


def remove_stray_temporaries(target: Path) -> int:
    """Remove the temporaries of writers that died; call it only under :func:`file_lock`.

    Under the lock no writer is live, so every temporary sibling is a leftover.
    """
    prefix = target.name + "."
    try:
        names = os.listdir(target.parent)
    except OSError:
        return 0
    removed = 0
    for name in names:
        if name.startswith(prefix) and name.endswith(".tmp"):
            with contextlib.suppress(OSError):
                (target.parent / name).unlink()
                removed += 1
    return removed
