"""RuntimeSession: an ONNX model run on the library's kernels with frozen tuning.

Construction captures one registry generation, resolves every kernel's values
for the session's processor and thread count, and prepares each node with its
typed config. ``run`` then only moves arrays between prepared kernels: no
registry, no processor detection, no parameter names, no files, no locks.
"""

from __future__ import annotations

import collections
import functools
import os
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np
import onnx

from ..errors import KernelTuningError, UnknownKernelError
from ..kernels import PreparedKernel, blas, half, library
from ..machine.detect import current_execution
from ..machine.selectors import Tier
from ..machine.threads import thread_count
from ..tuning.dtypes import held_dtype
from ..tuning.registry import Resolution, TuningSnapshot, default_registry
from ..tuning.schema import KernelTuningKey
from . import selections, views
from .contention import Contention, default_contention
from .fusion import fuse
from .layout import lay_out_weights
from .model import Model, Node, Signature, prepare_model, read_model, value_reads
from .program import PerWork, program
from .views import View

ModelSource = str | os.PathLike[str] | bytes | onnx.ModelProto
#: elements of a product's constant B from which a model of several kernel nodes runs on
#: BLAS's pool on several threads: from there BLAS's own threads ran its products far
#: faster than the compiled paths' (docs/kernels.md, "One pool per run")
BLAS_POOL_MINIMUM_WEIGHT = 65_536
#: the pools a run of several kernel nodes on several threads keeps to (see _prepare)
BLAS_POOL, OPENMP_POOL = "blas", "openmp"


