"""kerneltune's version, read from the one file that holds it.

``VERSION`` beside this module is also what meson.build gives the project (and
so the wheel's metadata), so the package, its files and its reports can never
disagree about which kerneltune wrote them.
"""

from __future__ import annotations

from pathlib import Path

__version__ = Path(__file__).parent.parent.joinpath("VERSION").read_text(encoding="ascii").strip()
