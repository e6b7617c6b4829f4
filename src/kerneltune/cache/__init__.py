"""The user calibration cache: values measured (or set by hand) on this machine, in one file.

Owns the cache's entries and their text (:mod:`.entries`) and the operations on the
file: inspect, load into a registry, update under the lock, remove
(:mod:`.kernel_tuning_cache`), where the file is (:mod:`.location`) and what each operation
reports (:mod:`.reports`). May import :mod:`kerneltune.tuning`,
:mod:`kerneltune.machine`, :mod:`kerneltune._support` and :mod:`kerneltune.errors`.
"""

from __future__ import annotations

import lazy_loader

# the public names are those __init__.pyi imports, each loaded with its module on first use:
# a start-up without a cache file loads only .location and .reports
__getattr__, __dir__, __all__ = lazy_loader.attach_stub(__name__, __file__)
