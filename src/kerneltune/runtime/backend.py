"""onnx's Backend interface over :class:`RuntimeSession`, so onnx's own test cases run on it.

``is_compatible`` asks the check a session makes at construction, so onnx's test runner
skips the models kerneltune refuses instead of counting them as errors.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import onnx
from onnx.backend.base import Backend, BackendRep

from ..errors import UnsupportedModelError
from ..kernels import library
from .model import prepare_model
from .session import RuntimeSession


class KerneltuneRep(BackendRep):
    """A prepared model; ``run`` takes inputs in graph order, as onnx's test runner passes them."""

    def __init__(self, session: RuntimeSession):
        self.session = session

    def run(self, inputs: Any, **kwargs: Any) -> tuple[np.ndarray, ...]:
        names = [s.name for s in self.session.get_inputs()]
        if isinstance(inputs, dict):
            feed = inputs
        else:
            if isinstance(inputs, np.ndarray):
                inputs = [inputs]
            feed = dict(zip(names, inputs, strict=True))
        return tuple(self.session.run(None, feed))


class KerneltuneBackend(Backend):
    @classmethod
    def prepare(cls, model: onnx.ModelProto, device: str = "CPU", **kwargs: Any) -> KerneltuneRep:
        """A session for ``model``; a device other than the CPU is refused (a RuntimeError, as
        onnxruntime's backend raises), never run on the CPU in its place."""
        if not cls.supports_device(device):
            raise RuntimeError(f"kerneltune runs models on the CPU only, not on {device!r} "
                               f"(supports_device({device!r}) is False)")
        super().prepare(model, device, **kwargs)
        return KerneltuneRep(RuntimeSession(model, **kwargs))

    @classmethod
    def is_compatible(cls, model: onnx.ModelProto, device: str = "CPU", **kwargs: Any) -> bool:
        """Whether a session would run ``model`` on ``device``: its operators, types and
        attributes (nothing is resolved or prepared)."""
        if not cls.supports_device(device):
            return False
        try:
            prepare_model(model, library())
        except UnsupportedModelError:
            return False
        return True

    @classmethod
    def run_model(cls, model: onnx.ModelProto, inputs: Any, device: str = "CPU",
                  **kwargs: Any) -> tuple[np.ndarray, ...]:
        return cls.prepare(model, device, **kwargs).run(inputs)

    @classmethod
    def run_node(cls, node: onnx.NodeProto, inputs: Sequence[np.ndarray], device: str = "CPU",
                 outputs_info: Sequence[tuple[np.dtype, tuple[int, ...]]] | None = None,
                 **kwargs: Any) -> tuple[np.ndarray, ...]:
        """One node as a one-node model of the newest opset, its value types taken from the
        inputs given and its outputs' from onnx's shape inference (the checker needs them)."""
        super().run_node(node, inputs, device=device, outputs_info=outputs_info)
        names = [name for name in node.input if name]
        graph_inputs = [
            onnx.helper.make_tensor_value_info(
                name, onnx.helper.np_dtype_to_tensor_dtype(np.asarray(value).dtype),
                np.shape(value))
            for name, value in zip(names, inputs, strict=True)
        ]
        graph = onnx.helper.make_graph([node], "run_node", graph_inputs, [])
        model = onnx.helper.make_model(graph, opset_imports=[
            onnx.helper.make_opsetid("", onnx.defs.onnx_opset_version())])
        inferred = {v.name: v for v in onnx.shape_inference.infer_shapes(model).graph.value_info}
        model.graph.output.extend(inferred.get(name, onnx.helper.make_empty_tensor_value_info(
            name)) for name in node.output)
        return cls.run_model(model, list(inputs), device, **kwargs)

    @classmethod
    def supports_device(cls, device: str) -> bool:
        return device.upper() == "CPU"


prepare = KerneltuneBackend.prepare
is_compatible = KerneltuneBackend.is_compatible
run_model = KerneltuneBackend.run_model
run_node = KerneltuneBackend.run_node
supports_device = KerneltuneBackend.supports_device
