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

import lazy_loader

# the public names are those __init__.pyi imports, each loaded with its module on first use
__getattr__, __dir__, __all__ = lazy_loader.attach_stub(__name__, __file__)
