"""Hostile and broken files where kerneltune reads: a problem naming the path, never a hang.

Each case runs in a fresh process under a memory limit and a time limit (a hang fails the
test instead of stalling the suite; no limit is a measurement), beside a good profile that
must still import.
"""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import run_kerneltune
from kerneltune.machine import get_cpu_descriptor, processor_selector
from kerneltune.profiles import DeploymentProfile, ProfileEntry, write_deployment_profile
from kerneltune.profiles.deployment import read_profiles
from kerneltune.tuning import default_registry

#: address space a child may use: far beyond kerneltune's needs, far below a read of
#: /dev/zero to the end of memory
MEMORY_LIMIT = 2 << 30
#: seconds before a child counts as hung (a start-up takes about one)
HANG = 300
REPORT = """
import json, kerneltune
report = kerneltune.startup_report().profiles
print(json.dumps([[f.path, f.status, f.imported, " ".join(f.problems)] for f in report.files]))
"""


def _limited() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (MEMORY_LIMIT, MEMORY_LIMIT))


def start(*paths: Path | str, **variables: str) -> list[list]:
    """What ``import kerneltune`` made of ``KERNELTUNE_DEPLOYMENT_PROFILES=paths``."""
    environment = {name: value for name, value in os.environ.items()
                   if not name.startswith("KERNELTUNE_")}
    environment.update(KERNELTUNE_CACHE="off",
                       KERNELTUNE_DEPLOYMENT_PROFILES=os.pathsep.join(map(str, paths)),
                       **variables)
    done = subprocess.run([sys.executable, "-c", REPORT], env=environment, text=True,
                          capture_output=True, timeout=HANG, preexec_fn=_limited, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout)


def good_profile(path: Path, name: str = "good") -> Path:
    """A profile of one entry for this host: Abs FLOAT of the variant it runs."""
    keys = default_registry.snapshot().keys()
    key = next(key for key in keys if key.kernel == "Abs" and key.element_type_name == "FLOAT")
    selector = processor_selector(get_cpu_descriptor()).selector
    write_deployment_profile(DeploymentProfile(
        name, selector, (ProfileEntry(key, (1, 64), {"parallel.minimum_elements": 8192}),)),
        path)
    return path


@pytest.fixture
def good(tmp_path) -> Path:
    return good_profile(tmp_path / "good.yaml")


def _the_good_one_imported(files: list[list], good: Path) -> None:
    assert [str(good), "imported", 1, ""] in files


def test_a_fifo_is_named_and_never_opened(tmp_path, good):
    fifo = tmp_path / "fifo.yaml"
    os.mkfifo(fifo)
    files = start(fifo, good)
    _the_good_one_imported(files, good)
    assert files[0][:2] == [str(fifo), "unreadable"] and "a FIFO" in files[0][3]


def test_a_fifo_in_a_folder_is_named_and_the_folder_s_good_file_imports(tmp_path):
    folder = tmp_path / "deployment"
    folder.mkdir()
    os.mkfifo(folder / "a-fifo.yaml")
    good = good_profile(folder / "good.yaml")
    files = start(folder)
    _the_good_one_imported(files, good)
    assert files[0][1] == "unreadable" and "a FIFO" in files[0][3]


@pytest.mark.parametrize("device", ["/dev/zero", "/dev/urandom"])
def test_a_device_is_named_and_never_read(good, device):
    files = start(device, good)
    _the_good_one_imported(files, good)
    assert files[0][:2] == [device, "unreadable"] and "a character device" in files[0][3]


def test_a_file_over_the_limit_is_refused_before_it_is_read(tmp_path, good):
    huge = tmp_path / "huge.yaml"
    with huge.open("wb") as stream:  # sparse: 500 MB that take no room
        stream.truncate(500 << 20)
    files = start(huge, good)
    _the_good_one_imported(files, good)
    assert files[0][:2] == [str(huge), "too_large"]
    assert "524,288,000 bytes, more than the 67,108,864" in files[0][3]
    assert "KERNELTUNE_MAX_FILE_BYTES" in files[0][3]


def test_the_limit_is_adjustable(tmp_path, good):
    files = start(good, KERNELTUNE_MAX_FILE_BYTES="100")
    assert files[0][1] == "too_large" and "more than the 100 a" in files[0][3]
    assert start(good, KERNELTUNE_MAX_FILE_BYTES="1M")[0][1] == "imported"


def test_a_symlink_loop_is_named(tmp_path, good):
    loop = tmp_path / "loop.yaml"
    loop.symlink_to(loop)
    files = start(loop, good)
    _the_good_one_imported(files, good)
    assert files[0][:2] == [str(loop), "unreadable"]
    assert "Too many levels of symbolic links" in files[0][3]


def test_a_folder_of_ten_thousand_profiles_for_other_processors_is_left_unread(tmp_path):
    folder = tmp_path / "fleet"
    folder.mkdir()
    good = good_profile(folder / "good.yaml")
    text = good.read_text(encoding="utf-8")
    host = get_cpu_descriptor()
    for number in range(10_000):  # the good profile's text, for another model each
        other = text.replace(f'"models": [{host.model}]', f'"models": [{1000 + number}]')
        (folder / f"other-{number:05d}.yaml").write_text(
            other.replace('"name": "good"', f'"name": "other-{number}"'), encoding="utf-8")
    files = start(folder)
    _the_good_one_imported(files, good)
    assert len(files) == 10_001 and {status for _, status, _, _ in files} == {"imported"}
    unread = read_profiles(folder / "other-00000.yaml", lambda row: False)
    assert unread.profiles == () and [row.name for row in unread.unread] == ["other-0"]


@pytest.mark.parametrize("command", [
    ["profiles", "validate", "{fifo}"],
    ["cache", "inspect", "--path", "{fifo}"],
    ["profiles", "explain", "--descriptor", "{fifo}"],
    ["report", "{fifo}"],
])
def test_a_fifo_given_to_a_command_is_a_failure_naming_it(tmp_path, command):
    fifo = tmp_path / "fifo.yaml"
    os.mkfifo(fifo)
    done = run_kerneltune(*[part.format(fifo=fifo) for part in command], timeout=HANG)
    assert done.returncode == 1, (done.stdout, done.stderr)
    assert str(fifo) in done.stderr and "FIFO" in done.stderr
    assert "Traceback" not in done.stderr
