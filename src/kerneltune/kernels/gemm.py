"""Gemm and MatMul: typed configs, path choice and prepared runs.

Three algorithms compute ``alpha * op(A) @ op(B) + beta * C``: the blocked
pythran kernel (tiles, optional packing of B), its skinny variant for a few
rows (B streamed once), and numpy's BLAS above a calibrated FMA count. The
algorithm decision and the parallel decision (how many threads the task grid
is worth) are separate parameters. The portable serial path is the blocked
kernel on one thread; blocked, packed, skinny, serial and parallel runs give
identical bits, the BLAS path does not (it sums in another order).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from ..schema import element_type_number, tunable
from . import half
from .base import NUMPY_DTYPES, Kernel, Plan, PreparedKernel, operand, parallel_threads
from .elementwise import HalfConversionConfig
from .variants import load_module

FLOAT16 = element_type_number("FLOAT16")
#: the micro-kernel's block (see gemm_pythran): tile_m, tile_n and tile_k must be multiples
MICRO_ROWS, MICRO_COLUMNS, MICRO_DEPTH = 4, 64, 4
_NO_BIAS = {np.dtype(np.float32): np.zeros((0, 0), np.float32),
            np.dtype(np.float64): np.zeros((0, 0), np.float64)}


@dataclass(frozen=True)
class GemmConfig:
    """Algorithm choices (tiles, packing, skinny, BLAS) apart from the parallel task grid."""

    tile_m: int = tunable("algorithm.tile_m", 64, minimum=MICRO_ROWS,
                          doc="rows of A per task, a multiple of 4")
    tile_n: int = tunable("algorithm.tile_n", 256, minimum=MICRO_COLUMNS,
                          doc="columns of B per task, a multiple of 64")
    tile_k: int = tunable("algorithm.tile_k", 256, minimum=MICRO_DEPTH,
                          doc="depth of one step over K, a multiple of 4")
    pack_b_minimum_elements: int = tunable(
        "algorithm.pack_b_minimum_elements", 16384, minimum=0,
        doc="K x N from which B is copied into contiguous panels first")
    skinny_m_limit: int = tunable("algorithm.skinny_m_limit", 8, minimum=0,
                                  doc="up to this many rows, the skinny path streams B once")
    blas_minimum_fmas: int = tunable("algorithm.blas_minimum_fmas", 32768, minimum=0,
                                     doc="M x N x K from which numpy's BLAS computes")
    fmas_per_work_unit: int = tunable("parallel.fmas_per_work_unit", 65536, minimum=1,
                                      doc="multiply-adds worth one thread")
    minimum_tasks: int = tunable("parallel.minimum_tasks", 2, minimum=1,
                                 doc="tiles of output below which the product runs serially")

    def consistency(self):
        for name, value, unit in (("algorithm.tile_m", self.tile_m, MICRO_ROWS),
                                  ("algorithm.tile_n", self.tile_n, MICRO_COLUMNS),
                                  ("algorithm.tile_k", self.tile_k, MICRO_DEPTH)):
            if value % unit:
                yield (name, f"{value} is not a multiple of the micro-kernel's {unit}")


@dataclass(frozen=True)
class HalfGemmConfig(GemmConfig, HalfConversionConfig):
    pass


class Gemm(Kernel):
    """ONNX Gemm: ``alpha * op(A) @ op(B) + beta * C`` with C broadcast to (M, N)."""

    name = "Gemm"

    @property
    def element_types(self) -> tuple[int, ...]:
        return tuple(element_type_number(t) for t in ("FLOAT", "DOUBLE", "FLOAT16"))

    def config_type(self, element_type: int) -> type:
        return HalfGemmConfig if element_type == FLOAT16 else GemmConfig

    def _prepare(self, element_type, config, threads, attributes) -> PreparedKernel:
        known = {"alpha", "beta", "transA", "transB"}
        if set(attributes) - known:
            raise TypeError(f"Gemm attributes are {sorted(known)}, got "
                            f"{sorted(set(attributes) - known)}")
        return PreparedGemm(self.tuning_key(element_type), config, threads, element_type,
                            load_module("gemm", self.implementation),
                            float(attributes.get("alpha", 1.0)),
                            float(attributes.get("beta", 1.0)),
                            bool(attributes.get("transA", 0)), bool(attributes.get("transB", 0)))


class MatMul(Gemm):
    """ONNX MatMul: numpy's matmul (1-D promotion, broadcast batches) on the Gemm machinery."""

    name = "MatMul"

    def _prepare(self, element_type, config, threads, attributes) -> PreparedKernel:
        if attributes:
            raise TypeError(f"MatMul takes no attributes, got {sorted(attributes)}")
        return PreparedMatMul(super()._prepare(element_type, config, threads, {"beta": 0.0}))


