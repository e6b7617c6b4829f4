"""The library's kernels against numpy, measured in the same run.

Elementwise: Abs, Add, Tanh and Sigmoid on FLOAT at 1e3 ... 1.6e7 elements; then
integer and boolean kernels (one-byte types and integer Div among them), Log,
and FLOAT16 Abs and Neg at 1e5 and 1e6, equal shapes and rows broadcast against
a column.
BFLOAT16 beside FLOAT16: kernels through float32 (and Abs and Neg on the sign bit) on
both 16-bit types, at 1e5 and 1e6 elements.
Portable grains other than 32768 (the catalog's ``GRAINS`` and ``ELEMENT_GRAINS``):
each key's against 32768, the grain of an add, at sizes where one of the two runs
in parallel and the other serially; broadcast grains of their own (``BROADCAST_GRAINS``)
against the operator's grain, on rows broadcast against 256 columns.
Gemm: 8, 64, 256, 512 and 1024 squared, and 1 x 1024 x 1024, on FLOAT. Narrow products
(4096 x K by K x N, N up to 64 columns, FLOAT, one thread, BLAS off): the plan the
defaults give (the column path up to ``algorithm.column_n_limit`` columns, the panel path
up to ``algorithm.panel_n_limit``), the blocked path forced, and numpy; the target: the
default plan no slower than the blocked path. A constant B (FLOAT, 12 to 64 rows by a
weight of 64 to 512 rows and columns, the packed path's products, one and two threads): the
run bound to it (``for_constant``: its panels packed once, as a session runs a weight)
against the unbound run (B packed at every call), and numpy on one thread (on two, BLAS's
threads spinning after each product would share the CPUs with the OpenMP pool's: docs/
kernels.md, One pool per run); the target: the bound run no slower.

Each contender runs on the same inputs, in interleaved rounds (so a burst of
noise on this shared machine hits all of them), and the figure is the median
over rounds of the time per call. Ratios are numpy's time over ours: above 1
we are faster. "serial" is the kernel's forced serial path; "2 threads" is
the kernel as a session would run it with a 2-thread budget and the portable
default thresholds. numpy has no sigmoid: its peer is ``1 / (1 + exp(-x))``.

Everything runs with OPENBLAS_THREAD_TIMEOUT=4 unless the environment sets it, the setting
kerneltune's documentation gives for a process that runs numpy's OpenBLAS beside its
kernels: numpy's product and the kernels' run back to back, and OpenBLAS's threads,
spinning after each product, held the CPU a two-thread product's second thread needed
(1024 squared on ``x86_64_v4``: 6 ms alone, 10-14 ms interleaved).

``--variant NAME`` runs kerneltune's ISA variant NAME (``KERNELTUNE_ISA``);
``--all-variants`` runs this script once per variant this machine executes, each in a
process of its own. The figures of the variant this processor picks are the machine's
(``bench_kernels``); every other variant's go to a results file of their own
(``bench_kernels-<variant>``).

    python benchmarks/bench_kernels.py [--rounds 15] [--quick] [--variant NAME | --all-variants]
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable

import numpy as np
from results import (
    Recorder,
    add_arguments,
    add_variant_arguments,
    quiet_openblas,
    timed,
    variant_recorder,
)
from threadpoolctl import threadpool_limits

from kerneltune.kernels import catalog, library, outputs
from kerneltune.kernels.elementwise import UnaryKernel
from kerneltune.tuning.dtypes import FLOATING, NUMPY_DTYPES
from kerneltune.tuning.schema import element_type_number

SIZES = (1_000, 10_000, 100_000, 1_000_000, 16_000_000)
#: narrow products: K (rows of B) and N (its columns), of 4096 rows
NARROW_ROWS, NARROW_DEPTHS, NARROW_WIDTHS = 4096, (8, 32, 128), (1, 3, 8, 16, 32, 64)
#: a one-key miss of the narrow target within this much is noise on a shared machine
NARROW_MARGIN = 0.9
#: products of a constant B on the packed path (M, K, N, transB): a weight of a Linear layer
#: at a batch of 12 to 64 rows, below the BLAS threshold
CONSTANT_SHAPES = ((12, 256, 512, 0), (16, 256, 256, 0), (16, 256, 256, 1), (32, 128, 256, 0),
                   (64, 64, 256, 0))
GEMM_SHAPES = ((8, 8, 8), (64, 64, 64), (256, 256, 256), (512, 512, 512), (1024, 1024, 1024),
               (1, 1024, 1024))

#: issue targets: parallel / numpy at >= 1e6 elements, and Gemm / numpy
TARGETS = {"Abs": 1.3, "Add": 1.3, "Tanh": 1.8, "Sigmoid": 1.8}


def numpy_sigmoid(x: np.ndarray) -> np.ndarray:
    return 1 / (1 + np.exp(-x))


ELEMENTWISE = {
    "Abs": (1, np.abs),
    "Add": (2, np.add),
    "Tanh": (1, np.tanh),
    "Sigmoid": (1, numpy_sigmoid),
}


def elementwise(rounds: int, sizes: tuple[int, ...], recorder: Recorder) -> list[str]:
    kernels = library()
    rng = np.random.default_rng(0)
    misses = []
    recorder.table("elementwise", "FLOAT; ratios numpy / serial and numpy / 2 threads; GB/s "
                   "moved (inputs and output) on 2 threads and by numpy")
    print(f"{'kernel':8} {'elements':>10} {'numpy us':>10} {'serial x':>9} {'2 thr x':>8} "
          f"{'2 thr GB/s':>10} {'numpy GB/s':>10}")
    for name, (arity, peer) in ELEMENTWISE.items():
        for size in sizes:
            inputs = [rng.standard_normal(size).astype(np.float32) for _ in range(arity)]
            prepared = kernels[name].prepare("FLOAT", threads=2)
            times = timed({
                "numpy": lambda p=peer, i=inputs: p(*i),
                "serial": lambda k=prepared, i=inputs: k.run_serial(*i),
                "parallel": lambda k=prepared, i=inputs: k.run(*i),
            }, rounds)
            moved = 4 * size * (arity + 1)
            serial_ratio = times["numpy"] / times["serial"]
            parallel_ratio = times["numpy"] / times["parallel"]
            print(f"{name:8} {size:>10} {times['numpy'] * 1e6:>10.1f} {serial_ratio:>9.2f} "
                  f"{parallel_ratio:>8.2f} {moved / times['parallel'] / 1e9:>10.2f} "
                  f"{moved / times['numpy'] / 1e9:>10.2f}")
            recorder.row("elementwise", kernel=name, elements=size,
                         numpy_us=times["numpy"] * 1e6, serial_ratio=serial_ratio,
                         parallel_ratio=parallel_ratio,
                         parallel_gbps=moved / times["parallel"] / 1e9,
                         numpy_gbps=moved / times["numpy"] / 1e9)
            if size >= 1_000_000 and not recorder.target(
                    "FLOAT elementwise at >= 1e6 elements, numpy / 2 threads", parallel_ratio,
                    ">=", TARGETS[name], f"{name} {size}"):
                misses.append(f"{name} at {size}: {parallel_ratio:.2f}x numpy "
                              f"(target {TARGETS[name]}x)")
    return misses


def quiet(function: Callable[..., np.ndarray]) -> Callable[..., np.ndarray]:
    """numpy's ``function`` without its warnings about the zeros among the operands."""
    def run(*operands: np.ndarray) -> np.ndarray:
        with np.errstate(divide="ignore"):
            return function(*operands)
    return run


