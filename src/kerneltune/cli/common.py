"""What every command group shares: the exit policy, help with examples, JSON and values."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable, Sequence
from typing import Any

import yaml

#: exit statuses: the command failed (a file, a machine or a measurement that cannot be
#: used), or it was given arguments it cannot run with
FAILURE = 1
USAGE = 2
#: done in part: keys selected and not published (withheld, stopped by a budget), or with
#: ``calibrate --require-steady``, measured unsteadily; each is printed with its reason
PARTIAL = 3


class UsageError(Exception):
    """Arguments a command cannot run with, found after parsing: exit status 2."""


Command = Callable[[argparse.Namespace], "int | None"]


def add_command(commands: Any, name: str, summary: str, run: Command,
                examples: Sequence[str] = (), description: str | None = None,
                hidden_aliases: Sequence[str] = ()) -> argparse.ArgumentParser:
    """A subcommand whose ``--help`` ends with worked examples, as pip's and git's do.

    ``hidden_aliases`` are former names that still run the command for a release, left out
    of ``kerneltune --help``.
    """
    epilog = None
    if examples:
        epilog = "examples:\n" + "\n".join(f"  {line}" for line in examples)
    parser = commands.add_parser(
        name, help=summary, description=description or summary, epilog=epilog,
        formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.set_defaults(run=run, parser=parser)
    for alias in hidden_aliases:
        commands.choices[alias] = parser
    return parser


#: former spellings of options, kept for a release as hidden aliases: old -> the API's name
FORMER_SPELLINGS = {"--dtype": "--element-type", "--impl": "--implementation",
                    "--max-duration": "--time-budget", "--max-memory": "--memory-budget"}


def add_option(parser: argparse.ArgumentParser, name: str, **options: Any) -> None:
    """An option spelled as the API names the concept, with its former spelling
    (:data:`FORMER_SPELLINGS`) accepted beside it and left out of ``--help``.

    An option that must be given is checked with :func:`require` after parsing: argparse
    would otherwise refuse the former spelling as a missing option.
    """
    dest = name.lstrip("-").replace("-", "_")
    parser.add_argument(name, dest=dest, **options)
    hidden = {key: value for key, value in options.items() if key not in ("help", "default")}
    for former, current in FORMER_SPELLINGS.items():
        if current == name:
            parser.add_argument(former, dest=dest, help=argparse.SUPPRESS, **hidden)


def require(args: argparse.Namespace, *names: str) -> None:
    """A usage error naming each option of ``names`` (``--element-type``) not given."""
    missing = [name for name in names if getattr(args, name.lstrip("-").replace("-", "_"))
               is None]
    if missing:
        raise UsageError(f"the following arguments are required: {', '.join(missing)}")


def add_json(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--json", action="store_true",
                        help="print the result as JSON (documented in docs/cli.md)")


def add_library(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--library", help="only this kernel library's keys (kerneltune "
                                          "libraries lists them), e.g. kerneltune_cpu")


def positive_int(text: str) -> int:
    """An argument that counts something (threads): a usage error unless it is 1 or more."""
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a whole number of 1 or more, got {text!r}")
    return value


def add_threads(parser: argparse.ArgumentParser, what: str = "the thread count") -> None:
    parser.add_argument("--threads", type=positive_int,
                        help=f"{what} (default: the CPUs this process may use)")


def print_json(document: object) -> None:
    print(json.dumps(document, indent=2, default=str))


def warn(command: str, message: object) -> None:
    print(f"kerneltune {command}: {message}", file=sys.stderr)


def parse_value(text: str) -> object:
    """A parameter value from the command line: 4096, 1.5, true and row as YAML reads them."""
    try:
        value = yaml.safe_load(text)
    except yaml.YAMLError:
        return text
    return value if isinstance(value, bool | int | float | str) else text


def assignment(text: str) -> tuple[str, str]:
    """``NAME=VALUE`` split once; argparse reports anything else as a usage error."""
    name, sign, value = text.partition("=")
    if not sign or not name or not value:
        raise argparse.ArgumentTypeError(f"expected NAME=VALUE, got {text!r}")
    return name, value


def table(rows: Sequence[Sequence[object]], header: Sequence[str]) -> str:
    """Left-aligned columns under a header, the way ``pip list`` prints."""
    cells = [[str(cell) for cell in row] for row in [header, *rows]]
    widths = [max(len(row[i]) for row in cells) for i in range(len(header))]
    lines = ["  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True))
             .rstrip() for row in cells]
    lines.insert(1, "  ".join("-" * width for width in widths))
    return "\n".join(lines)
