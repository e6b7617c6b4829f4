"""MkDocs hooks of the documentation site (mkdocs.yml): README.md is its home page.

README.md is written for the repository, where the docs are under docs/; as the site's
``index.md`` its links to ``docs/X.md`` become ``X.md``, and the docs' links back to
``../README.md`` become ``index.md``. The docstrings name other objects with Sphinx roles
(``:func:`~kerneltune.explain```), which Markdown renders as text before a code span: the
reference shows the code span alone, the last dotted part where a ``~`` asks for it.
"""

from __future__ import annotations

import re
from pathlib import Path

from mkdocs.structure.files import File, Files

README = Path(__file__).resolve().parent.parent / "README.md"


def on_files(files: Files, config) -> Files:
    files.append(File.generated(config, "index.md", content=README.read_text(encoding="utf-8")))
    return files


#: ``:func:<code>~a.b</code>`` as Markdown renders a Sphinx role
_ROLE = re.compile(r":(?:mod|func|class|meth|attr|data|exc|obj):\s*<code>(~?)([^<]*)</code>")


def _code(match: re.Match) -> str:
    name = match.group(2).rsplit(".", 1)[-1] if match.group(1) else match.group(2)
    return f"<code>{name}</code>"


def on_page_content(html: str, page, config, files) -> str:
    return _ROLE.sub(_code, html)


def on_page_markdown(markdown: str, page, config, files) -> str:
    if page.file.src_uri == "index.md":
        return re.sub(r"\]\(docs/", "](", markdown)
    return re.sub(r"\]\(\.\./README\.md", "](index.md", markdown)