class RuntimeSession:
    """Run an ONNX model made of supported operators, like ``onnxruntime.InferenceSession``.

    ``tuning="portable"`` uses the kernels' defaults only; ``profile_name`` and
    ``profile_digest`` restrict resolution to one named registered profile or
    one profile digest; ``overrides`` maps a kernel name (``"Add"``) or a full
    :class:`~kerneltune.KernelTuningKey` to parameter values, applied last and
    validated here. The resolved configuration never changes afterwards, even
    when the registry publishes a newer generation. While the threads of its
    parallel regions wait for CPUs that other threads hold, ``contention`` gives
    the regions fewer threads (None: always ``threads``); results do not depend
    on it. ``fusion`` runs a MatMul and the Add of its bias as one call
    (:mod:`~kerneltune.runtime.fusion`; the same bits either way). A Gemm's constant
    weight stored transposed is transposed once, fused or not
    (:mod:`~kerneltune.runtime.layout`).
    """

    def __init__(
        self,
        model: ModelSource,
        threads: int | None = None,
        tuning: str = "resolved",
        profile_name: str | None = None,
        profile_digest: str | None = None,
        overrides: Mapping[str | KernelTuningKey, Mapping[str, object]] | None = None,
        *,
        registry=default_registry,
        contention: Contention | None = default_contention,
        fusion: bool = True,
    ):
        self.threads = thread_count(threads)
        if contention is not None and not isinstance(contention, Contention):
            raise TypeError(f"contention must be a Contention or None, got {contention!r}")
        self._contention = contention if self.threads > 1 else None
        kernels = library()
        written = prepare_model(read_model(model), kernels)
        self._model = lay_out_weights(written)
        #: the constant weights a Gemm reads transposed once (its errors say so)
        self._transposed = frozenset(name for name, value in self._model.constants.items()
                                     if written.constants.get(name) is not value)
        #: the model's kernel nodes before fusion, which must not change a path (one pool
        #: per run, see _prepare)
        self._kernel_nodes = sum(node.kernel is not None for node in self._model.nodes)
        self._blas_pool = _large_weight(self._model)
        if fusion:
            self._model = fuse(self._model, kernels)
        started = time.perf_counter()
        snapshot = registry.snapshot()
        captured = time.perf_counter()
        self._snapshot = snapshot
        self._mode = {"tuning": tuning, "profile_name": profile_name,
                      "profile_digest": profile_digest}
        _check_restriction(snapshot, profile_name, profile_digest)
        self._keys = {node.kernel.tuning_key(node.element_type)
                      for node in self._model.nodes if node.kernel is not None}
        self._overrides = _overrides_by_key(overrides or {}, self._keys)
        resolutions = self._resolve(self.threads)
        resolved = time.perf_counter()
        #: per thread count a run used, each key's resolution (fewer threads: at first use)
        self._resolutions_by_threads = {self.threads: resolutions}
        #: runs on fewer threads than ``threads``, per thread count
        self._reduced_runs: dict[int, int] = {}
        self._statistics = {
            "generation": snapshot.number,
            "snapshot_seconds": captured - started,
            "resolution_seconds": resolved - captured,
            "tunable_kernels": len(resolutions),
            "resolved_from_profile": sum(
                r.source.tier not in (Tier.DEFAULTS, Tier.OVERRIDE)
                or (r.base_source is not None and r.base_source.tier is not Tier.DEFAULTS)
                for r in resolutions.values()),
        }
        if self._blas_pool and self._narrower_blas(resolutions):
            self._blas_pool = False  # no product of several rows takes BLAS's threads
        self._build_plan()

    # -- construction -------------------------------------------------------------------------

    def _resolve(self, threads: int) -> dict[KernelTuningKey, Resolution]:
        """Every key's resolution for a run on ``threads``, from the session's snapshot."""
        execution = current_execution(threads)
        return {key: self._snapshot.resolve(key, execution, self._overrides.get(key),
                                            **self._mode)
                for key in self._keys}

    def _build_plan(self) -> None:
        model = self._model
        slots: dict[str, int] = {}

        def slot(name: str) -> int:
            return slots.setdefault(name, len(slots))

        for name in model.constants:
            slot(name)
        self._feeds = tuple(
            (s.name, slot(s.name), held_dtype(s.element_type), len(s.shape or ()),
             tuple((axis, n) for axis, n in enumerate(s.shape or ()) if isinstance(n, int)),
             s.shape is not None)
            for s in model.inputs
        )
        #: what a run computes, for contention's comparison of its times on each thread
        #: count: this session and its inputs' shapes
        self._work, self._feed_slots = object(), tuple(feed[1] for feed in self._feeds)
        symbols = [(s.name, axis, symbol)
                   for s in model.inputs for axis, symbol in enumerate(s.shape or ())
                   if isinstance(symbol, str)]
        #: the named dimensions that recur, whose sizes a run checks against each other (a
        #: name that appears once, as a batch's mostly does, agrees with itself)
        counts = collections.Counter(symbol for *_, symbol in symbols)
        self._symbols = tuple(entry for entry in symbols if counts[entry[2]] > 1)
        for node in model.nodes:
            for name in (*node.inputs, node.output):
                slot(name)
        self._slots = slots
        self._configs = {}
        prepared = self._prepare(self.threads)
        #: each kernel node that writes its result over an input: that input's index
        self._overwritten = {name: index for name, index in _overwritable(model).items()
                             if prepared[name].in_place(index) is not None}
        self._kept = _kept(model, self._overwritten)
        #: each kernel node's prepared kernel, in the model's order (for plans); on BLAS's
        #: pool, those of the runs whose products take no BLAS (else None)
        self._prepared = tuple(prepared.values())
        self._uses_blas = any(p.uses_blas for p in self._prepared)
        self._steps = self._steps_of(prepared)
        run, beside = self._program(prepared, self._steps, self.threads)
        self._prepared_beside = None if beside is None else tuple(beside.values())
        #: the steps' program per thread count: fewer than ``threads`` are prepared when
        #: first needed
        self._programs = {self.threads: run}
        self._template = [None] * len(slots)
        for name, value in model.constants.items():
            self._template[slots[name]] = value
        self._outputs = _returned(model, slots, self._overwritten)
        self._output_names = tuple(s.name for s in model.outputs)
        #: every output's slot and whether a run copies it, in the graph's order
        self._every_output = tuple(self._outputs[name] for name in self._output_names)
        self._input_names = frozenset(s.name for s in model.inputs)

    def _prepare(self, threads: int, products: Mapping[str, PreparedKernel] | None = None
                 ) -> dict[str, PreparedKernel]:
        """Each kernel node's prepared kernel for a run on ``threads``, by its output's name;
        with ``products`` (BLAS's pool), those of a run whose products take no BLAS: the
        same products, every other node on ``threads``.

        One pool per run: next to another pool, whose threads spin after each region or
        product, a pool's threads wait for CPUs the other's hold. On several threads, a
        model of two kernel nodes or more (fused or not: fusion changes no path) with a
        FLOAT or DOUBLE product of a large constant B (see _large_weight) runs its
        products at their thresholds, BLAS's on BLAS's threads, and its other nodes on the
        calling thread alone; any other such model keeps its products of several rows off
        BLAS's threads (Gemm's ``pool="openmp"``), all its regions on the OpenMP pool
        (docs/kernels.md, "One pool per run"), as does the first where its products' values
        keep them off a BLAS of narrower kernels (see _narrower_blas).
        """
        prepared = {}
        pool = {"pool": OPENMP_POOL} if self._pool(threads) == OPENMP_POOL else {}
        for node in self._model.nodes:
            if node.view is not None:
                continue
            if products is not None and node.kernel.uses_blas:
                prepared[node.output] = products[node.output]  # its weight packed once
                continue
            node_threads = threads if products is not None else self._node_threads(node,
                                                                                     threads)
            key = node.kernel.tuning_key(node.element_type)
            resolutions = self._resolutions_by_threads.get(node_threads)
            if resolutions is None:
                resolutions = self._resolutions_by_threads[node_threads] = self._resolve(
                    node_threads)
            if (key, node_threads) not in self._configs:
                self._configs[key, node_threads] = node.kernel.configure(
                    node.element_type, resolutions[key].values)
            session = {}
            if node.kernel.uses_blas:
                defaults = resolutions[key].source.tier is Tier.DEFAULTS
                session = {**pool, **({"portable_defaults": True} if defaults else {})}
            prepared[node.output] = node.kernel.prepare(
                node.element_type, self._configs[key, node_threads], node_threads,
                **node.attributes, **session)
        return prepared

    def _narrower_blas(self, resolutions: Mapping[KernelTuningKey, Resolution]) -> bool:
        """Whether every product's values are the portable defaults and numpy's BLAS runs
        kernels for fewer instructions than those assume: then they keep their products of
        several rows off BLAS (Gemm's ``portable_defaults``), whose threads no run needs
        (docs/kernels.md, "A BLAS behind the processor")."""
        products = {node.kernel.tuning_key(node.element_type) for node in self._model.nodes
                    if node.kernel is not None and node.kernel.uses_blas}
        return all(resolutions[key].source.tier is Tier.DEFAULTS
                   and blas.narrower_than(key.implementation) is not None for key in products)

    def _pool(self, threads: int) -> str | None:
        """The one pool of a run on ``threads`` (see _prepare): None where a model of one
        kernel node, or one thread, needs no choice."""
        if threads == 1 or self._kernel_nodes < 2:
            return None
        return BLAS_POOL if self._blas_pool else OPENMP_POOL

    def _node_threads(self, node: Node, threads: int) -> int:
        """The threads of ``node`` in a run on ``threads``: one for a node beside products
        on BLAS's pool."""
        if self._pool(threads) == BLAS_POOL and not node.kernel.uses_blas:
            return 1
        return threads

    def _steps_of(self, prepared: Mapping[str, PreparedKernel]) -> tuple:
        """The steps of a run on ``prepared`` kernels (``program``'s)."""
        steps = []
        for node in self._model.nodes:
            intermediate = node.output not in self._kept
            if node.view is not None:
                function, inputs = _bound(node, self._model.constants)
            else:
                kernel, index = prepared[node.output], self._overwritten.get(node.output)
                function = (_constant_run(kernel, node, self._model.constants)
                            if index is None else kernel.in_place(index))
                inputs = node.inputs
            steps.append((function, tuple(self._slots[i] for i in inputs),
                          self._slots[node.output], intermediate))
        return tuple(steps)

    def _program(self, prepared: Mapping[str, PreparedKernel], steps: Sequence,
                 threads: int) -> tuple[Callable[[list], None], dict | None]:
        """The program of a run on ``threads`` of ``prepared`` kernels (whose ``steps`` are
        given), and on BLAS's pool, where it is one for each work (docs/kernels.md, "One pool
        per run"), the prepared kernels of the works whose products take no BLAS (else
        None)."""
        on_blas = program(steps)
        if self._pool(threads) != BLAS_POOL:
            return on_blas, None
        beside = self._prepare(threads, prepared)
        products = [(prepared[node.output], tuple(self._slots[i] for i in node.inputs))
                    for node in self._model.nodes
                    if node.kernel is not None and node.kernel.uses_blas]
        return (PerWork(on_blas, program(self._steps_of(beside)), products, self._feed_slots),
                beside)

    def _program_on(self, threads: int) -> Callable[[list], None]:
        """The program of a run on ``threads``."""
        run = self._programs.get(threads)
        if run is None:
            prepared = self._prepare(threads)
            run, _ = self._program(prepared, self._steps_of(prepared), threads)
            self._programs[threads] = run
        return run

    # -- onnxruntime's interface ---------------------------------------------------------------

    def get_inputs(self) -> list[Signature]:
        return list(self._model.inputs)

    def get_outputs(self) -> list[Signature]:
        return list(self._model.outputs)

    def run(self, output_names: Sequence[str] | None, input_feed: Mapping[str, Any],
            run_options: object = None) -> list[np.ndarray]:
        """Outputs in the order of ``output_names`` (all outputs when None), as fresh arrays."""
        values = self._template.copy()
        if len(input_feed) != len(self._feeds):
            self._unknown_or_missing(input_feed)
        for name, index, dtype, rank, static, typed in self._feeds:
            try:
                value = input_feed[name]
            except KeyError:
                self._unknown_or_missing(input_feed)
            if type(value) is not np.ndarray or value.dtype is not dtype:
                value = _coerce(name, value, dtype)
            if typed and value.ndim != rank:
                raise ValueError(f"input {name!r}: expected rank {rank}, got shape {value.shape}")
            for axis, size in static:
                if value.shape[axis] != size:
                    raise ValueError(f"input {name!r}: dimension {axis} must be {size}, got "
                                     f"shape {value.shape}")
            values[index] = value
        if self._symbols:
            self._check_symbols(input_feed)
        threads, contention, reading = self.threads, self._contention, False
        if contention is not None and (contention.fewer
                                       or contention.clock() >= contention.next_reading):
            threads, reading = contention.start(
                self.threads, self._uses_blas,
                (self._work, *[values[i].shape for i in self._feed_slots]))
            if threads != self.threads:
                self._reduced_runs[threads] = self._reduced_runs.get(threads, 0) + 1
        try:
            (self._programs.get(threads) or self._program_on(threads))(values)
        except (ValueError, TypeError) as error:
            located = self._located(error, values)
            if located is error:
                raise
            raise located from error
        if reading:
            contention.finish()
        if output_names is None:
            outputs = self._every_output
        else:
            try:
                outputs = [self._outputs[name] for name in output_names]
            except KeyError:
                unknown = sorted(set(output_names) - set(self._outputs))
                raise ValueError(f"unknown output(s) {unknown}; outputs: "
                                 f"{list(self._output_names)}") from None
        return [np.array(values[i]) if copy else values[i] for i, copy in outputs]

    def _located(self, error: Exception, values: list) -> Exception:
        """A step's ValueError or TypeError naming its node: the first whose output the run
        lacks (any other error as it was)."""
        node = next((n for n in self._model.nodes if values[self._slots[n.output]] is None),
                    None)
        if node is None or type(error) not in (ValueError, TypeError):
            return error
        note = ""
        if node.op_type == "Gemm" and node.inputs[1] in self._transposed:
            weight = self._model.constants[node.inputs[1]]
            note = (f" (the model stores B transposed, transB=1, of shape "
                    f"{weight.shape[::-1]}: the session reads it transposed once)")
        return type(error)(f"node {node.name!r} ({node.op_type}): {error}{note}")

    def _unknown_or_missing(self, feed: Mapping[str, Any]) -> None:
        unknown = sorted(set(feed) - self._input_names)
        missing = sorted(self._input_names - set(feed))
        if unknown or missing:
            raise ValueError(f"missing input(s) {missing}, unknown input(s) {unknown}; the "
                             f"model's inputs are {sorted(self._input_names)}")

    def _check_symbols(self, feed: Mapping[str, Any]) -> None:
        seen: dict[str, tuple[int, str]] = {}
        for name, axis, symbol in self._symbols:
            size = np.shape(feed[name])[axis]
            first = seen.setdefault(symbol, (size, name))
            if first[0] != size:
                raise ValueError(f"input {name!r}: dimension {axis} ({symbol!r}) is {size}, but "
                                 f"{first[0]} in input {first[1]!r}")

    # -- diagnostics --------------------------------------------------------------------------

    @property
    def tuning_diagnostics(self) -> list[dict[str, Any]]:
        """Per node: its key, where its values came from, the values, and rejected candidates."""
        return [
            {
                "node": node.name,
                "op_type": node.op_type,
                **self._resolutions_by_threads[self._node_threads(node, self.threads)][
                    node.kernel.tuning_key(node.element_type)].to_dict(),
            }
            for node in self._model.nodes if node.kernel is not None
        ]

    @property
    def contention_report(self) -> dict[str, Any]:
        """How contention ran this session: its threads, the runs on fewer, where each
        kernel's values came from on each thread count its runs used (a profile's values
        are the quiet machine's for that count), and the readings of its contention."""
        return {
            "threads": self.threads,
            "runs_on_fewer_threads": dict(sorted(self._reduced_runs.items())),
            "sources": {threads: {str(key): resolution.source.to_dict()
                                  for key, resolution in resolutions.items()}
                        for threads, resolutions in sorted(self._resolutions_by_threads.items())},
            "contention": None if self._contention is None else self._contention.statistics(),
        }

    @property
    def tuning_resolution_statistics(self) -> dict[str, Any]:
        """The one-time cost of tuning: snapshot capture, resolution, and what resolved how."""
        return dict(self._statistics)


