"""Gemm (and the machinery MatMul shares, :mod:`.matmul`): typed configs, the path of each
product, and prepared runs.

Six algorithms compute ``alpha * op(A) @ op(B) + beta * C`` (see :mod:`.gemm_pythran`):

- ``blocked``: the compiled blocked kernel, B read in place; ``blocked_packed``: the same
  with each ``tile_k x NR`` block of a ``tile_k x tile_n`` panel of B first copied into
  contiguous memory, chosen when one panel holds at least
  ``algorithm.pack_b_minimum_elements`` elements, and always with transB;
- ``skinny``: the compiled kernel for at most ``algorithm.skinny_m_limit`` rows, which
  streams B once, for a B of ``algorithm.skinny_minimum_b_elements`` elements or more;
- ``row``: the compiled kernel for at most ``algorithm.row_m_limit`` rows (at most
  ``STRIP_ROWS``) of a B the skinny path leaves, summed straight into the output on one
  thread (a batch of one through an MLP's layers);
- ``column``: the compiled kernel for at most ``algorithm.column_n_limit`` columns of op(B)
  (a classifier's scores, the last layer of a regressor), which computes the chains of
  many rows side by side;
- ``panel``: the compiled kernel for an op(B) of at most ``algorithm.panel_n_limit``
  columns (at most ``NR``) and ``algorithm.tile_k`` rows (one panel of the blocked path: a
  hidden layer of an MLP), copied once at a width the micro-kernel runs fast;
- ``blas``: ``numpy.matmul`` (the BLAS numpy is linked with) from
  ``algorithm.blas_minimum_fmas`` multiply-adds (``M * N * K``) on, and for skinny
  products from ``algorithm.skinny_blas_minimum_fmas`` on (the skinny path holds out
  against BLAS far longer than the blocked one, so one threshold cannot serve both), and
  for one-row products from ``algorithm.vector_blas_minimum_fmas`` on (BLAS runs those as
  matrix-vector products, with kernels of their own), and for products of the column path's
  few columns from ``algorithm.column_blas_minimum_fmas`` on (the column path transposes
  each block of rows of A, which costs more than BLAS's whole product once there are a few
  hundred rows), and for products the panel path takes from
  ``algorithm.panel_blas_minimum_fmas`` on (where BLAS overtakes it depends on the
  instruction set far more than the blocked path's crossover does).

Those are the algorithm decisions. The parallel decision is separate: the compiled paths
cut the output into tasks (``tile_m x tile_n`` tiles, halved while there are fewer than
threads; column strips of ``tile_n`` for skinny, halved alike) and run
``min(threads, tasks, M * N * K // parallel.fmas_per_work_unit)`` threads
(``parallel.skinny_fmas_per_work_unit`` on the skinny path, whose multiply-adds each read
an element of B that a square product reuses from cache) when there are at least
``parallel.minimum_tasks`` tasks, else one (the row path: always one). The BLAS path
runs on the BLAS library's own threads, at most the prepared kernel's: a session given N
threads never runs more, so the BLAS library's count is lowered around a call when it is
higher (calibration measures BLAS under the same limit).

Every compiled path computes each output element as one sum in ascending k order, so
blocked, packed, skinny, row, column, panel, serial and parallel runs give identical bits;
``run_serial`` (the calibration reference) is the blocked path on one thread. The BLAS
path sums in another order. FLOAT16 and BFLOAT16 are widened to float32, computed and
narrowed back, the conversions running on every thread from
``conversion.parallel_minimum_elements`` elements on.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from .._support.aligned import aligned_empty
from ..tuning.dtypes import NUMPY_DTYPES
from ..tuning.schema import element_type_name, element_type_number, tunable
from . import blas, half, outputs
from .base import Kernel, Plan, PreparedKernel, operand, with_defaults
from .gemm_pythran import (
    BLAS_PATH,
    BLOCKED_PATH,
    COLUMN_PATH,
    KU,
    MR,
    NR,
    PACKED_PATH,
    PANEL_PATH,
    ROW_PATH,
    SKINNY_PATH,
    STRIP_ROWS,
    T_BLAS,
    T_COLUMN_BLAS,
    T_COLUMN_LIMIT,
    T_FIELDS,
    T_FMAS_PER_UNIT,
    T_MINIMUM_TASKS,
    T_PACK_MINIMUM,
    T_PANEL_BLAS,
    T_PANEL_LIMIT,
    T_RELU,
    T_ROW_LIMIT,
    T_SKINNY_BLAS,
    T_SKINNY_FMAS_PER_UNIT,
    T_SKINNY_LIMIT,
    T_SKINNY_MINIMUM_B,
    T_THREADS,
    T_TILE_K,
    T_TILE_M,
    T_TILE_N,
    T_TRANS_A,
    T_TRANS_B,
    T_VECTOR_BLAS,
)
from .gemm_run import fast_run
from .half_gemm import PreparedHalfGemm
from .panels import Panels, takes_panels
from .strips import Strips, takes_strips
from .variants import load_module
from .workers import Workers

FLOAT = element_type_number("FLOAT")
DOUBLE = element_type_number("DOUBLE")
#: ISA variants whose compiled products on a session's threads beat BLAS on the calling
#: thread alone: on the OpenMP pool (``pool="openmp"``), their products of several rows
#: never take BLAS. The baseline variant's SSE2 products are not among them: BLAS runs the
#: processor's own kernels (docs/kernels.md, "One pool per run").
COMPILED_POOL_VARIANTS = frozenset({"x86_64_v3", "x86_64_v4"})
#: the attributes a session gives a product (:func:`session_attributes`)
SESSION_ATTRIBUTES = ("pool", "portable_defaults")
#: from this many tasks a thread, a blocked product of several threads runs on the workers
#: (:mod:`.workers`), which tie with OpenMP regions quietly and hold up beside busy
#: processes, where a region waits for its slowest thread (docs/kernels.md, "Workers");
#: below, waking them and packing B apart cost more of a product
WORKER_TASKS_PER_THREAD = 8
#: chunks a thread of such a product: the threads claim them one at a time, so a thread
#: kept off its CPU leaves the rest of its share to the others
WORKER_CHUNKS_PER_THREAD = 4

#: paths of :attr:`Plan.path`
BLAS, SKINNY, BLOCKED, BLOCKED_PACKED, COLUMN, PANEL, ROW = (
    "blas", "skinny", "blocked", "blocked_packed", "column", "panel", "row")
#: the path of each code the compiled ``decide`` returns
PATH_NAMES = {BLAS_PATH: BLAS, SKINNY_PATH: SKINNY, BLOCKED_PATH: BLOCKED,
              PACKED_PATH: BLOCKED_PACKED, COLUMN_PATH: COLUMN, PANEL_PATH: PANEL,
              ROW_PATH: ROW}
#: thresholds go to the compiled code as int64; a larger one is never reached anyway
INT64_MAX = 2**63 - 1


@dataclass(frozen=True)
class GemmConfig:
    """Tiles and algorithm thresholds, then the parallel task grid (FLOAT and DOUBLE)."""

    tile_m: int = tunable("algorithm.tile_m", 64, minimum=1,
                          doc=f"rows of a task of the blocked path, a multiple of {MR}")
    tile_n: int = tunable("algorithm.tile_n", 256, minimum=1,
                          doc=f"columns of a task (blocked and skinny), a multiple of {NR}")
    tile_k: int = tunable("algorithm.tile_k", 256, minimum=1,
                          doc=f"depth of one step over K of the blocked path, a multiple of "
                              f"{KU}")
    pack_b_minimum_elements: int = tunable(
        "algorithm.pack_b_minimum_elements", 16384, minimum=0,
        doc="elements of one min(K, tile_k) x min(N, tile_n) panel of B from which B is "
            "copied into contiguous panels first (transB always packs)")
    skinny_m_limit: int = tunable(
        "algorithm.skinny_m_limit", 8, minimum=0,
        doc="products of at most this many rows take the skinny path (0: never)")
    skinny_minimum_b_elements: int = tunable(
        "algorithm.skinny_minimum_b_elements", 16_384, minimum=0,
        doc="elements of B (K * N) from which a product of at most algorithm.skinny_m_limit "
            "rows takes the skinny path, which pays by streaming B once: a B that stays in "
            "cache goes faster through the blocked path (0: any B)")
    row_m_limit: int = tunable(
        "algorithm.row_m_limit", STRIP_ROWS, minimum=0, maximum=STRIP_ROWS,
        doc="products of at most this many rows whose B has fewer than "
            "algorithm.skinny_minimum_b_elements elements take the row path (0: never)")
    column_n_limit: int = tunable(
        "algorithm.column_n_limit", 8, minimum=0,
        doc="products of at most this many columns of op(B) take the column path (0: never)")
    panel_n_limit: int = tunable(
        "algorithm.panel_n_limit", NR // 2, minimum=0, maximum=NR,
        doc=f"products of at most this many columns of op(B) (at most {NR}) and at most "
            f"algorithm.tile_k rows of it take the panel path (0: never)")
    blas_minimum_fmas: int = tunable(
        "algorithm.blas_minimum_fmas", 2_097_152, minimum=0,
        doc="M * N * K from which numpy.matmul (BLAS) computes the product")
    packed_blas_minimum_fmas: int = tunable(
        "algorithm.packed_blas_minimum_fmas", 2_097_152, minimum=0,
        doc="M * N * K from which a product on a constant B's panels (a session's weight, "
            "packed once: the packed path without its copy) is computed by numpy.matmul "
            "(BLAS) instead; algorithm.blas_minimum_fmas decides the products of any other B")
    skinny_blas_minimum_fmas: int = tunable(
        "algorithm.skinny_blas_minimum_fmas", 2_097_152, minimum=0,
        doc="M * N * K from which a skinny product of 2 rows or more "
            "(M <= algorithm.skinny_m_limit) is computed by numpy.matmul (BLAS) instead of "
            "the skinny path")
    vector_blas_minimum_fmas: int = tunable(
        "algorithm.vector_blas_minimum_fmas", 524_288, minimum=0,
        doc="M * N * K from which a one-row product is computed by numpy.matmul (BLAS), "
            "which runs it as a matrix-vector product")
    column_blas_minimum_fmas: int = tunable(
        "algorithm.column_blas_minimum_fmas", 16_384, minimum=0,
        doc="M * N * K from which a product of at most algorithm.column_n_limit columns of "
            "op(B) is computed by numpy.matmul (BLAS) instead of the column path")
    panel_blas_minimum_fmas: int = tunable(
        "algorithm.panel_blas_minimum_fmas", 2_097_152, minimum=0,
        doc="M * N * K from which a product of at most algorithm.panel_n_limit columns of "
            "op(B) and at most algorithm.tile_k rows of it is computed by numpy.matmul "
            "(BLAS) instead of the panel path")
    fmas_per_work_unit: int = tunable(
        "parallel.fmas_per_work_unit", 524_288, minimum=1,
        doc="multiply-adds (M * N * K) each thread must have at least: a product runs on at "
            "most M * N * K // this many threads, so that each thread's work outweighs an "
            "OpenMP fork and join")
    skinny_fmas_per_work_unit: int = tunable(
        "parallel.skinny_fmas_per_work_unit", 131_072, minimum=1,
        doc="parallel.fmas_per_work_unit of the skinny path, which streams B and so gains "
            "from a second thread at sizes where a square product does not")
    minimum_tasks: int = tunable(
        "parallel.minimum_tasks", 2, minimum=1,
        doc="tasks (output tiles) below which a compiled product runs serially")

    def consistency(self):
        for name, value, unit in (("algorithm.tile_m", self.tile_m, MR),
                                  ("algorithm.tile_n", self.tile_n, NR),
                                  ("algorithm.tile_k", self.tile_k, KU)):
            if value % unit:
                yield (name, f"{value} is not a multiple of {unit}, the micro-kernel's "
                             f"{'rows' if unit == MR else 'columns' if unit == NR else 'depth'}")
        if self.skinny_m_limit > self.tile_m:
            yield ("algorithm.skinny_m_limit",
                   f"{self.skinny_m_limit} exceeds algorithm.tile_m {self.tile_m}: a product "
                   f"of more rows than one task holds is not skinny")


@dataclass(frozen=True)
class HalfGemmConfig(GemmConfig):
    """FLOAT16 and BFLOAT16: computed in float32; the widening and narrowing have their own
    threshold."""

    conversion_minimum_elements: int = tunable(
        "conversion.parallel_minimum_elements", 32_768, minimum=1,
        doc="elements of an operand or result from which its conversion runs on every thread "
            "(as the elementwise kernels' 16-bit float default)")


#: defaults of the variants whose compiled paths meet BLAS (built for every instruction set,
#: whatever the variant) at other sizes: baseline's, without FMA or wide vectors, lose
#: one-row products to BLAS's matrix-vector kernel from 512**2 multiply-adds on one thread
#: and products of several rows, on every path, to BLAS's AVX kernels from 2**16
#: (``machine.blas.ASSUMED_FEATURES``; docs/kernels.md, "The BLAS path");
#: the AVX variants' packed path on a constant B's panels beats BLAS, which packs B at every
#: call, up to 2**26 multiply-adds on one and two threads (docs/kernels.md, "A product in a
#: model"); ``x86_64_v3``'s blocked path loses to BLAS's AVX2 kernels between 64**3 and
#: 72**3 and its panel path from 2**17; ``x86_64_v4``'s panel path beat BLAS up to 2**25,
#: the largest measured (docs/kernels.md, "The BLAS path", "The panel path")
VARIANT_DEFAULTS: Mapping[str, Mapping[str, int]] = {
    "baseline": {"vector_blas_minimum_fmas": 262_144, "panel_blas_minimum_fmas": 65_536,
                 "blas_minimum_fmas": 65_536, "packed_blas_minimum_fmas": 65_536},
    "x86_64_v3": {"packed_blas_minimum_fmas": 67_108_864, "panel_blas_minimum_fmas": 131_072,
                  "blas_minimum_fmas": 68 ** 3},
    "x86_64_v4": {"packed_blas_minimum_fmas": 67_108_864,
                  "panel_blas_minimum_fmas": 67_108_864},
}


@functools.cache
def _variant_config(config_type: type, implementation: str) -> type:
    defaults = VARIANT_DEFAULTS.get(implementation)
    if not defaults:
        return config_type
    return with_defaults(config_type, f"_{implementation}", defaults,
                         f"{config_type.__name__}, {implementation}'s defaults")


class Gemm(Kernel):
    """ONNX Gemm: ``alpha * op(A) @ op(B) + beta * C``, C unidirectionally broadcast to (M, N).

    Attributes as in ONNX: ``alpha`` and ``beta`` (1.0), ``transA`` and ``transB`` (0).
    ``activation="Relu"`` (FLOAT and DOUBLE) prepares the Gemm followed by a Relu, which a
    session fuses (:mod:`kerneltune.runtime.fusion`): the same thresholds, one call.
    ``pool="openmp"`` keeps products of several rows off BLAS's threads and the kernel's
    workers, for a session whose other kernels run on the OpenMP pool (one pool per run, see
    :class:`~kerneltune.runtime.RuntimeSession`): BLAS computes them on the calling thread
    alone, and on the variants of ``COMPILED_POOL_VARIANTS`` they take the compiled paths,
    whose regions run on that pool, at every size. ``portable_defaults=True`` says the
    values are the portable defaults, whose BLAS crossovers assume a BLAS with kernels for the
    processor: see :meth:`PreparedGemm.check_blas`.
    """

    name = "Gemm"
    element_types = (FLOAT, DOUBLE, *half.FORMATS)
    uses_blas = True

    def __init__(self, implementation: str):
        super().__init__(implementation)
        #: the threads that share large blocked products with the caller (:mod:`.workers`)
        self._workers = Workers()

    def prepare(self, element_type: object, config: Any = None, threads: int | None = None,
                **attributes: Any) -> PreparedKernel:
        """As :meth:`Kernel.prepare`; without ``config`` the values are the portable
        defaults, as a session's from its defaults tier (``portable_defaults``)."""
        if config is None:
            attributes.setdefault("portable_defaults", True)
        return super().prepare(element_type, config, threads, **attributes)

    def config_type(self, element_type: int) -> type:
        return _variant_config(HalfGemmConfig if element_type in half.FORMATS else GemmConfig,
                               self.implementation)

    def _prepare(self, element_type, config, threads, attributes) -> PreparedKernel:
        unknown = sorted(set(attributes) - {"alpha", "beta", "transA", "transB", "activation",
                                            *SESSION_ATTRIBUTES})
        if unknown:
            raise TypeError(f"{self.name}: unknown attributes {unknown}; expected alpha, beta, "
                            f"transA, transB (and activation, from a session's fusion, pool "
                            f"and portable_defaults)")
        alpha, beta = (_number(attributes.get(name, 1.0), name) for name in ("alpha", "beta"))
        trans_a, trans_b = (_flag(attributes.get(name, 0), name) for name in ("transA", "transB"))
        return self._bind(element_type, config, threads, alpha, beta, trans_a, trans_b,
                          relu_attribute(attributes.get("activation"), element_type),
                          *session_attributes(attributes))

    def _bind(self, element_type, config, threads, alpha, beta, trans_a, trans_b, relu=False,
              openmp_pool=False, portable_defaults=False):
        key = self.tuning_key(element_type)
        compute = half.compute_type(element_type)
        prepared = PreparedGemm(key, config, threads, NUMPY_DTYPES[compute],
                                load_module("gemm", self.implementation), alpha,
                                beta, trans_a, trans_b, relu, openmp_pool,
                                openmp_pool and self.implementation in COMPILED_POOL_VARIANTS,
                                portable_defaults,
                                load_module("gemm_serial", self.implementation),
                                None if openmp_pool else self._workers)
        if element_type in half.FORMATS:
            return PreparedHalfGemm(prepared, half.FORMATS[element_type],
                                    config.conversion_minimum_elements)
        return prepared


