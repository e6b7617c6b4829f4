"""Persistent calibration for accelerated backends, with no file code in the backend.

A backend library builds a :class:`CalibrationProfileKey` (exact: the model,
processor and thread count it measured on; or portable: the model's
structural properties), hands :class:`CalibrationProfileStore` a serialiser
and a validator for its opaque policy string, and asks for the policy to use
with :meth:`~CalibrationProfileStore.lookup`. The store owns loading,
locking, merging with other processes and atomic replacement; see
docs/store.md for the method and the file. May import :mod:`kerneltune._support`
and :mod:`kerneltune.errors` only: the store serves any backend, and knows nothing
of kerneltune's own kernels.
"""

from __future__ import annotations

from .file import PROFILES_FORMAT
from .keys import CalibrationMeasurement, CalibrationProfileKey
from .lookup import CalibrationProfileLookup, RejectedCalibrationProfile
from .profile_store import (
    ENVIRONMENT_VARIABLE,
    CalibrationProfileLoadReport,
    CalibrationProfileStore,
    CalibrationProfileUpdateReport,
    default_calibration_profile_path,
)
from .records import CALIBRATED, OVERRIDE, CalibrationProfile

__all__ = [
    "CALIBRATED",
    "ENVIRONMENT_VARIABLE",
    "OVERRIDE",
    "PROFILES_FORMAT",
    "CalibrationMeasurement",
    "CalibrationProfile",
    "CalibrationProfileKey",
    "CalibrationProfileLoadReport",
    "CalibrationProfileLookup",
    "CalibrationProfileStore",
    "CalibrationProfileUpdateReport",
    "RejectedCalibrationProfile",
    "default_calibration_profile_path",
]
