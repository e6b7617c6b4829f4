"""Sessions of the build farm, CI and developers (see docs/design.md).

`nox` runs lint and tests; `nox -s tests -- tests/test_build.py -x` forwards pytest arguments.
`nox -s build` writes the sdist and the wheel to dist/. Both compile every ISA variant of
this host by default; `--variants=baseline` (any comma-separated list that includes baseline)
compiles fewer for a fast local run: `nox -s tests -- --variants=baseline -k probe`.
"""

from __future__ import annotations

import os
from pathlib import Path

import nox

ROOT = Path(__file__).resolve().parent

nox.needs_version = ">=2024.3.2"
nox.options.sessions = ["lint", "tests"]
# A reused environment keeps its dependencies; the project itself is rebuilt and reinstalled
# by every `tests` run (pip always rebuilds a local directory), so nothing stale is tested.
nox.options.reuse_venv = "yes"
nox.options.error_on_missing_interpreters = True


VARIANTS_OPTION = "--variants"
#: a kernel library (path or requirement) the calibrate and bake sessions install too
WITH_OPTION = "--with"
#: Tells tests/test_variants.py which variants a restricted build compiled (default: all).
EXPECTED_VARIANTS_VARIABLE = "KERNELTUNE_TEST_EXPECTED_VARIANTS"


def _taken(option: str, arguments: list[str]) -> tuple[list[str], list[str]]:
    """Every value of ``option`` (``--option=VALUE`` or ``--option VALUE``, repeatable) taken
    out of ``arguments``, and the arguments left."""
    values, rest = [], []
    remaining = iter(arguments)
    for argument in remaining:
        if argument == option:
            values.append(next(remaining, ""))
        elif argument.startswith(option + "="):
            values.append(argument.partition("=")[2])
        else:
            rest.append(argument)
    return values, rest


def _variant_selection(session: nox.Session) -> tuple[str | None, list[str]]:
    """Take `--variants=LIST` (or `--variants LIST`) out of the session arguments.

    Returns the comma-separated list (None when absent) and the remaining arguments, which
    belong to pytest or to `python -m build`.
    """
    given, rest = _taken(VARIANTS_OPTION, list(session.posargs))
    variants = given[-1] if given else None
    if variants is not None and not variants.strip():
        session.error(f"{VARIANTS_OPTION} needs a comma-separated list, e.g. baseline")
    return variants, rest


def _install_libraries(session: nox.Session, arguments: list[str]) -> list[str]:
    """Install the kernel libraries `--with` names (a path or a requirement, repeatable) into
    the session beside kerneltune, so the farm calibrates and bakes them too
    (docs/libraries.md); the arguments left go to the command."""
    libraries, rest = _taken(WITH_OPTION, arguments)
    if any(not library.strip() for library in libraries):
        session.error(f"{WITH_OPTION} needs a path or a requirement, e.g. "
                      f"examples/kernel_library")
    if libraries:
        session.install(*libraries)
    return rest


def _config_settings(variants: str | None) -> list[str]:
    """meson-python config settings (pip and `build` both take `-C`) for a variant list."""
    return [] if variants is None else [f"-Csetup-args=-Disa_variants={variants}"]


@nox.session
def tests(session: nox.Session) -> None:
    """Build and install the package, then run pytest.

    The build compiles every ISA variant of this host (baseline, x86_64_v3 and x86_64_v4 on
    x86_64). `--variants=LIST` compiles only those (meson option isa_variants; baseline is
    required) for a faster local run; every other argument goes to pytest:

        nox -s tests -- --variants=baseline -k probe
        nox -s tests -- tests/test_variants.py -x
    """
    variants, pytest_args = _variant_selection(session)
    # A normal, non-editable install: meson-python compiles the pythran kernels into the wheel.
    session.install(*_config_settings(variants), f"{ROOT}[test,plot,docs]")
    # The src layout keeps the package sources off sys.path, so the tests import the installed
    # package; plain `pytest` (unlike `python -m pytest`) does not add the working directory.
    # With no arguments pytest collects `testpaths` (tests/) of pyproject.toml.
    env = {} if variants is None else {EXPECTED_VARIANTS_VARIABLE: variants}
    session.run("pytest", "-n", "auto", f"--rootdir={ROOT}", *pytest_args, env=env)


@nox.session
def build(session: nox.Session) -> None:
    """Build the sdist and the wheel into dist/ (every ISA variant of this host).

    Both are built from the working tree. meson-python's sdist is `meson dist`, which
    archives the last git commit only (uncommitted changes are left out), so the wheel is not
    built from the sdist as plain `python -m build` would: it would silently miss work in
    progress. `--variants=LIST` as in `tests`; other arguments go to `python -m build`:

        nox -s build
        nox -s build -- --variants=baseline
    """
    variants, build_args = _variant_selection(session)
    session.install("build")
    outputs = ["--sdist", "--wheel", f"--outdir={ROOT / 'dist'}"]
    config = _config_settings(variants)
    session.run("python", "-m", "build", *outputs, *config, *build_args, str(ROOT))