def _thresholds(fields: Mapping[int, object]) -> np.ndarray:
    """The compiled ``decide``'s read-only array of ``fields`` (index: value)."""
    thresholds = np.array([min(int(fields[i]), INT64_MAX) for i in range(T_FIELDS)], np.int64)
    thresholds.flags.writeable = False
    return thresholds


def relu_attribute(activation, element_type: int) -> bool:
    """Whether a prepared product ends with a Relu (``activation``: None or ``"Relu"``)."""
    if activation is None:
        return False
    if activation != "Relu" or element_type in half.FORMATS:
        raise ValueError(f"a product's activation: 'Relu' on FLOAT and DOUBLE only, got "
                         f"{activation!r} on {element_type_name(element_type)}")
    return True


def session_attributes(attributes: Mapping[str, object]) -> tuple[bool, bool]:
    """What a session tells a product besides the model's attributes: whether it keeps to
    the OpenMP pool (``pool``: None or ``"openmp"``), and whether its values are the portable
    defaults (``portable_defaults``: None or True)."""
    pool, defaults = attributes.get("pool"), attributes.get("portable_defaults")
    if pool not in (None, "openmp"):
        raise ValueError(f"a product's pool: 'openmp' or none, got {pool!r}")
    if defaults not in (None, True):
        raise ValueError(f"a product's portable_defaults: True or none, got {defaults!r}")
    return pool == "openmp", defaults is True