class PreparedGemm(PreparedKernel):
    def __init__(self, key, config, threads, element_type, module, alpha, beta, trans_a,
                 trans_b):
        self.key, self.config, self.threads = key, config, threads
        self._half = element_type == FLOAT16
        self._dtype = NUMPY_DTYPES[element_type]
        self._compute = np.dtype(np.float32) if self._half else self._dtype
        self._module = module
        self.alpha, self.beta, self.trans_a, self.trans_b = alpha, beta, trans_a, trans_b
        c = config
        self._tiles = (c.tile_m, c.tile_n, c.tile_k)
        self._pack_from, self._skinny_up_to = c.pack_b_minimum_elements, c.skinny_m_limit
        self._blas_from, self._unit, self._min_tasks = (c.blas_minimum_fmas,
                                                        c.fmas_per_work_unit, c.minimum_tasks)
        self._conversion_grain = getattr(c, "conversion_minimum_elements", 0)

    def _shapes(self, a: np.ndarray, b: np.ndarray) -> tuple[int, int, int]:
        if a.ndim != 2 or b.ndim != 2:
            raise ValueError(f"Gemm: A and B must be 2-D, got shapes {a.shape} and {b.shape}")
        m, k = a.shape[::-1] if self.trans_a else a.shape
        kb, n = b.shape[::-1] if self.trans_b else b.shape
        if k != kb:
            raise ValueError(f"Gemm: op(A) {(m, k)} and op(B) {(kb, n)} do not agree on K")
        return m, k, n

    def plan(self, a, b, c=None) -> Plan:
        return self.plan_product(*self._shapes(np.asarray(a), np.asarray(b)))

    def plan_product(self, m: int, k: int, n: int) -> Plan:
        """The path and threads of one (M, K) x (K, N) product."""
        path, threads = self._choose(m, k, n, serial=False)
        return Plan(path, threads, m * n, "gemm")

    def _choose(self, m: int, k: int, n: int, serial: bool) -> tuple[str, int]:
        fmas = m * n * k
        if not serial and fmas >= self._blas_from:
            return "blas", self.threads
        tile_m, tile_n, _ = self._tiles
        skinny = m <= self._skinny_up_to
        tasks = math.ceil(n / tile_n) * (1 if skinny else math.ceil(m / tile_m))
        threads = 1
        if not serial and tasks >= self._min_tasks:
            threads = min(tasks, parallel_threads(fmas, self._unit, self.threads, self.threads))
        if skinny:
            return "skinny", threads
        return ("blocked_packed" if k * n >= self._pack_from else "blocked"), threads

    def run(self, a, b, c=None) -> np.ndarray:
        return self._call(a, b, c, serial=False)

    def run_serial(self, a, b, c=None) -> np.ndarray:
        return self._call(a, b, c, serial=True)

    def _call(self, a, b, c, serial: bool) -> np.ndarray:
        a, b = operand(a, self._dtype, "A"), operand(b, self._dtype, "B")
        m, k, n = self._shapes(a, b)
        if c is not None:
            c = operand(c, self._dtype, "C")
            if not _broadcasts_to(c.shape, (m, n)):
                raise ValueError(f"Gemm: C of shape {c.shape} does not broadcast to {(m, n)}")
        if self._half:
            conversion = (lambda x: 1) if serial else (lambda x: parallel_threads(
                x.size, self._conversion_grain, self.threads, self.threads))
            a, b = half.to_float32(a, conversion(a)), half.to_float32(b, conversion(b))
            c = None if c is None else half.to_float32(c, conversion(c))
            out = self._compute_product(a, b, c, m, k, n, serial)
            return half.to_float16(out, conversion(out))
        return self._compute_product(a, b, c, m, k, n, serial)

    def _compute_product(self, a, b, c, m, k, n, serial) -> np.ndarray:
        dtype = self._compute
        if m == 0 or n == 0 or k == 0:
            out = np.zeros((m, n), dtype)
            if c is not None and self.beta != 0:
                out += dtype.type(self.beta) * c
            return out
        path, threads = self._choose(m, k, n, serial)
        if path == "blas":
            out = np.matmul(a.T if self.trans_a else a, b.T if self.trans_b else b)
            if self.alpha != 1.0:
                out *= dtype.type(self.alpha)
            if c is not None and self.beta != 0:
                out += dtype.type(self.beta) * c
            return out
        bias = _NO_BIAS[dtype] if c is None or self.beta == 0 else c.reshape(
            (1,) * (2 - c.ndim) + c.shape)
        out = np.empty((m, n), dtype)
        alpha, beta = dtype.type(self.alpha), dtype.type(self.beta)
        if path == "skinny":
            self._module.skinny(a, b, bias, out, alpha, beta, self.trans_a, self.trans_b,
                                self._tiles[1], threads)
        else:
            self._module.blocked(a, b, bias, out, alpha, beta, self.trans_a, self.trans_b,
                                 *self._tiles, path == "blocked_packed", threads)
        return out


