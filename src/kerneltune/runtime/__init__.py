"""Running ONNX models on the kernel library: :class:`RuntimeSession` and the onnx backend."""

from .contention import Contention, default_contention
from .session import RuntimeSession

__all__ = ["Contention", "RuntimeSession", "default_contention"]
