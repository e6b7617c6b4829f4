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

from conftest import run_kerneltune, variant_environment
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
    environment = variant_environment()  # the profile is written for this process's keys
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


# --- what a damaged or foreign deployment file holds -------------------------------------------


def _baked(tmp_path: Path, good: Path) -> Path:
    from kerneltune.pipeline import bake

    output = tmp_path / "baked" / "deployment.yaml"
    assert bake([good], output).written
    return output


def _edited(path: Path, edit) -> Path:
    """A writable copy of ``path`` with its index line changed by ``edit(rows)``."""
    lines = path.read_bytes().split(b"\n")
    index = next(i for i, line in enumerate(lines) if line.startswith(b' "index": '))
    rows = json.loads(lines[index][len(b' "index": '):-1])
    edit(rows)
    lines[index] = b' "index": ' + json.dumps(rows, sort_keys=True).encode() + b","
    copy = path.with_name("edited.yaml")
    copy.write_bytes(b"\n".join(lines))
    return copy


def _set(field, value):
    def edit(rows):
        rows[0][field] = value
    return edit


def _selector_models(rows):
    rows[0]["selector"]["models"] = rows[0]["selector"]["models"][0]


@pytest.mark.parametrize(("edit", "why"), [
    (_selector_models, "the index describes another profile"),
    (_set("selector", [1]), "index.selector"),
    (_set("implementations", [[1]]), "index.implementations"),
    (_set("implementations", ["x86_64_v9"]), "the index describes another profile"),
    (_set("entries", 5), "the index describes another profile"),
    (_set("offset", 3), "the section is not what the index says"),
])
def test_an_index_that_lies_is_a_problem_of_its_file_never_an_exception(tmp_path, good, edit,
                                                                         why):
    from kerneltune.pipeline import validate_deployment_files

    edited = _edited(_baked(tmp_path, good), edit)
    report = validate_deployment_files([edited])
    assert not report.ok and any(why in problem for problem in report.problems), report
    files = start(edited, good)
    assert files[0][1] == "malformed" or files[0][2] == 0
    _the_good_one_imported(files, good)


def test_an_index_nested_past_the_parser_is_malformed(tmp_path, good):
    baked = _baked(tmp_path, good)
    text = baked.read_bytes().replace(b' "index": [', b' "index": ' + b"[" * 100_000 + b"[", 1)
    deep = tmp_path / "deep.yaml"
    deep.write_bytes(text)
    files = start(deep, good)
    assert files[0][1] == "malformed"
    _the_good_one_imported(files, good)


def test_a_header_over_the_limit_is_refused_before_the_rest_is_read(tmp_path, good):
    header = tmp_path / "long-header.yaml"
    with header.open("wb") as stream:
        stream.write(b'{\n "format": "kerneltune-deployment-profile",\n')
        for number in range(2000):
            stream.write(b' "field%d": "%s",\n' % (number, b"x" * 1000))
    files = start(header, good, KERNELTUNE_MAX_FILE_BYTES="1M")
    assert files[0][1] == "too_large"
    _the_good_one_imported(files, good)


def test_a_profile_in_another_spelling_of_this_processor_imports(tmp_path, good):
    text = good.read_text(encoding="utf-8")
    host = get_cpu_descriptor()
    spelled = {"amd": "AuthenticAMD", "intel": "GenuineIntel"}.get(host.vendor, host.vendor)
    other = tmp_path / "spelled.yaml"
    other.write_text(text.replace(f'"vendor": "{host.vendor}"', f'"vendor": "{spelled}"')
                     .replace(f'"models": [{host.model}]', f'"models": {host.model}')
                     .replace('"name": "good"', '"name": "spelled"'), encoding="utf-8")
    files = start(other)
    assert files == [[str(other), "imported", 1, ""]]


def test_a_version_1_deployment_file_is_read_whole(tmp_path, good):
    document = json.loads(good.read_text(encoding="utf-8"))
    first = tmp_path / "version-1.yaml"
    first.write_text(json.dumps({"format": "kerneltune-deployment-file", "schema_version": 1,
                                 "coverage": {}, "profiles": [document]}), encoding="utf-8")
    read = read_profiles(first)
    assert read.status == "ok" and [p.name for p in read.profiles] == ["good"]
    assert start(first) == [[str(first), "imported", 1, ""]]


def test_an_unreadable_size_limit_leaves_the_default(good):
    assert start(good, KERNELTUNE_MAX_FILE_BYTES="²")[0][1] == "imported"