def _number(value, name: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float | np.floating | np.integer):
        raise TypeError(f"Gemm: attribute {name} must be a number, got {value!r}")
    return float(value)


def _flag(value, name: str) -> bool:
    if value not in (0, 1):  # True and False compare equal to 1 and 0
        raise ValueError(f"Gemm: attribute {name} must be 0 or 1, got {value!r}")
    return bool(value)


class PreparedGemm(PreparedKernel):
    """One element type, config, thread budget and set of attributes, as plain attributes.

    The thresholds travel to the compiled code in one int64 array (``t`` of
    :mod:`.gemm_pythran`), whose ``decide`` is the only place a path is chosen:
    plans, runs and MatMul all ask it.
    """

    uses_blas = True

    def __init__(self, key, config, threads, dtype, module, alpha, beta, trans_a, trans_b,
                 relu, openmp_pool, compiled_rows, portable_defaults, serial, workers):
        self.key, self.config, self.threads = key, config, threads
        self.alpha, self.beta, self.trans_a, self.trans_b = alpha, beta, trans_a, trans_b
        self.dtype = dtype
        # one thread: the compiled entries and the panel path's export of the build without
        # OpenMP, the other exports of the OpenMP build (which enter no region for one
        # thread), the faster of the two builds for each (docs/kernels.md, "The one-thread
        # build"); the same bits
        one_thread = serial if threads == 1 else module
        self._blocked, self._skinny, self._column = module.blocked, module.skinny, module.column
        self._panel, self._row = one_thread.panel, module.row
        self._gemm = one_thread.gemm
        #: the small products' entry of the build without OpenMP, for those of fewer
        #: multiply-adds than ``_one_thread_below``, which ``decide`` gives one thread: the
        #: same decision and bits as ``_gemm``'s
        self._gemm_one_thread = serial.gemm
        #: the same entries for a B packed into strips (:class:`.strips.Strips`)
        self._strips_entries = (serial.gemm_strips, module.gemm_strips)
        self.pack_strips = module.pack_strips
        #: the blocked path's tasks on a constant B's panels (:mod:`.panels`)
        self._blocked_panels = module.blocked_panels
        self._panel_grid = module.blocked_layout
        self.pack_blocks = module.pack_blocks
        self._blocked_tasks = module.blocked_tasks
        self._one_thread_below = 2 * min(config.fmas_per_work_unit,
                                         config.skinny_fmas_per_work_unit)
        #: the workers that run a large blocked product's panels and tasks (:mod:`.workers`);
        #: None on one thread
        self._workers = workers if threads > 1 else None
        #: tasks a product's grid needs for the workers to run it
        self.worker_tasks = WORKER_TASKS_PER_THREAD * threads
        self._decide_compiled = module.decide
        #: Relu on the output, fused: each path applies it to each block of sums it has just
        #: stored, BLAS's product in the call that adds its bias (the same bits)
        self._relu, self._finish = relu, module.finish
        self._alpha, self._beta = dtype.type(alpha), dtype.type(beta)
        self._scale = alpha != 1.0
        self._use_bias = beta != 0.0  # as ONNX's reference: beta == 0 ignores C entirely
        self.no_bias = np.zeros((0, 0), dtype)
        #: BLAS's threads for a product of several rows: one, the calling thread, on the
        #: OpenMP pool (Gemm's ``pool="openmp"``), where ``compiled_rows`` keeps them off
        #: BLAS but for the column path's (which runs on one thread up to sizes where BLAS
        #: on one is several times faster); a one-row product's steps around it run
        #: serially, so it keeps ``threads``
        self.rows_blas_threads = 1 if openmp_pool else threads
        fields = {T_TRANS_A: trans_a, T_TRANS_B: trans_b, T_SKINNY_LIMIT: config.skinny_m_limit,
                  T_VECTOR_BLAS: config.vector_blas_minimum_fmas,
                  T_SKINNY_BLAS: INT64_MAX if compiled_rows else config.skinny_blas_minimum_fmas,
                  T_BLAS: INT64_MAX if compiled_rows else config.blas_minimum_fmas,
                  T_COLUMN_BLAS: config.column_blas_minimum_fmas,
                  T_PANEL_BLAS: INT64_MAX if compiled_rows else config.panel_blas_minimum_fmas,
                  T_TILE_M: config.tile_m, T_TILE_N: config.tile_n, T_TILE_K: config.tile_k,
                  T_PACK_MINIMUM: config.pack_b_minimum_elements,
                  T_MINIMUM_TASKS: config.minimum_tasks,
                  T_FMAS_PER_UNIT: config.fmas_per_work_unit, T_THREADS: threads,
                  T_SKINNY_MINIMUM_B: config.skinny_minimum_b_elements,
                  T_SKINNY_FMAS_PER_UNIT: config.skinny_fmas_per_work_unit,
                  T_COLUMN_LIMIT: config.column_n_limit, T_PANEL_LIMIT: config.panel_n_limit,
                  T_ROW_LIMIT: config.row_m_limit,
                  T_RELU: relu}
        self._thresholds = _thresholds(fields)
        #: the same for a product on a constant B's panels (:meth:`constant_run`), which
        #: meets BLAS at its own size
        self._packed_thresholds = _thresholds({
            **fields,
            T_BLAS: INT64_MAX if compiled_rows else config.packed_blas_minimum_fmas})
        #: whether the BLAS crossovers are portable defaults not yet checked against
        #: numpy's BLAS (:meth:`check_blas`)
        self.blas_unchecked = portable_defaults and not compiled_rows
        #: the constant B bound to this kernel's panels, if any (:meth:`constant_run`)
        self._panels_b = None
        self._form = ("T" if trans_a else "N") + ("T" if trans_b else "N")
        self._run = self.run = fast_run(self, self.run_checked)

    # -- shapes -------------------------------------------------------------------------------

    def _dimensions(self, a_shape: tuple, b_shape: tuple) -> tuple[int, int, int]:
        """(M, K, N) of op(A) @ op(B), or a ValueError naming both operands and shapes."""
        if len(a_shape) != 2 or len(b_shape) != 2:
            raise ValueError(f"Gemm: A and B must be 2-D, got A of shape {a_shape} and B of "
                             f"shape {b_shape}")
        m, k = (a_shape[1], a_shape[0]) if self.trans_a else a_shape
        kb, n = (b_shape[1], b_shape[0]) if self.trans_b else b_shape
        if k != kb:
            raise ValueError(
                f"Gemm: A of shape {a_shape} (transA={int(self.trans_a)}) is {m} x {k} but B of "
                f"shape {b_shape} (transB={int(self.trans_b)}) is {kb} x {n}: K differs")
        return m, k, n

    def _matrices(self, a, b) -> tuple[np.ndarray, np.ndarray, int, int, int]:
        dtype = self.dtype
        if type(a) is not np.ndarray or a.dtype is not dtype or not a.flags.c_contiguous:
            a = operand(a, dtype, "A")
        if type(b) is not np.ndarray or b.dtype is not dtype or not b.flags.c_contiguous:
            b = operand(b, dtype, "B")
        return (a, b, *self._dimensions(a.shape, b.shape))

    @staticmethod
    def _check_bias(shape: tuple, m: int, n: int) -> None:
        if len(shape) > 2 or any(d not in (1, t) for d, t in zip(shape[::-1], (n, m),
                                                                 strict=False)):
            raise ValueError(f"Gemm: C of shape {shape} is not unidirectionally broadcastable "
                             f"to (M, N) = {(m, n)}")

    def _bias(self, c, m: int, n: int) -> np.ndarray:
        """C as a 2-D (1 or M, 1 or N) array; the empty bias without C or with beta 0."""
        if c is None:
            return self.no_bias
        c = operand(c, self.dtype, "C")
        self._check_bias(c.shape, m, n)
        if not self._use_bias:
            return self.no_bias
        return c.reshape((1,) * (2 - c.ndim) + c.shape) if c.ndim < 2 else c

    # -- decisions ----------------------------------------------------------------------------

    def decide(self, m: int, k: int, n: int, serial: bool = False,
               on_panels: bool = False) -> tuple[str, int]:
        """The path and thread count of one (M, K) x (K, N) product (``serial``: of
        ``run_serial``, the blocked path on one thread; ``on_panels``: of a constant B's
        panels, see :meth:`constant_run`).

        The BLAS path's threads are the BLAS library's business: 0 here.
        """
        arguments = (int(m), int(k), int(n), bool(serial),
                     self._packed_thresholds if on_panels else self._thresholds)
        code, threads = self._decide_compiled(*arguments)
        if code == BLAS_PATH and self.blas_unchecked and self.check_blas():
            code, threads = self._decide_compiled(*arguments)
        return PATH_NAMES[code], threads

    def check_blas(self) -> bool:
        """At the first product past a BLAS crossover of the portable defaults: whether numpy's
        BLAS runs kernels for fewer instructions than this variant's defaults assume
        (OPENBLAS_CORETYPE=Haswell on an AVX-512 processor, an OpenBLAS older than the
        processor, SSE kernels under the baseline), and if so the products of several rows
        take the compiled paths from then on. The defaults assume kernels for the processor;
        a profile's crossovers were measured (docs/kernels.md, "A BLAS behind the
        processor"). The thresholds change in place, for every run that holds them."""
        self.blas_unchecked = False
        if blas.narrower_than(self.key.implementation) is None:
            return False
        for thresholds in (self._thresholds, self._packed_thresholds):
            thresholds.flags.writeable = True
            thresholds[[T_BLAS, T_SKINNY_BLAS, T_PANEL_BLAS]] = INT64_MAX
            thresholds.flags.writeable = False
        return True

    def plan(self, a, b, c=None) -> Plan:
        """The plan of a run of these operands: of the bound run where ``b`` is the
        constant B bound to panels (:meth:`constant_run`)."""
        m, k, n = self._dimensions(np.shape(a), np.shape(b))
        if c is not None:
            self._check_bias(np.shape(c), m, n)
        return self.plan_product(m, k, n, on_panels=self.on_panels(m, b))

    def on_panels(self, rows: int, b) -> bool:
        """Whether a bound run's product of ``rows`` rows of ``b`` runs on B's panels: ``b``
        is the constant B bound to them, and the rows are more than the skinny path takes
        (as :func:`.gemm_run.fast_run` decides)."""
        return b is self._panels_b and rows > self.config.skinny_m_limit

    def plan_product(self, m: int, k: int, n: int, serial: bool = False,
                     on_panels: bool = False) -> Plan:
        """The plan of one product of these dimensions (``serial``: of ``run_serial``;
        ``on_panels``: of a constant B's panels).

        On the BLAS path, ``threads`` is the BLAS library's own thread count.
        """
        path, threads = self.decide(m, k, n, serial, on_panels)
        if path == BLAS:
            threads = min(blas.library_threads(), self.blas_threads(m))
        return Plan(path, threads, m * n, self._form)

    def blas_threads(self, rows: int) -> int:
        """BLAS's threads for a product of ``rows`` rows."""
        return self.threads if rows == 1 else self.rows_blas_threads

    # -- runs ---------------------------------------------------------------------------------

    def run(self, a, b, c=None) -> np.ndarray:
        """``alpha * op(A) @ op(B) + beta * C`` in a fresh array, on the path of :meth:`plan`.

        Every instance replaces this method by the equivalent closure that
        :func:`.gemm_run.fast_run` builds: small products cost mostly the Python around the
        compiled call.
        """
        return self._run(a, b, c)

    def run_serial(self, a, b, c=None) -> np.ndarray:
        return self.run_checked(a, b, c, serial=True)

    def run_checked(self, a, b, c, serial: bool = False) -> np.ndarray:
        """The run with every operand normalised or refused with a clear error."""
        a, b, m, k, n = self._matrices(a, b)
        bias = self._bias(c, m, n)
        path, threads = self.decide(m, k, n, serial)
        if path == BLAS:
            return self._blas(a, b, bias)
        out = outputs.empty((m, n), self.dtype)
        if m * n * k:
            self.run_compiled(a, b, bias, out, path, threads)
        else:
            self._no_products(out, bias)
        return out

    def for_constant(self, index: int, value) -> Callable | None:
        """``run`` for a B that is always ``value`` (:meth:`constant_run`)."""
        return self.constant_run(index, value, self.run_checked)

    def constant_run(self, index: int, value, checked: Callable) -> Callable | None:
        """:func:`.gemm_run.fast_run` for a B that is always ``value``, ``checked`` its
        checked run: its products of one or two rows on the skinny path read its strips
        (:mod:`.strips`), those of the packed path its panels (:mod:`.panels`), each packed
        once. None where ``value`` is a B worth neither."""
        strips, panels = self.strips_of(index, value), self.panels_of(index, value)
        if strips is None and panels is None:
            return None
        if panels is not None:
            self._panels_b = value
        return fast_run(self, checked, strips, panels)

    def strips_of(self, index: int, value) -> Strips | None:
        """The strips of ``value`` as input ``index`` where it is a B worth them, else
        None (the check and the binding of :meth:`for_constant`, MatMul's too)."""
        if index != 1 or not takes_strips(value, self.dtype, self.trans_b, self.config):
            return None
        return Strips(value, self._strips_entries, self.pack_strips, self.trans_b,
                      (self._alpha, self._beta, self._thresholds))

    def panels_of(self, index: int, value) -> Panels | None:
        """The panels of ``value`` as input ``index`` where it is a B worth them, else None."""
        if index != 1 or not takes_panels(value, self.dtype, self.config):
            return None
        return Panels(value, self.trans_b, self.config, self._panel_grid, self.pack_blocks)

    def run_on_panels(self, a, panels: Panels, bias, out, threads: int) -> None:
        """A product of the packed path into ``out`` on the panels of its constant B: on the
        workers where its grid has tasks enough for them, else in one compiled call."""
        tile_m, tile_n, tasks, packed = panels.grid(out.shape[0], threads)
        if self._on_workers(tasks, threads):
            self._tasks_on_workers(a, packed, packed, bias, out, True, tile_m, tile_n, tasks,
                                   threads)
        else:
            self._blocked_panels(a, packed, bias, out, self._alpha, self._beta, self._relu,
                                 self.trans_a, tile_m, tile_n, self.config.tile_k, threads)

    def run_decided(self, a, b, bias, out, code: int, threads: int,
                    panels: Panels | None = None) -> None:
        """One product into ``out`` on the compiled path of ``code`` (``decide``'s), on
        ``panels`` where they are B's and the path is the packed one."""
        if panels is not None and code == PACKED_PATH:
            self.run_on_panels(a, panels, bias, out, threads)
        else:
            self.run_compiled(a, b, bias, out, PATH_NAMES[code], threads)

    def run_compiled(self, a, b, bias, out, path: str, threads: int) -> None:
        """One product into ``out`` (C-contiguous), on a compiled path."""
        scalars = (self._alpha, self._beta, self._relu, self.trans_a)
        if path == SKINNY:
            self._skinny(a, b, bias, out, *scalars, self.trans_b, self.config.tile_n, threads)
        elif path == COLUMN:
            self._column(a, b, bias, out, *scalars, self.trans_b, threads)
        elif path == ROW:
            self._row(a, b, bias, out, *scalars, self.trans_b)
        elif path == PANEL:
            self._panel(a, b, bias, out, *scalars, self.trans_b, threads)
        elif not (self._workers is not None and threads > 1
                  and self._run_on_workers(a, b, bias, out, path == BLOCKED_PACKED, threads)):
            self._blocked(a, b, bias, out, *scalars, self.trans_b, self.config.tile_m,
                          self.config.tile_n, self.config.tile_k, path == BLOCKED_PACKED,
                          threads)

    def _run_on_workers(self, a, b, bias, out, pack: bool, threads: int) -> bool:
        """The blocked path's product on the calling thread and workers, each running chunks
        of its panels, then of its tasks; False, and nothing done, when its grid has fewer
        than ``WORKER_TASKS_PER_THREAD`` tasks a thread."""
        config, trans_a, trans_b = self.config, self.trans_a, self.trans_b
        m, n = out.shape
        kk = a.shape[0] if trans_a else a.shape[1]
        pack = pack or trans_b
        tile_m, tile_n, blocks, tasks, rows, width = self._panel_grid(
            m, n, kk, config.tile_m, config.tile_n, config.tile_k, pack, threads)
        if not self._on_workers(tasks, threads):
            return False
        packed = aligned_empty((rows, width), self.dtype)
        tile_k, pack_blocks = config.tile_k, self.pack_blocks
        chunks = min(blocks, WORKER_CHUNKS_PER_THREAD * threads)  # none when B is read in place
        self._workers.run(chunks, lambda i: pack_blocks(
            b, packed, trans_b, kk, n, tile_n, tile_k, i * blocks // chunks,
            (i + 1) * blocks // chunks), threads)
        self._tasks_on_workers(a, b, packed, bias, out, pack, tile_m, tile_n, tasks, threads)
        return True

    def _on_workers(self, tasks: int, threads: int) -> bool:
        """Whether a blocked product of ``tasks`` tasks on ``threads`` runs on the workers."""
        return (self._workers is not None and threads > 1
                and tasks >= WORKER_TASKS_PER_THREAD * threads)

    def _tasks_on_workers(self, a, b, packed, bias, out, pack: bool, tile_m: int, tile_n: int,
                          tasks: int, threads: int) -> None:
        """The blocked path's ``tasks`` in chunks on the calling thread and workers."""
        alpha, beta, relu, trans_a = self._alpha, self._beta, self._relu, self.trans_a
        blocked_tasks, tile_k = self._blocked_tasks, self.config.tile_k
        chunks = WORKER_CHUNKS_PER_THREAD * threads
        self._workers.run(chunks, lambda i: blocked_tasks(
            a, b, packed, bias, out, alpha, beta, relu, trans_a, pack, tile_m, tile_n, tile_k,
            i * tasks // chunks, (i + 1) * tasks // chunks), threads)

    def _no_products(self, out: np.ndarray, bias: np.ndarray) -> None:
        """M, N or K is 0: the sums are empty, so the result is beta * C alone (and its Relu)."""
        out[...] = 0
        if bias.size and out.size:
            out += self._beta * bias
            if self._relu:
                self._finish(out, self.no_bias, self.dtype.type(1), self._beta, True)

    def _blas(self, a, b, bias) -> np.ndarray:
        a = a.T if self.trans_a else a
        out = blas.matmul(a, b.T if self.trans_b else b, self.blas_threads(a.shape[0]))
        if self._scale or bias.size or self._relu:
            if out.shape[1] == 1:  # one column as one row: the compiled loops run along rows
                self._finish(out.reshape(1, -1), bias.reshape(1, -1) if bias.size else bias,
                             self._alpha, self._beta, self._relu)
            else:
                self._finish(out, bias, self._alpha, self._beta, self._relu)
        return out
