"""Sessions of the build farm, CI and developers (see DESIGN.md, section 1).

`nox` runs lint and tests; `nox -s tests -- tests/test_build.py -x` forwards pytest arguments.
"""

from __future__ import annotations

from pathlib import Path

import nox

ROOT = Path(__file__).resolve().parent

nox.needs_version = ">=2024.3.2"
nox.options.sessions = ["lint", "tests"]
# A reused environment keeps its dependencies; the project itself is rebuilt and reinstalled
# by every `tests` run (pip always rebuilds a local directory), so nothing stale is tested.
nox.options.reuse_venv = "yes"
nox.options.error_on_missing_interpreters = True


@nox.session
def tests(session: nox.Session) -> None:
    """Build and install the package (all compiled ISA variants), then run pytest."""
    # A normal, non-editable install: meson-python compiles the pythran kernels into the wheel.
    session.install(f"{ROOT}[test]")
    # The src layout keeps the package sources off sys.path, so the tests import the installed
    # package; plain `pytest` (unlike `python -m pytest`) does not add the working directory.
    # With no arguments pytest collects `testpaths` (tests/) of pyproject.toml.
    session.run("pytest", "-n", "auto", f"--rootdir={ROOT}", *session.posargs)


@nox.session
def lint(session: nox.Session) -> None:
    """Ruff over the whole repository."""
    extras = nox.project.load_toml(ROOT / "pyproject.toml")["project"]["optional-dependencies"]
    session.install(*extras["lint"])
    session.run("ruff", "check", str(ROOT), *session.posargs)


@nox.session
def calibrate(session: nox.Session) -> None:
    """Calibrate the kernels on this machine (not built yet)."""
    session.skip("calibration is not built yet: the calibrate session arrives with the pipeline")
