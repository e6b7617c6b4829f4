"""Print the C include directory of a Python package, for meson's include_directories().

meson.build asks it for numpy's and pythran's headers in the interpreter it builds for:

    python tools/get_include.py MODULE SOURCE_DIR

Meson refuses an absolute path inside the source tree (a virtualenv there, such as .nox/,
with --no-build-isolation), so such a path is printed relative to SOURCE_DIR.
"""

from __future__ import annotations

import importlib
import os
import sys


def include_dir(module: str, source_dir: str) -> str:
    """MODULE.get_include(), relative to SOURCE_DIR when inside it, else absolute."""
    include = os.path.realpath(importlib.import_module(module).get_include())
    try:
        relative = os.path.relpath(include, os.path.realpath(source_dir))
    except ValueError:  # another drive (Windows)
        relative = os.pardir
    return include if relative.startswith(os.pardir) else relative


def main(argv: list[str]) -> None:
    module, source_dir = argv
    print(include_dir(module, source_dir))


if __name__ == "__main__":
    # Nothing in the source tree (this folder, or the working directory) may shadow MODULE.
    here = os.path.dirname(os.path.realpath(__file__))
    if sys.path and os.path.realpath(sys.path[0] or os.curdir) in (here, os.getcwd()):
        del sys.path[0]
    main(sys.argv[1:])
