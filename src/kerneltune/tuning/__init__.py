"""Tuning: keys, typed configs and their schemas, the registry, and resolution.

Owns :class:`KernelTuningKey` and the schemas derived from typed configs
(:mod:`.schema`), the element types' numpy dtypes (:mod:`.dtypes`), key filters
(:mod:`.keyfilter`), the kernel libraries installed (:mod:`.libraries`) and the
machine probes they register (:mod:`.machine_probes`), what the registry holds and
answers (:mod:`.resolution`), its access counters (:mod:`.counters`), the registry and
its immutable generations (:mod:`.registry`), and why each key resolves as it does
(:mod:`.explanation`). May import :mod:`kerneltune.machine`,
:mod:`kerneltune._support` and :mod:`kerneltune.errors`.
"""

from __future__ import annotations

import lazy_loader

# the public names are those __init__.pyi imports, each loaded with its module on first use:
# a session never loads the explanations' machinery
__getattr__, __dir__, __all__ = lazy_loader.attach_stub(__name__, __file__)
