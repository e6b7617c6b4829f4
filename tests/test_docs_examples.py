"""Every Python block and shell command of README.md and docs/cli.md runs, as written, in order.

A document's examples run in one fresh process, in a folder of their own (the
files they name are there: the repository's examples/, selectors/ and test data,
and copies of the reports docs/images holds), with a user cache of their own.
Python blocks share one namespace, as a reader pasting them into one session would;
each shell command runs in bash and must exit 0. Blocks the tests cannot run say
why, in an HTML comment (``<!-- not run by the tests: why -->``) just before the
block; output shown as a block of its own follows ``<!-- its output -->``; config
files (dockerfile, ini) are not commands. Nothing here checks a timing: a
calibration that runs out of its budget on a busy machine reports so, exits done
in part (3) or, having published nothing, 1, and the example still counts as run;
so does one that withheld its keys (measured under interference) or stopped them, and
the command that plots its report, which then has no measurement to plot.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from dataclasses import asdict, dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
DOCUMENTS = ("README.md", "docs/cli.md")
NOT_RUN = re.compile(r"<!-- not run by the tests: (?P<why>.+?) -->")
OUTPUT = "<!-- its output -->"
FENCE = re.compile(r"^(?P<fence>```+|~~~+)\s*(?P<info>[\w+-]*)")
PYTHON = {"python", "py"}
SHELL = {"sh", "bash", "shell", "console", ""}
#: what the examples find beside them: links to the repository's folders, copies of files
LINKED = ("examples", "selectors", "tests")
COPIED = {"docs/cli.md": ("docs/images/crossover-add-float.json",
                          "profiles/amd-x86-64-v4-25-17.yaml")}
#: what a document says its examples ran with, beyond their own cache
VARIABLES = {"docs/cli.md": {"KERNELTUNE_CACHE": "cache.yaml"}}


@dataclass(frozen=True)
class Example:
    line: int
    kind: str
    text: str


def parse(path: Path) -> tuple[list[Example], list[tuple[int, str]]]:
    """The examples of a Markdown file in order, and the blocks not run with the reason."""
    lines = path.read_text(encoding="utf-8").splitlines()
    examples: list[Example] = []
    not_run: list[tuple[int, str]] = []
    index = 0
    while index < len(lines):
        opening = FENCE.match(lines[index])
        if not opening:
            index += 1
            continue
        end = next(i for i in range(index + 1, len(lines))
                   if lines[i].startswith(opening["fence"]))
        body, info = lines[index + 1:end], opening["info"].lower()
        before = next((lines[i].strip() for i in range(index - 1, -1, -1)
                       if lines[i].strip()), "")
        skipped = NOT_RUN.fullmatch(before)
        if skipped:
            not_run.append((index + 1, skipped["why"]))
        elif before != OUTPUT and info in PYTHON:
            examples.append(Example(index + 2, "python", "\n".join(body)))
        elif before != OUTPUT and info in SHELL:
            examples += _commands(body, index + 2, prompted=info != "sh" and info != "bash")
        index = end + 1
    return examples, not_run


def _commands(body: list[str], first: int, prompted: bool) -> list[Example]:
    """The commands of a shell block: every line of a script, or the ``$`` lines of a
    transcript (a block without any is a listing, not commands)."""
    commands, pending, start = [], "", first
    for number, line in enumerate(body, first):
        if prompted:
            if line.startswith("$ "):
                commands.append(Example(number, "shell", line[2:]))
            continue
        if not pending:
            start = number
        if not pending and (not line.strip() or line.lstrip().startswith("#")):
            continue
        if line.endswith("\\"):
            pending += line[:-1].strip() + " "
            continue
        commands.append(Example(start, "shell", pending + line.strip()))
        pending = ""
    return commands


#: runs a document's examples in order; prints where and why the first one failed
DRIVER = r"""
import json, re, subprocess, sys, traceback
document, examples = sys.argv[1], json.load(open(sys.argv[2]))
namespace = {"__name__": "__main__"}
unfinished = False  # a calibration so far withheld or stopped keys
for example in examples:
    where = f"{document}:{example['line']}"
    print(f"--- {where}: {example['text'].splitlines()[0][:100]}", flush=True)
    if example["kind"] == "python":
        try:
            exec(compile(example["text"], where, "exec"), namespace)
        except BaseException:
            traceback.print_exc()
            print(f"FAILED {where}", flush=True)
            sys.exit(1)
    else:
        done = subprocess.run(["bash", "-o", "pipefail", "-c", example["text"]],
                              capture_output=True, text=True)
        sys.stdout.write(done.stdout)
        sys.stderr.write(done.stderr)
        # a calibration a busy machine kept from finishing within its budget says so, and
        # exits done in part (3) or, having published nothing, 1: the example still ran
        budget = "time budget exhausted" in done.stdout + done.stderr
        errors = [line for line in done.stderr.splitlines() if line.startswith("kerneltune ")
                  and not ("not tuned:" in line and "time budget exhausted" in line)]
        nothing = "nothing calibrated:" in done.stdout or "0 keys tuned" in done.stdout
        stopped = budget and (done.returncode == 3 or (done.returncode == 1 and nothing
                                                       and not errors))
        # ... or withheld its keys, measured under interference, or stopped them: the report
        # it wrote, read by this command or a later one, has nothing to plot, and says so
        unfinished |= bool(re.search(r"keys calibrated in [^,]*, ([1-9][0-9]* withheld|"
                                     r"[0-9]+ withheld, [1-9][0-9]* stopped)", done.stdout))
        stopped |= bool(unfinished and done.returncode == 1 and errors and all(
            "no decision measured anything to plot" in line for line in errors))
        if done.returncode != 0 and not stopped:
            print(f"FAILED {where}: exit status {done.returncode}", flush=True)
            sys.exit(1)
