# PYTHON_ARGCOMPLETE_OK (argcomplete's global completion looks for this marker)
"""The ``kerneltune`` command line: a module per command group, each a thin shell over the API.

Anything a command prints can also be had from Python, and its defaults are
the API's. Errors go to stderr with exit status 1 when the command failed (a
file, a machine or a measurement that cannot be used) and 2 when it was given
arguments it cannot run with, and 3 when it was done in part (keys withheld or
stopped by a budget, or with ``calibrate --require-steady`` measured under
interference or with the machine slower than its reference state), each key
printed with its reason. docs/cli.md shows every command with its output.
"""

from __future__ import annotations

import argparse
import os
import select
import sys
from collections.abc import Sequence

from .._support.version import __version__
from ..errors import KernelTuningError, ProfileError, TuningValidationError, UnknownKernelError
from . import cache, calibrate, corpus, cpu, kernel, libraries, profiles, report
from .common import FAILURE, PARTIAL, USAGE, UsageError

#: the command groups, in the order ``kerneltune --help`` lists them
GROUPS = (cpu, libraries, kernel, calibrate, cache, profiles, corpus, report)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="kerneltune", description="Processor-aware tuning of compute-kernel thresholds.",
        epilog="Run 'kerneltune COMMAND --help' for a command's options and examples.")
    parser.add_argument("--version", action="version", version=f"kerneltune {__version__}")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for group in GROUPS:
        group.register(commands)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    if "_ARGCOMPLETE" in os.environ:  # a shell asking for completions (docs/cli.md)
        _complete(parser)
    args = parser.parse_args(argv)
    name = args.parser.prog
    try:
        status = args.run(args) or 0
        sys.stdout.flush()  # a reader that went away shows here, not at the interpreter's exit
        return status
    except BrokenPipeError as error:
        if not _reader_gone():  # another pipe: a worker, a FIFO the command wrote
            print(f"{name}: {error}", file=sys.stderr)
            return FAILURE
        # `kerneltune cpu | head`: the reader has what it wanted; nothing more to write
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return FAILURE
    except UsageError as error:
        args.parser.print_usage(sys.stderr)
        print(f"{name}: error: {error}", file=sys.stderr)
        return USAGE
    except ProfileError as error:  # a file or a machine that cannot be used
        print(f"{name}: {error}", file=sys.stderr)
        return FAILURE
    except (UnknownKernelError, TuningValidationError) as error:  # what the arguments named
        print(f"{name}: {error}", file=sys.stderr)
        return USAGE
    except (KernelTuningError, OSError, ValueError) as error:
        print(f"{name}: {error}", file=sys.stderr)
        return FAILURE
    except KeyboardInterrupt:
        print(f"{name}: interrupted", file=sys.stderr)
        return 130


def _complete(parser: argparse.ArgumentParser) -> None:
    """Answer the shell's completion request and exit (argcomplete's protocol); without
    argcomplete installed, there is nothing to answer with."""
    try:
        import argcomplete
    except ImportError:
        sys.exit(1)
    argcomplete.autocomplete(parser)


def _reader_gone() -> bool:
    """Whether standard output is a pipe whose reader closed it."""
    try:
        poller = select.poll()
        poller.register(sys.stdout.fileno(), select.POLLERR)
        return any(event & select.POLLERR for _, event in poller.poll(0))
    except (AttributeError, OSError, ValueError):  # no poll here, or no real stdout
        return False


__all__ = ["FAILURE", "PARTIAL", "USAGE", "build_parser", "main"]
