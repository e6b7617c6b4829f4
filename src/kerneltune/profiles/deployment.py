"""Deployment files: several profiles merged into the one file a deployment image carries.

``nox -s bake`` (:mod:`kerneltune.pipeline.baking`) writes them; the importer
reads them as it reads single profiles. A deployment file holds each profile
whole (its selector, provenance and entries) and the coverage table the bake
computed; its bytes are deterministic, so its SHA-256 names it.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Iterable, Mapping
from pathlib import Path

from .._support.documents import DocumentFormat, check_envelope, read_document
from .._support.files import write_atomically
from ..errors import Problem, ProfileError
from .files import profile_from_document
from .model import PROFILE_FORMAT, DeploymentProfile, profile_text

#: the deployment file's format: its header and top-level fields
DEPLOYMENT_FORMAT = DocumentFormat(
    "kerneltune-deployment-file", 1,
    {"format": str, "schema_version": int, "coverage": dict, "profiles": list},
    what="deployment file")


def deployment_text(profiles: Iterable[DeploymentProfile], coverage: Mapping[str, object]) -> str:
    """The file's text: the header, the coverage on one line, then each profile in turn."""
    ordered = sorted(profiles, key=lambda p: (p.name, p.priority))
    header = (f' "format": {json.dumps(DEPLOYMENT_FORMAT.name)},\n'
              f' "schema_version": {DEPLOYMENT_FORMAT.schema_version},\n'
              f' "coverage": {json.dumps(coverage, sort_keys=True)},\n')
    body = ",\n".join(profile_text(profile, indent="  ").rstrip("\n") for profile in ordered)
    return "{\n" + header + ' "profiles": [\n' + body + ("\n" if body else "") + " ]\n}\n"


def write_deployment_file(profiles: Iterable[DeploymentProfile], coverage: Mapping[str, object],
                          path: str | os.PathLike[str]) -> str:
    """Write the file whole or not at all, read-only, and return its SHA-256."""
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    text = deployment_text(profiles, coverage)
    write_atomically(target, text)
    target.chmod(0o444)
    return hashlib.sha256(text.encode()).hexdigest()


def profiles_of_deployment(data: Mapping, path: str) -> tuple[DeploymentProfile, ...]:
    """The profiles of a checked deployment document; every problem of every one raised."""
    problems: list[Problem] = []
    profiles = []
    for index, document in enumerate(data["profiles"]):
        name = document.get("name") if isinstance(document, dict) else None
        within = f"profile {index}" + (f" ({name})" if isinstance(name, str) else "")
        status, found = check_envelope(document, path, PROFILE_FORMAT)
        if status != "ok":
            problems += [p.located(entry=within) for p in found]
            continue
        try:
            profiles.append(profile_from_document(document, path, within))
        except ProfileError as error:
            problems += error.problems
    if problems:
        raise ProfileError(problems, context="deployment file not read")
    return tuple(profiles)


def read_profiles(path: str | os.PathLike[str]
                  ) -> tuple[str, tuple[DeploymentProfile, ...], tuple[Problem, ...], str | None]:
    """The profiles of a profile file or a deployment file, never raising for its content.

    Returns the status (``ok``, ``malformed``, or what reading said), the
    profiles, the problems and the SHA-256 of the file's bytes.
    """
    target = Path(path)
    document = read_document(target, PROFILE_FORMAT, DEPLOYMENT_FORMAT)
    if document.status != "ok":
        problems = document.problems or (Problem("", "no such file", file=document.path),)
        return document.status, (), problems, None
    try:
        if document.data["format"] == DEPLOYMENT_FORMAT.name:
            profiles = profiles_of_deployment(document.data, document.path)
        else:
            profiles = (profile_from_document(document.data, document.path),)
    except ProfileError as error:
        return "malformed", (), error.problems, None
    return "ok", profiles, (), hashlib.sha256(target.read_bytes()).hexdigest()
