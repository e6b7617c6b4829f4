"""Running ONNX models on the kernel library: :class:`RuntimeSession` and the onnx backend.

Owns the model as the runtime reads it (:mod:`.model`), the session with its frozen
tuning (:mod:`.session`), the contention that sizes its parallel regions
(:mod:`.contention`) and onnx's Backend interface (:mod:`.backend`). May import the
kernel library and every layer below it.
"""

from __future__ import annotations

from .contention import Contention, default_contention
from .session import RuntimeSession

__all__ = ["Contention", "RuntimeSession", "default_contention"]
