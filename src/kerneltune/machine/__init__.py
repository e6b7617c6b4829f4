"""The machine: what kerneltune knows of the processor and of how a process runs on it.

Owns the processor and execution descriptors (:mod:`.descriptor`), their detection
(:mod:`.detect`) and descriptor files (:mod:`.descriptor_files`), canonical spellings
(:mod:`.names`), processor selectors (:mod:`.selectors`) and selector files
(:mod:`.selector_files`), the thread policy (:mod:`.threads`), the OpenMP wait
policy (:mod:`.openmp`) and the BLAS libraries loaded (:mod:`.blas`).
May import :mod:`kerneltune._support` and :mod:`kerneltune.errors`, nothing else
of kerneltune.
"""

from __future__ import annotations

import lazy_loader

# the public names are those __init__.pyi imports, each loaded with its module on first use:
# a session needs the descriptors and their detection, not the selectors' nor the
# descriptor files' machinery
__getattr__, __dir__, __all__ = lazy_loader.attach_stub(__name__, __file__)