def _large_weight(model: Model) -> bool:
    """Whether a FLOAT or DOUBLE product of ``model`` reads a constant B of
    ``BLAS_POOL_MINIMUM_WEIGHT`` elements or more (a 16-bit float product widens and
    narrows its operands on the OpenMP pool)."""
    return any(node.kernel is not None and node.kernel.uses_blas and len(node.inputs) > 1
               and node.element_type not in half.FORMATS and node.inputs[1] in model.constants
               and model.constants[node.inputs[1]].size >= BLAS_POOL_MINIMUM_WEIGHT
               for node in model.nodes)


def _bound(node: Node, constants: Mapping[str, np.ndarray]) -> tuple[View, tuple[str, ...]]:
    """A view or selection node's function and the inputs a run gives it: its first input
    alone, where its other inputs are constants its binder reads once (a Reshape's
    sizes, a feature extractor's indices); its second alone, where its first is such a
    constant (a classifier's labels); else every input."""
    view = node.view
    function, keywords = ((view.func, view.keywords) if isinstance(view, functools.partial)
                          else (view, {}))
    first = selections.CONSTANT_FIRST_BINDERS.get(function)
    if first is not None and node.inputs[0] in constants and node.inputs[1] not in constants:
        return first(constants[node.inputs[0]], **keywords), node.inputs[1:]
    binder = views.BINDERS.get(function) or selections.BINDERS.get(function)
    if binder is None or any(name not in constants for name in node.inputs[1:]):
        return view, node.inputs
    bound = binder(*(constants[name] for name in node.inputs[1:]), **keywords)
    return (view, node.inputs) if bound is None else (bound, node.inputs[:1])