def _broadcasts_to(shape: tuple[int, ...], target: tuple[int, int]) -> bool:
    """Unidirectional broadcasting, as ONNX Gemm allows for C."""
    if len(shape) > len(target):
        return False
    return all(d in (1, t) for d, t in zip(reversed(shape), reversed(target), strict=False))


class PreparedMatMul(PreparedKernel):
    """numpy.matmul semantics over a prepared Gemm with alpha 1 and no bias."""

    def __init__(self, gemm: PreparedGemm):
        self._gemm = gemm
        self.key, self.config, self.threads = gemm.key, gemm.config, gemm.threads

    def plan(self, a, b) -> Plan:
        """The plan of each product of the batch (they all have one shape)."""
        a_shape, b_shape = np.shape(a), np.shape(b)
        m = a_shape[-2] if len(a_shape) > 1 else 1
        n = b_shape[-1] if len(b_shape) > 1 else 1
        return self._gemm.plan_product(m, a_shape[-1], n)

    def run(self, a, b) -> np.ndarray:
        return self._call(a, b, self._gemm.run)

    def run_serial(self, a, b) -> np.ndarray:
        return self._call(a, b, self._gemm.run_serial)

    def _call(self, a, b, product) -> np.ndarray:
        a = operand(a, self._gemm._dtype, "A")
        b = operand(b, self._gemm._dtype, "B")
        if a.ndim == 0 or b.ndim == 0:
            raise ValueError("MatMul: operands must have at least one dimension")
        a2 = a[None, :] if a.ndim == 1 else a
        b2 = b[:, None] if b.ndim == 1 else b
        if a2.shape[-1] != b2.shape[-2]:
            raise ValueError(f"MatMul: shapes {a.shape} and {b.shape} do not agree on K")
        if a2.ndim == 2 and b2.ndim == 2:
            out = product(a2, b2)
        else:
            batch = np.broadcast_shapes(a2.shape[:-2], b2.shape[:-2])
            a3 = np.broadcast_to(a2, batch + a2.shape[-2:]).reshape(-1, *a2.shape[-2:])
            b3 = np.broadcast_to(b2, batch + b2.shape[-2:]).reshape(-1, *b2.shape[-2:])
            out = np.empty((a3.shape[0], a2.shape[-2], b2.shape[-1]), self._gemm._dtype)
            for index in range(a3.shape[0]):
                out[index] = product(a3[index], b3[index])
            out = out.reshape(batch + out.shape[-2:])
        if a.ndim == 1:
            out = out[..., 0, :]
        if b.ndim == 1:
            out = out[..., 0]
        return out
