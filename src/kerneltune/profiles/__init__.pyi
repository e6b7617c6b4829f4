"""Type stub of the package: the names its submodules give, each loaded on first use
(``lazy_loader.attach_stub`` reads the imports below at run time)."""

from .environment import ENVIRONMENT_VARIABLE
from .export import export_deployment_profile
from .files import read_deployment_profile, write_deployment_profile
from .importer import (
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