def _overwritable(model: Model) -> dict[str, int]:
    """Per kernel node that may write its result over an input, by its output's name: the
    index of that input (of its first two), an array a kernel node computed that nothing
    else reads, the graph's outputs included. Its kernel decides whether it can
    (``PreparedKernel.in_place``): a step saves the allocation and a pass over fresh memory,
    and a small one most of its Python (docs/kernels.md, "Results written in place")."""
    reads = value_reads(model)
    computed = {node.output for node in model.nodes if node.view is None}
    overwritten = {}
    for node in model.nodes:
        index = next((i for i, name in enumerate(node.inputs[:2])
                      if name in computed and reads[name] == 1), None)
        if node.kernel is not None and index is not None:
            overwritten[node.output] = index
    return overwritten


def _view_bases(model: Model, overwritten: Mapping[str, int]) -> dict[str, str]:
    """Each view's base: the array it views, through views of views (a result written over
    an input: that input's array)."""
    bases: dict[str, str] = {}
    for node in model.nodes:
        index = 0 if node.view is not None and not node.fresh else overwritten.get(node.output)
        if index is not None:
            bases[node.output] = bases.get(node.inputs[index], node.inputs[index])
    return bases


def _kept(model: Model, overwritten: Mapping[str, int]) -> frozenset[str]:
    """The values a run returns: the graph outputs and the arrays they view (or were written
    over). The others are intermediates, whose large arrays come from the output pool
    (kernels.outputs), since each run frees and makes them again."""
    bases = _view_bases(model, overwritten)
    return frozenset(name for s in model.outputs for name in (s.name, bases.get(s.name, s.name)))


