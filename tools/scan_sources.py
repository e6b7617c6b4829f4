"""List the kernel modules and the files to keep out of the install, for meson.build.

Meson has no glob, so meson.build asks this script at configure time:

    python tools/scan_sources.py PACKAGE_DIR KERNELS_DIR

and reads one line per finding: `kernel:X` for every KERNELS_DIR/X_pythran.py (an extension
module X), `excluded-dir:PATH` for byte-code caches and `excluded-file:PATH` for compiled
leftovers, PATH relative to PACKAGE_DIR with `/` separators (install_subdir's excludes).
"""

from __future__ import annotations

import os
import sys

KERNEL_SUFFIX = "_pythran.py"
EXCLUDED_DIRS = ("__pycache__",)
EXCLUDED_SUFFIXES = (".pyc", ".pyo", ".so", ".pyd", ".dll", ".dylib", ".o")


def kernel_lines(kernels_dir: str) -> list[str]:
    """`kernel:X` for each KERNELS_DIR/X_pythran.py file, sorted by name."""
    return [
        "kernel:" + name[: -len(KERNEL_SUFFIX)]
        for name in sorted(os.listdir(kernels_dir))
        if name.endswith(KERNEL_SUFFIX) and os.path.isfile(os.path.join(kernels_dir, name))
    ]


def excluded_lines(package_dir: str) -> list[str]:
    """`excluded-dir:` and `excluded-file:` lines for PACKAGE_DIR, walked in sorted order."""
    lines = []
    for root, dirs, files in os.walk(package_dir):
        relative = os.path.relpath(root, package_dir).replace(os.sep, "/")
        prefix = "" if relative == "." else relative + "/"
        lines += ["excluded-dir:" + prefix + name for name in sorted(dirs) if name in EXCLUDED_DIRS]
        dirs[:] = sorted(name for name in dirs if name not in EXCLUDED_DIRS)
        lines += [
            "excluded-file:" + prefix + name
            for name in sorted(files)
            if name.endswith(EXCLUDED_SUFFIXES)
        ]
    return lines


def main(argv: list[str]) -> None:
    package_dir, kernels_dir = argv
    for line in kernel_lines(kernels_dir) + excluded_lines(package_dir):
        print(line)


if __name__ == "__main__":
    main(sys.argv[1:])
