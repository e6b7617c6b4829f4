"""The documentation site builds without a warning; its API reference names every public name."""

from __future__ import annotations

import importlib
import os
import subprocess
import sys
import zlib
from pathlib import Path

import pytest

import kerneltune

ROOT = Path(__file__).resolve().parent.parent
#: the subpackages whose ``__all__`` the reference documents
SUBPACKAGES = sorted(path.name for path in (ROOT / "src" / "kerneltune").iterdir()
                     if (path / "__init__.py").is_file() and not path.name.startswith("_"))


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> tuple[subprocess.CompletedProcess, Path]:
    pytest.importorskip("mkdocs", reason="the docs extra is not installed (pip install .[docs])")
    folder = tmp_path_factory.mktemp("site")
    done = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--config-file",
         str(ROOT / "mkdocs.yml"), "--site-dir", str(folder)],
        cwd=ROOT, capture_output=True, text=True, timeout=600, check=False,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"})
    return done, folder


def documented(folder: Path) -> set[str]:
    """The objects of the reference, from the inventory mkdocstrings writes."""
    header, body = (folder / "objects.inv").read_bytes().split(b"compressed using zlib.\n", 1)
    return {line.split(" ", 1)[0] for line in zlib.decompress(body).decode().splitlines()}


def test_the_site_builds_strictly_without_a_warning(site):
    done, folder = site
    assert done.returncode == 0, done.stderr
    assert "WARNING" not in done.stderr and (folder / "index.html").is_file()
    assert (folder / "reference" / "machine" / "index.html").is_file()


def test_every_public_name_of_kerneltune_is_in_the_reference(site):
    _, folder = site
    objects = documented(folder)
    missing = [name for name in kerneltune.__all__
               if f"kerneltune.{name}" not in objects
               and not any(f"kerneltune.{sub}.{name}" in objects for sub in SUBPACKAGES)]
    assert not missing


@pytest.mark.parametrize("subpackage", SUBPACKAGES)
def test_every_name_a_subpackage_exports_is_in_the_reference(site, subpackage):
    _, folder = site
    objects = documented(folder)
    module = importlib.import_module(f"kerneltune.{subpackage}")
    exported = getattr(module, "__all__", ())
    assert exported, f"kerneltune.{subpackage} has no __all__"
    missing = [name for name in exported if f"kerneltune.{subpackage}.{name}" not in objects]
    assert not missing