@nox.session
def lint(session: nox.Session) -> None:
    """Ruff (arguments go to ruff), the layer contracts, the workflows, the generated tables.

    lint-imports checks the import contracts of pyproject.toml (docs/design.md, The layers)
    on the source tree, which it reads without building it; actionlint checks the workflows;
    ``benchmarks/report.py --check`` fails when docs/benchmarks.md or README's headline is
    not what benchmarks/results/ generates.
    """
    extras = nox.project.load_toml(ROOT / "pyproject.toml")["project"]["optional-dependencies"]
    session.install(*extras["lint"])
    session.run("ruff", "check", str(ROOT), *session.posargs)
    session.chdir(ROOT)
    session.run("lint-imports", "--no-cache", env={"PYTHONPATH": str(ROOT / "src")})
    # At the project root actionlint finds .github/workflows itself; shellcheck, when on PATH,
    # also checks the `run:` scripts.
    session.run("actionlint", external=False)
    session.run("python", str(ROOT / "benchmarks" / "report.py"), "--check")


@nox.session
def docs(session: nox.Session) -> None:
    """Build the documentation site into site/: README, docs/ and the API reference.

    mkdocstrings reads the docstrings from src/ without building the package; the build is
    strict, so a broken link or a docstring it cannot render fails it. Arguments go to
    ``mkdocs build`` (``nox -s docs -- --site-dir /tmp/site``).
    """
    extras = nox.project.load_toml(ROOT / "pyproject.toml")["project"]["optional-dependencies"]
    session.install(*extras["docs"])
    session.chdir(ROOT)
    session.run("mkdocs", "build", "--strict", *session.posargs,
                env={"NO_MKDOCS_2_WARNING": "1"})


@nox.session
def calibrate(session: nox.Session) -> None:
    """Calibrate this machine for each thread count and write its deployment profile.

    Builds and installs the package as `tests` does, then runs `kerneltune calibrate
    --profile` for the thread matrix (1, 2, 4, ... and the CPUs this process may use):
    profiles/<this machine>.yaml, bound to `--selector` (a selector file or a shipped
    name; by default this processor's vendor/family/model), with the reports as JSON
    beside it. A run stopped part-way resumes from its checkpoint (`--restart` discards
    it); keys withheld or stopped by a budget (exit status 3) keep the values in use, the
    profile of the others is written, and the next run measures those keys. OpenBLAS's
    threads sleep right after each call (OPENBLAS_THREAD_TIMEOUT=4 unless the environment
    sets it). `--with PATH` installs another kernel library beside kerneltune (repeatable).
    Other arguments go to `kerneltune calibrate`:

        nox -s calibrate -- --selector selectors/zen4.yaml
        nox -s calibrate -- --effort quick --kernel Add --output profiles/test.yaml
        nox -s calibrate -- --with examples/kernel_library --library example
    """
    variants, arguments = _variant_selection(session)
    session.install(*_config_settings(variants), str(ROOT))
    arguments = _install_libraries(session, arguments)
    # OpenBLAS's threads must not spin into the compiled kernels measured after a BLAS call
    # (docs/kernels.md); the value, read when numpy loads, is the one deployments should use
    timeout = os.environ.get("OPENBLAS_THREAD_TIMEOUT", "4")
    # 3, done in part: keys withheld or stopped by a budget keep the values in use, named in
    # the output, and the profile of the others ships
    session.run("kerneltune", "calibrate", "--profile", *arguments,
                env={"OPENBLAS_THREAD_TIMEOUT": timeout}, success_codes=[0, 3])


@nox.session
def bake(session: nox.Session) -> None:
    """Merge profiles into one checked, read-only deployment file, with its coverage.

    The entries are checked against the kernel libraries' schemas, which every ISA variant
    shares, so only the baseline variant is compiled; `--with PATH` installs another kernel
    library whose entries the files hold (repeatable). Other arguments go to `kerneltune
    profiles bake`:

        nox -s bake -- profiles/*.yaml --output build/deployment.yaml --require-complete
        nox -s bake -- --with examples/kernel_library profiles/*.yaml --output d.yaml
    """
    session.install(*_config_settings("baseline"), str(ROOT))
    arguments = _install_libraries(session, list(session.posargs))
    session.run("kerneltune", "profiles", "bake", *arguments)
