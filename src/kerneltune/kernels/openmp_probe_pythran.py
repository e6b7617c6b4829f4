"""OpenMP toolchain probe, compiled by pythran into ``<variant>.openmp_probe`` modules.

The build installs it as ``kerneltune.kernels._variants.<variant>.openmp_probe`` for every ISA
variant. It exists to prove the whole chain (pythran -> C++ -> extension built with OpenMP ->
import -> call). Run as plain Python (pythran's ``omp`` shim, no compilation) the OpenMP
directives are mere comments and everything runs serially, with the same results.

pythran reads ``# pythran export`` and ``# omp`` comments with or without the space after
``#``; the spaced form survives code formatters. Any comment starting with ``# omp`` followed by
a space is an OpenMP directive to pythran.
"""

import numpy as np
import omp

# pythran export openmp_enabled()
# pythran export thread_ids(int, int)
# pythran export parallel_thread_count(int)
# pythran export parallel_sum(float64[:], int)
# pythran export serial_sum(float64[:])


def openmp_enabled():
    """True when this module was compiled with OpenMP (``_OPENMP`` defined)."""
    active = 0
    # omp parallel for num_threads(2) reduction(+:active) schedule(static, 1)
    for _ in range(2):
        if omp.in_parallel():
            active += 1
    return active > 0


def thread_ids(n, iterations):
    """OpenMP thread number that ran each iteration of a loop with ``num_threads(n)``."""
    # every iteration writes its id; np.zeros keeps the module's calloc in use, which the
    # build test checks for alignment as it checks every kernel's
    ids = np.zeros(iterations, dtype=np.int64)
    # omp parallel for num_threads(n) schedule(static, 1)
    for i in range(iterations):
        ids[i] = omp.get_thread_num()
    return ids


def parallel_thread_count(n):
    """How many distinct OpenMP threads ran a ``num_threads(n)`` loop of ``4 n`` iterations."""
    ids = thread_ids(n, 4 * max(n, 1))
    return len(np.unique(ids))


def parallel_sum(x, n):
    """Sum of ``x`` with an OpenMP ``reduction(+)`` over ``n`` threads."""
    total = 0.0
    # omp parallel for num_threads(n) reduction(+:total) schedule(static)
    for i in range(x.shape[0]):
        total += x[i]
    return total


def serial_sum(x):
    """Sum of ``x`` in index order, one thread."""
    total = 0.0
    for i in range(x.shape[0]):
        total += x[i]
    return total