def _returned(model: Model, slots: Mapping[str, int],
              overwritten: Mapping[str, int]) -> dict[str, tuple[int, bool]]:
    """Per graph output, its slot and whether a run copies it: each output is a fresh array,
    so one that is (a view of) an input or a constant is copied, and so is one that views
    the array another output returns."""
    computed = {node.output for node in model.nodes if node.view is None or node.fresh}
    viewed = _view_bases(model, overwritten)
    returned, seen = {}, set()
    for signature in model.outputs:
        base = viewed.get(signature.name, signature.name)
        returned[signature.name] = (slots[signature.name], base not in computed or base in seen)
        seen.add(base)
    return returned


def _coerce(name: str, value: object, dtype: np.dtype) -> np.ndarray:
    array = np.asarray(value)
    if array.dtype.newbyteorder("=") != dtype:
        raise TypeError(f"input {name!r}: expected element type {dtype}, got {array.dtype}")
    return array


def _constant_run(kernel: PreparedKernel, node: Node,
                  constants: Mapping[str, np.ndarray]) -> Callable:
    """The node's run: the kernel's run for a constant input it prepares once (a product's
    weight), else its run."""
    for position, name in enumerate(node.inputs):
        if name in constants:
            bound = kernel.for_constant(position, constants[name])
            if bound is not None:
                return bound
    return kernel.run


