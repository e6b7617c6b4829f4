"""docs/design.md's table of the layers says what pyproject.toml's contracts and the files say."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

import kerneltune

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - the 3.10 backport of the same module
    import tomli as tomllib

ROOT = Path(__file__).resolve().parent.parent
DESIGN = ROOT / "docs" / "design.md"
PACKAGE = ROOT / "src" / "kerneltune"
#: a package's files that are no module of its own (generated at build time)
GENERATED = {"_variants"}


def contract(identifier: str) -> dict:
    configuration = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    (found,) = [c for c in configuration["tool"]["importlinter"]["contracts"]
                if c["id"] == identifier]
    return found


def table() -> list[tuple[int, str, list[str]]]:
    """The rows between the layer table's markers: layer number, package, modules."""
    text = DESIGN.read_text(encoding="utf-8")
    body = text.split("<!-- layers:", 1)[1].split("<!-- /layers -->", 1)[0]
    rows = []
    for line in body.splitlines():
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        if len(cells) == 4 and cells[0].isdigit():
            modules = re.findall(r"`([^`]+)`", cells[2])
            rows.append((int(cells[0]), cells[1].strip("`"), modules))
    return rows


def test_the_rows_are_the_layers_contract_top_first():
    layers: dict[int, set[str]] = {}
    for number, package, _ in table():
        layers.setdefault(number, set()).add(package)
    written = [layers[number] for number in sorted(layers)]
    declared = [set(re.split(r"\s*[|:]\s*", layer)) for layer in contract("layers")["layers"]]
    assert written == declared


def test_the_contract_leaves_no_module_out():
    layer_contract = contract("layers")
    assert layer_contract["containers"] == ["kerneltune"] and layer_contract["exhaustive"]


def test_each_row_lists_its_package_s_modules():
    for _, package, modules in table():
        folder = PACKAGE / package
        if not folder.is_dir():
            assert (PACKAGE / f"{package}.py").is_file() and not modules, package
            continue
        found = sorted(path.stem for path in folder.glob("*.py") if path.stem != "__init__")
        found += sorted(path.name for path in folder.iterdir() if path.is_dir()
                        and (path / "__init__.py").is_file() and path.name not in GENERATED)
        assert modules == found, package


def test_every_package_and_top_level_module_has_a_row():
    listed = {package for _, package, _ in table()}
    present = {path.stem for path in PACKAGE.glob("*.py") if path.stem != "__init__"}
    present |= {path.name for path in PACKAGE.iterdir() if (path / "__init__.py").is_file()}
    assert listed == present


@pytest.mark.parametrize("package", sorted(
    path.name for path in PACKAGE.iterdir() if (path / "__init__.py").is_file()))
def test_each_subpackage_says_what_it_owns_and_may_import(package):
    module = __import__(f"kerneltune.{package}", fromlist=["__doc__"])
    assert module.__doc__ and len(module.__doc__.split()) > 20
    if package != "cli":
        assert "import" in module.__doc__, package


def test_the_public_names_are_each_subpackage_s_own():
    """Every name ``kerneltune`` re-exports is the object its subpackage exports."""
    for name in kerneltune.__all__:
        value = getattr(kerneltune, name)
        home = getattr(value, "__module__", None)
        if home is None or not home.startswith("kerneltune."):
            continue
        subpackage = __import__(".".join(home.split(".")[:2]), fromlist=["__all__"])
        if subpackage.__name__ in ("kerneltune.errors", "kerneltune.startup"):
            continue
        assert name in getattr(subpackage, "__all__", ()), (name, subpackage.__name__)
