"""Deployment profiles: a machine type's calibrations bound to a selector, shipped and imported.

Owns the profile (:mod:`.model`), its export from calibration reports
(:mod:`.export`), profile files (:mod:`.files`) and deployment files, several
profiles baked into one (:mod:`.deployment`), runs of one selector merged by the
evidence of their reports (:mod:`.merge`), the transactional import into a
registry (:mod:`.importer`), and first-use verification on a host
(:mod:`.verification`). May import :mod:`kerneltune.calibration`,
:mod:`kerneltune.cache`, :mod:`kerneltune.tuning`, :mod:`kerneltune.machine`,
:mod:`kerneltune._support` and :mod:`kerneltune.errors`; never a kernel library.
"""

from __future__ import annotations

from .export import export_deployment_profile
from .files import read_deployment_profile, write_deployment_profile
from .importer import (
    ENVIRONMENT_VARIABLE,
    ProfileFileReport,
    ProfileImportReport,
    import_deployment_profiles,
)
from .merge import MachineRun, merge_runs
from .model import MERGE_REASONS, DeploymentProfile, Evidence, ProfileEntry
from .verification import KeyVerification, VerificationReport, verify_deployment_profiles

__all__ = [
    "ENVIRONMENT_VARIABLE",
    "MERGE_REASONS",
    "DeploymentProfile",
    "Evidence",
    "KeyVerification",
    "MachineRun",
    "ProfileEntry",
    "ProfileFileReport",
    "ProfileImportReport",
    "VerificationReport",
    "export_deployment_profile",
    "import_deployment_profiles",
    "merge_runs",
    "read_deployment_profile",
    "verify_deployment_profiles",
    "write_deployment_profile",
]
