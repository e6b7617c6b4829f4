"""Running ONNX models on the kernel library: :class:`RuntimeSession` and the onnx backend."""

from .session import RuntimeSession

__all__ = ["RuntimeSession"]