def _check_restriction(snapshot: TuningSnapshot, name: str | None,
                       digest: str | None) -> None:
    """A profile name or digest that nothing registered is a mistake, not a preference."""
    if name is None and digest is None:
        return
    published = snapshot.profiles()
    if name is not None and not any(p.name == name for p in published):
        raise UnknownKernelError(f"no registered profile is named {name!r}")
    if digest is not None and not any(p.digest == digest for p in published):
        raise UnknownKernelError(f"no registered profile has digest {digest!r}")


def _overrides_by_key(overrides: Mapping[str | KernelTuningKey, Mapping[str, object]],
                      keys: Mapping[KernelTuningKey, Any]) -> dict[KernelTuningKey, dict]:
    by_key: dict[KernelTuningKey, dict] = {}
    kernels = library()
    for target, values in overrides.items():
        if isinstance(target, KernelTuningKey):
            if target not in keys:
                raise UnknownKernelError(f"override for {target}: the model has no such kernel")
            matched = [target]
        elif isinstance(target, str):
            if target not in kernels:
                raise UnknownKernelError(f"override for unknown kernel {target!r}; kernels: "
                                         f"{', '.join(sorted(kernels))}")
            matched = [key for key in keys if key.kernel == target]
        else:
            raise KernelTuningError(f"override target must be a kernel name or a "
                                    f"KernelTuningKey, got {target!r}")
        for key in matched:
            by_key.setdefault(key, {}).update(values)
    return by_key