"""


def workspace(folder: Path, document: str) -> dict[str, str]:
    """The folder the examples run in, and their environment."""
    for name in LINKED:
        (folder / name).symlink_to(ROOT / name, target_is_directory=True)
    (folder / "profiles").mkdir()
    for name in COPIED.get(document, ()):
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(ROOT / name, folder / name)
    environment = {name: value for name, value in os.environ.items()
                   if not name.startswith("KERNELTUNE_")}
    environment.update(
        KERNELTUNE_CACHE=str(folder / "cache" / "kernel_tuning.yaml"),
        KERNELTUNE_CALIBRATION_PROFILES=str(folder / "cache" / "calibration_profiles.json"),
        MPLBACKEND="Agg",
        # the suite's interference limit (conftest.py) holds for the examples' calibrations
        KERNELTUNE_MAXIMUM_INTERFERENCE=os.environ.get("KERNELTUNE_MAXIMUM_INTERFERENCE", ""),
        # `python` and `kerneltune` are this interpreter's, as in an activated environment
        PATH=os.pathsep.join([str(Path(sys.executable).parent), environment.get("PATH", "")]))
    environment.update(VARIABLES.get(document, {}))
    return environment


@pytest.mark.parametrize("document", DOCUMENTS)
def test_every_example_runs_as_written(document, tmp_path):
    examples, _ = parse(ROOT / document)
    assert examples, f"{document} has no example"
    listing = tmp_path / "examples.json"
    listing.write_text(json.dumps([asdict(example) for example in examples]), encoding="utf-8")
    folder = tmp_path / "work"
    folder.mkdir()
    done = subprocess.run([sys.executable, "-c", DRIVER, document, str(listing)], cwd=folder,
                          env=workspace(folder, document), capture_output=True, text=True,
                          timeout=3600, check=False)
    assert done.returncode == 0, (done.stdout[-6000:], done.stderr[-6000:])
    assert "Traceback" not in done.stderr, done.stderr[-6000:]


@pytest.mark.parametrize("document", DOCUMENTS)
def test_every_block_not_run_says_why_and_few_are(document):
    _, not_run = parse(ROOT / document)
    assert all(why.strip() for _, why in not_run)
    assert len(not_run) <= 2


def test_the_parser_finds_python_blocks_commands_and_what_is_not_run(tmp_path):
    page = tmp_path / "page.md"
    page.write_text("\n".join([
        "```python", "x = 1", "```",
        "<!-- not run by the tests: it takes an hour -->", "```sh", "slow --all", "```",
        "```sh", "# a comment", "kerneltune cpu \\", "    --json", "", "echo done", "```",
        "```", "$ kerneltune cache path", "/home/user/.cache", "```",
        "<!-- its output -->", "```", "$ not a command: output of the block above", "```",
        "```dockerfile", "RUN kerneltune profiles validate x", "```",
        "```", "src/", "    a listing", "```"]), encoding="utf-8")
    examples, not_run = parse(page)
    assert [(e.kind, e.text) for e in examples] == [
        ("python", "x = 1"), ("shell", "kerneltune cpu --json"), ("shell", "echo done"),
        ("shell", "kerneltune cache path")]
    assert [e.line for e in examples] == [2, 10, 13, 16]
    assert not_run == [(5, "it takes an hour")]
