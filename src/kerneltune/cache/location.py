"""Where the user calibration cache is: ``KERNELTUNE_CACHE``, else the user cache directory.

Its own module so that start-up can tell that there is no cache file without loading the
cache's machinery.
"""

from __future__ import annotations

import os
from pathlib import Path

from .._support.files import DISABLED as DISABLED  # the value of KERNELTUNE_CACHE that is off
from .._support.files import user_file_path

ENVIRONMENT_VARIABLE = "KERNELTUNE_CACHE"
FILE_NAME = "kernel_tuning.yaml"

def default_kernel_tuning_cache_path() -> Path | None:
    """The cache file of this user, or None when ``KERNELTUNE_CACHE=off`` disables persistence.

    ``KERNELTUNE_CACHE`` names another file; otherwise platformdirs chooses the
    user cache directory, so each operating system's convention (XDG on Linux,
    Library/Caches on macOS, LOCALAPPDATA on Windows) is followed.
    """
    return user_file_path(ENVIRONMENT_VARIABLE, FILE_NAME)


def cache_path(path: str | os.PathLike[str] | None) -> Path | None:
    """The file an operation acts on: ``path``, else the default (None when disabled).

    An explicit path always wins; ``KERNELTUNE_CACHE=off`` only disables the
    default one.
    """
    return Path(path) if path is not None else default_kernel_tuning_cache_path()