#: kernels on other element types, with numpy's function (integer division floors, the same
#: as Div's truncation on these non-negative operands)
OTHER_TYPES = (("Add", "INT8", np.add), ("Mul", "UINT8", np.multiply), ("Add", "INT32", np.add),
               ("Div", "INT32", quiet(np.floor_divide)), ("Div", "UINT8", quiet(np.floor_divide)),
               ("Log", "FLOAT", quiet(np.log)), ("Log", "DOUBLE", quiet(np.log)),
               ("Max", "INT16", np.maximum), ("BitwiseXor", "UINT8", np.bitwise_xor),
               ("And", "BOOL", np.logical_and), ("Or", "BOOL", np.logical_or),
               ("Xor", "BOOL", np.logical_xor), ("Not", "BOOL", np.logical_not),
               ("Abs", "INT8", np.abs), ("Abs", "FLOAT16", np.abs), ("Neg", "FLOAT16", np.negative))
#: serial / numpy floor of those at 1e6 elements, where the loop outweighs the call: loops
#: that gcc had left scalar, or that did needless work, ran at 1/3 to 1/190 of numpy's speed
FLOOR = 0.5


def other_types(rounds: int, recorder: Recorder) -> list[str]:
    kernels = library()
    rng = np.random.default_rng(2)
    misses = []
    recorder.table("other_types", "ratios numpy / serial and numpy / 2 threads; form: equal "
                   "shapes, or rows broadcast against 256 columns")
    print(f"\n{'kernel':16} {'form':9} {'elements':>9} {'numpy us':>9} {'serial x':>9} "
          f"{'2 thr x':>8}")
    for name, element_type, peer in OTHER_TYPES:
        dtype = NUMPY_DTYPES[element_type_number(element_type)]
        arity = 1 if name in catalog.UNARY else 2
        for size in (100_000, 1_000_000):
            forms = {"equal": [(size,)] * arity}
            if arity == 2:
                forms["broadcast"] = [(size // 256, 1), (1, 256)]
            for form, shapes in forms.items():
                inputs = [rng.integers(0, 100, shape).astype(dtype) for shape in shapes]
                prepared = kernels[name].prepare(element_type, threads=2)
                times = timed({
                    "numpy": lambda p=peer, i=inputs: p(*i),
                    "serial": lambda k=prepared, i=inputs: k.run_serial(*i),
                    "parallel": lambda k=prepared, i=inputs: k.run(*i),
                }, rounds)
                serial_ratio = times["numpy"] / times["serial"]
                print(f"{f'{name} {element_type}':16} {form:9} {size:>9} "
                      f"{times['numpy'] * 1e6:>9.1f} {serial_ratio:>9.2f} "
                      f"{times['numpy'] / times['parallel']:>8.2f}")
                recorder.row("other_types", kernel=name, element_type=element_type, form=form,
                             elements=size, numpy_us=times["numpy"] * 1e6,
                             serial_ratio=serial_ratio,
                             parallel_ratio=times["numpy"] / times["parallel"])
                if size >= 1_000_000 and not recorder.target(
                        "other element types at 1e6 elements, numpy / serial", serial_ratio,
                        ">=", FLOOR, f"{name} {element_type} {form}"):
                    misses.append(f"{name} {element_type} {form} at {size}: serial "
                                  f"{serial_ratio:.2f}x numpy (floor {FLOOR}x)")
    return misses


#: calls this much slower with a key's own grain than with an add's miss: the noise margin
GRAIN_MARGIN = 1.03


#: operators timed on each element type of the catalog's ``ELEMENT_GRAINS`` (where defined)
ELEMENT_GRAIN_OPERATORS = ("Abs", "Add", "Greater", "And", "Not")


def grain_operand(element_type: str, shape: tuple[int, ...], exponent: bool,
                  rng: np.random.Generator) -> np.ndarray:
    """Positive floats (Log, Sqrt and Pow's domain), nonzero integers (Div's divisors) and
    small integer exponents for Pow."""
    dtype = NUMPY_DTYPES[element_type_number(element_type)]
    if dtype.kind == "b":
        return rng.integers(0, 2, shape).astype(bool)
    if element_type_number(element_type) in FLOATING:
        return (np.abs(rng.standard_normal(shape)) + 0.5).astype(dtype)
    return rng.integers(0, 8 if exponent else 100, shape).astype(dtype) + (0 if exponent else 1)


#: parameter -> the shapes of a call of ``size`` elements that uses it
GRAIN_FORMS = {
    "parallel.minimum_elements": lambda size, arity: [(size,)] * arity,
    "parallel.broadcast_minimum_elements": lambda size, arity: [(size // 256, 1), (1, 256)],
}


def portable_grains() -> list[tuple[str, str, str, int, int]]:
    """(operator, element type, parameter, default grain, reference grain) of every grain
    other than an add's on floats: equal shapes against an add's grain, broadcasts with
    their own against the operator's."""
    kernels = library()
    grains = [(name, element_type, "parallel.minimum_elements", grain, catalog.DEFAULT_GRAIN)
              for name, table in catalog.GRAINS.items()
              for grain, element_types in table.items() for element_type in element_types]
    overridden = {(name, element_type) for name, element_type, *_ in grains}
    grains += [
        (name, element_type, "parallel.minimum_elements", grain, catalog.DEFAULT_GRAIN)
        for element_type, grain in catalog.ELEMENT_GRAINS.items()
        for name in ELEMENT_GRAIN_OPERATORS if (name, element_type) not in overridden
        and element_type_number(element_type) in kernels[name].element_types]
    return grains + [
        (name, element_type, "parallel.broadcast_minimum_elements", grain,
         kernels[name].configure(element_type, {}).minimum_elements)
        for name, table in catalog.BROADCAST_GRAINS.items()
        for grain, element_types in table.items() for element_type in element_types]


#: kernels timed on FLOAT16 and BFLOAT16: the sign-bit ones, then widen-compute-narrow ones
#: (a BOOL output narrows nothing; Tanh and Pow cost more per element than a conversion)
HALF_KERNELS = ("Abs", "Neg", "Add", "Mul", "Greater", "Tanh", "Pow", "MatMul")
#: BFLOAT16's time over FLOAT16's at 1e6 elements, at most (their conversions differ, the
#: float32 computation between them is the same)
HALF_TARGET = 1.10


def halves(rounds: int, recorder: Recorder) -> list[str]:
    """The same kernel and values on FLOAT16 and BFLOAT16, 2 threads; MatMul of N x N by N x N
    where N * N is about the elements."""
    kernels = library()
    rng = np.random.default_rng(4)
    misses = []
    recorder.table("halves", "2 threads, the same values in both types (positive: Pow's bases); "
                   "ratio: BFLOAT16 time over FLOAT16 time (below 1: BFLOAT16 is faster); "
                   "MatMul: N x N by N x N, N the square root of the elements")
    print(f"\n{'kernel':8} {'elements':>9} {'FLOAT16 us':>11} {'BFLOAT16 us':>12} {'ratio':>6}")
    for name in HALF_KERNELS:
        for size in (100_000, 1_000_000):
            side = int(size ** 0.5)
            shapes = [(side, side)] * 2 if name == "MatMul" else [(size,)] * (
                1 if name in catalog.UNARY else 2)
            values = [np.abs(rng.standard_normal(shape)) + 0.5 for shape in shapes]
            contenders = {}
            for element_type in ("FLOAT16", "BFLOAT16"):
                inputs = [v.astype(NUMPY_DTYPES[element_type_number(element_type)])
                          for v in values]
                prepared = kernels[name].prepare(element_type, threads=2)
                contenders[element_type] = lambda k=prepared, i=inputs: k.run(*i)
            times = timed(contenders, rounds)
            ratio = times["BFLOAT16"] / times["FLOAT16"]
            print(f"{name:8} {size:>9} {times['FLOAT16'] * 1e6:>11.1f} "
                  f"{times['BFLOAT16'] * 1e6:>12.1f} {ratio:>6.2f}")
            recorder.row("halves", kernel=name, elements=size,
                         float16_us=times["FLOAT16"] * 1e6, bfloat16_us=times["BFLOAT16"] * 1e6,
                         ratio=ratio)
            if size >= 1_000_000 and not recorder.target(
                    "BFLOAT16 time / FLOAT16 time at 1e6 elements, 2 threads", ratio, "<=",
                    HALF_TARGET, f"{name} {size}"):
                misses.append(f"{name} BFLOAT16 at {size}: {ratio:.2f}x FLOAT16's time "
                              f"(target {HALF_TARGET}x)")
    return misses


def default_grains(rounds: int, recorder: Recorder) -> list[str]:
    """Each key with its own portable grain against the same kernel with a reference grain
    (an add's, or the operator's for a broadcast grain of its own).

    Sizes lie between twice the one and twice the other, where exactly one runs in parallel.
    """
    kernels = library()
    rng = np.random.default_rng(3)
    misses = []
    recorder.table("grains", "2 threads; reference_speedup and own_speedup: serial time over the "
                   "time with the reference grain and with the key's own; gain: reference time "
                   "over own")
    print(f"\n{'kernel':14} {'form':9} {'grain':>6} {'ref':>6} {'elements':>9} "
          f"{'serial us':>10} {'ref x':>8} {'own x':>8} {'ref / own':>10}")
    for name, element_type, parameter, grain, reference in portable_grains():
        kernel = kernels[name]
        arity = 1 if isinstance(kernel, UnaryKernel) else 2  # the fused chain's too
        form = "equal" if parameter == "parallel.minimum_elements" else "broadcast"
        low, high = 2 * min(grain, reference), 2 * max(grain, reference)
        sizes = sorted({size for size in (low, 2 * low, 3 * reference // 2, 3 * reference)
                        if low <= size < high})
        # an add's grain replaces every grain; a broadcast's reference only its own
        replaced = [p for p in kernel.schema(element_type).parameters
                    if p.endswith("minimum_elements")] if form == "equal" else [parameter]
        referenced = kernel.configure(element_type, dict.fromkeys(replaced, reference))
        own = kernel.prepare(element_type, threads=2)
        old = kernel.prepare(element_type, referenced, threads=2)
        for size in sizes:
            inputs = [grain_operand(element_type, shape, index == 1, rng)
                      for index, shape in enumerate(GRAIN_FORMS[parameter](size, arity))]
            times = timed({
                "serial": lambda k=own, i=inputs: k.run_serial(*i),
                "reference": lambda k=old, i=inputs: k.run(*i),
                "own": lambda k=own, i=inputs: k.run(*i),
            }, rounds)
            gain = times["reference"] / times["own"]
            print(f"{f'{name} {element_type}':14} {form:9} {grain:>6} {reference:>6} "
                  f"{size:>9} {times['serial'] * 1e6:>10.1f} "
                  f"{times['serial'] / times['reference']:>8.2f} "
                  f"{times['serial'] / times['own']:>8.2f} {gain:>10.2f}")
            recorder.row("grains", kernel=name, element_type=element_type, form=form,
                         grain=grain, reference=reference, elements=size,
                         serial_us=times["serial"] * 1e6,
                         reference_speedup=times["serial"] / times["reference"],
                         own_speedup=times["serial"] / times["own"], gain=gain)
            if not recorder.target("portable grains, reference time / own time", gain, ">=",
                                   1 / GRAIN_MARGIN,
                                   f"{name} {element_type} {form} {size}"):
                misses.append(f"{name} {element_type} {form} at {size}: its grain {grain} "
                              f"{1 / gain:.2f}x slower than {reference}")
    return misses


def gemm(rounds: int, recorder: Recorder) -> list[str]:
    kernels = library()
    rng = np.random.default_rng(1)
    misses = []
    recorder.table("gemm", "FLOAT, M x K times K x N; ratios numpy / serial and numpy / 2 "
                   "threads; path: the 2-thread plan's")
    print(f"\n{'Gemm M x K x N':16} {'numpy us':>10} {'serial x':>9} {'2 thr x':>8} {'path':>10}")
    for m, k, n in GEMM_SHAPES:
        a = rng.standard_normal((m, k)).astype(np.float32)
        b = rng.standard_normal((k, n)).astype(np.float32)
        prepared = kernels["Gemm"].prepare("FLOAT", threads=2)
        times = timed({
            "numpy": lambda a=a, b=b: np.matmul(a, b),
            "serial": lambda p=prepared, a=a, b=b: p.run_serial(a, b),
            "parallel": lambda p=prepared, a=a, b=b: p.run(a, b),
        }, rounds)
        ratio = times["numpy"] / times["parallel"]
        path = prepared.plan(a, b).path
        print(f"{f'{m} x {k} x {n}':16} {times['numpy'] * 1e6:>10.1f} "
              f"{times['numpy'] / times['serial']:>9.2f} {ratio:>8.2f} {path:>10}")
        recorder.row("gemm", m=m, k=k, n=n, numpy_us=times["numpy"] * 1e6,
                     serial_ratio=times["numpy"] / times["serial"], parallel_ratio=ratio,
                     path=path)
        # the targets name sizes: 256 and above within 10% of numpy (1x1024x1024 included,
        # as a 1024 product), 8 and 64 no slower
        target = 0.9 if max(m, k, n) >= 256 else 1.0
        if not recorder.target("Gemm FLOAT, numpy / 2 threads", ratio, ">=", target,
                               f"{m}x{k}x{n}"):
            misses.append(f"Gemm {m}x{k}x{n}: {ratio:.2f}x numpy (target {target}x)")
    return misses


def narrow(rounds: int, recorder: Recorder) -> list[str]:
    """Narrow products on one thread (numpy's BLAS too), BLAS off: the default plan against
    the blocked path."""
    gemm = library()["Gemm"]
    never_blas = dict.fromkeys(
        ("algorithm.blas_minimum_fmas", "algorithm.vector_blas_minimum_fmas",
         "algorithm.skinny_blas_minimum_fmas", "algorithm.panel_blas_minimum_fmas"), 2**62)
    default = gemm.prepare("FLOAT", gemm.configure("FLOAT", never_blas), 1)
    blocked = gemm.prepare("FLOAT", gemm.configure(
        "FLOAT", {**never_blas, "algorithm.column_n_limit": 0, "algorithm.panel_n_limit": 0}),
        1)
    rng = np.random.default_rng(2)
    misses = []
    recorder.table("narrow", f"FLOAT, {NARROW_ROWS} x K times K x N, one thread, BLAS off, "
                   "outputs recycled as a session's intermediates; path: the default plan's; "
                   "blocked_ratio: the blocked path's time over the default plan's, numpy_ratio "
                   "numpy's (its BLAS) over it")
    print(f"\n{'narrow M x K x N':18} {'default us':>10} {'blocked x':>9} {'numpy x':>8} "
          f"{'path':>8}")
    for k in NARROW_DEPTHS:
        for n in NARROW_WIDTHS:
            a = rng.standard_normal((NARROW_ROWS, k)).astype(np.float32)
            b = rng.standard_normal((k, n)).astype(np.float32)
            # as a session's intermediates (these are MLPs' hidden layers): outputs come
            # from the pool, not from pages the C library may map afresh at each call
            outputs.intermediates(True)
            try:
                with threadpool_limits(1):
                    times = timed({"default": lambda a=a, b=b: default.run(a, b),
                                   "blocked": lambda a=a, b=b: blocked.run(a, b),
                                   "numpy": lambda a=a, b=b: np.matmul(a, b)}, rounds)
            finally:
                outputs.intermediates(False)
            path = default.plan(a, b).path
            ratio = times["blocked"] / times["default"]
            print(f"{f'{NARROW_ROWS} x {k} x {n}':18} {times['default'] * 1e6:>10.1f} "
                  f"{ratio:>9.2f} {times['numpy'] / times['default']:>8.2f} {path:>8}")
            recorder.row("narrow", m=NARROW_ROWS, k=k, n=n, path=path,
                         default_us=times["default"] * 1e6, blocked_ratio=ratio,
                         numpy_ratio=times["numpy"] / times["default"])
            if not recorder.target("narrow Gemm FLOAT, blocked path / default plan", ratio,
                                   ">=", NARROW_MARGIN, f"{NARROW_ROWS}x{k}x{n}"):
                misses.append(f"narrow Gemm {NARROW_ROWS}x{k}x{n}: the default plan ({path}) "
                              f"{1 / ratio:.2f}x the blocked path's time")
    return misses


def constant_b(rounds: int, recorder: Recorder) -> list[str]:
    """Products of a constant B, bound (panels packed once) and unbound, and numpy's."""
    gemm = library()["Gemm"]
    rng = np.random.default_rng(3)
    misses = []
    recorder.table("constant_b", "FLOAT, M x K times K x N of a constant B on the packed path; "
                   "bound_us: the run bound to B (its panels packed once), unbound_ratio the "
                   "unbound run's time (B packed at every call) over it, numpy_ratio numpy's "
                   "(one thread only)")
    print(f"\n{'constant B M x K x N':22} {'thr':>3} {'bound us':>9} {'unbound x':>9} "
          f"{'numpy x':>8} {'path':>14}")
    for m, k, n, trans_b in CONSTANT_SHAPES:
        a = rng.standard_normal((m, k)).astype(np.float32)
        b = rng.standard_normal((n, k) if trans_b else (k, n)).astype(np.float32)
        for threads in (1, 2):
            prepared = gemm.prepare("FLOAT", threads=threads, transB=trans_b)
            bound = prepared.for_constant(1, b)
            contenders = {"bound": lambda a=a, b=b, run=bound: run(a, b),
                          "unbound": lambda a=a, b=b, p=prepared: p.run(a, b)}
            if threads == 1:
                operand = b.T if trans_b else b
                contenders["numpy"] = lambda a=a, b=operand: np.matmul(a, b)
            with threadpool_limits(1):
                times = timed(contenders, rounds)
            path = prepared.plan(a, b).path
            ratio = times["unbound"] / times["bound"]
            numpy_ratio = times["numpy"] / times["bound"] if "numpy" in times else None
            shape = f"{m} x {k} x {n}{' (transB)' if trans_b else ''}"
            print(f"{shape:22} {threads:>3} {times['bound'] * 1e6:>9.1f} {ratio:>9.2f} "
                  f"{numpy_ratio or float('nan'):>8.2f} {path:>14}")
            recorder.row("constant_b", m=m, k=k, n=n, trans_b=trans_b, threads=threads,
                         path=path, bound_us=times["bound"] * 1e6, unbound_ratio=ratio,
                         numpy_ratio=numpy_ratio)
            if not recorder.target("constant B FLOAT, unbound run / bound run", ratio, ">=",
                                   NARROW_MARGIN, f"{shape}, {threads} threads"):
                misses.append(f"constant B {shape}, {threads} threads: the bound run "
                              f"{1 / ratio:.2f}x the unbound run's time")
    return misses


def report(misses: list[str]) -> int:
    """Print each missed target, or the success line; the exit status says which."""
    for miss in misses:
        print(f"MISSED: {miss}")
    if not misses:
        print("OK: every target met")
    return 1 if misses else 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=15, help="interleaved rounds per figure")
    parser.add_argument("--quick", action="store_true", help="sizes up to 1e6 only")
    parser.add_argument("--skip-gemm", action="store_true")
    add_variant_arguments(parser)
    add_arguments(parser)
    argv = sys.argv[1:] if argv is None else argv
    args = parser.parse_args(argv)
    quiet_openblas()
    recorder = variant_recorder(__file__, args, argv)
    if isinstance(recorder, int):  # --all-variants: each variant ran in a process of its own
        return recorder
    print(f"kerneltune variant: {library()['Abs'].implementation}")
    misses = elementwise(args.rounds, SIZES[:-1] if args.quick else SIZES, recorder)
    misses += other_types(args.rounds, recorder)
    misses += halves(args.rounds, recorder)
    misses += default_grains(args.rounds, recorder)
    if not args.skip_gemm:
        misses += gemm(args.rounds, recorder)
        misses += narrow(args.rounds, recorder)
        misses += constant_b(args.rounds, recorder)
    recorder.finish()
    return report(misses)


if __name__ == "__main__":
    sys.exit(main())
