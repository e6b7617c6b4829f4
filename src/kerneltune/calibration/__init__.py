"""Calibration: measure the real kernels on this machine and publish what wins.

:func:`calibrate_registered_kernels` runs the registered calibration function
of every selected key (see :mod:`.batch`); the functions use the shared
searches of :mod:`.search` through a :class:`CalibrationContext`, and every
measurement and decision ends in a :class:`CalibrationReport`. A kernel
library may register machine probes (:mod:`.steadiness`), run around each key,
whose rates send keys measured while the machine was slow back to be measured
again. Calibration functions and probes are registered with a tuning registry
(``registry=``, the process-wide one by default), and a batch runs those of
the registry it calibrates. :mod:`.curves` and :mod:`.plot` read a report back
and draw its crossovers; :mod:`.parameters` is the developer's view of one
machine (list, set, and fill in the user cache).

May import :mod:`kerneltune.cache`, :mod:`kerneltune.tuning`,
:mod:`kerneltune.machine`, :mod:`kerneltune._support` and :mod:`kerneltune.errors`;
never a kernel library, which registers its calibration functions here instead.
"""

from __future__ import annotations

import lazy_loader

# the public names are those __init__.pyi imports, each loaded with its module on first use
__getattr__, __dir__, __all__ = lazy_loader.attach_stub(__name__, __file__)
