"""Write the __init__.py of a generated _variants package to standard output.

meson.build's configure_file() captures it for each ISA variant package and for the
_variants package itself:

    python tools/write_init.py DOCSTRING [NAME: VALUE | NAME= ITEM...]...

The module holds DOCSTRING, then `NAME = 'VALUE'` for each `NAME:` token and
`NAME = ('ITEM', ...)` for each `NAME=` token (the items up to the next name; none gives ()).
"""

from __future__ import annotations

import sys


def is_name(token: str) -> bool:
    return token.endswith(("=", ":")) and token[:-1].isidentifier()


def module_text(docstring: str, tokens: list[str]) -> str:
    """The module source for DOCSTRING and the NAME tokens with their values."""
    lines = [f'"""{docstring}"""', ""]
    name, values, scalar = None, [], False
    for token in [*tokens, "END="]:
        if is_name(token):
            if name is not None:
                lines.append(f"{name} = {values[0]!r}" if scalar else f"{name} = {tuple(values)!r}")
            name, values, scalar = token[:-1], [], token.endswith(":")
        else:
            values.append(token)
    return "\n".join(lines) + "\n"


def main(argv: list[str]) -> None:
    docstring, *tokens = argv
    sys.stdout.write(module_text(docstring, tokens))


if __name__ == "__main__":
    main(sys.argv[1:])
