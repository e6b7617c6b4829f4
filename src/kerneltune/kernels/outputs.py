"""Output arrays whose large buffers are recycled once their owner lets go.

A fresh large output costs as much as the kernel that fills it: the C
library maps new pages for large allocations (glibc does so above its mmap
threshold, which it raises to at most 32 MiB as blocks are freed), and the
operating system faults and zeroes each page on first touch. onnxruntime's
arena avoids it by reusing memory. This module does the same for kernel
outputs without giving up ownership: a large output is a view of a pooled
block through a *lease*, and the block returns to the pool only when the
lease dies, that is when the array and every view of it are gone. Until then
nobody else sees the block, so each output is as much the caller's as
``np.empty`` would make it.

Released blocks wait in the pool up to :func:`set_output_pool_limit` bytes (0 turns
recycling off), the least recently released leaving first to make room.
"""

from __future__ import annotations

import collections
import ctypes
import math
import os
import threading

import numpy as np

from .._support.aligned import ALIGNMENT, aligned_empty

#: From this size on, outputs are recycled (16 MiB: below glibc's largest mmap threshold,
#: so that sizes it may still map afresh are covered too).
RECYCLE_MINIMUM_BYTES = 16 << 20
#: From this size on, a session's intermediates are recycled while :func:`intermediates`
#: says so: glibc's first mmap threshold (128 KiB). Freed and allocated again every run,
#: among others of other sizes, they came back as fresh pages (mapped afresh, or the heap's
#: top trimmed and grown again) whatever glibc's adaptive threshold does; a lone kernel's
#: output, which glibc hands back warm, would pay the pool's cost for nothing
#: (docs/kernels.md, Output blocks).
INTERMEDIATE_MINIMUM_BYTES = 128 << 10
#: Blocks come in sixteen sizes per octave (at most 1/16 of a block unused), so that
#: nearby shapes share them.
SIZES_PER_OCTAVE = 16

_lock = threading.Lock()
#: per thread, whether its outputs are a session's intermediates (see intermediates)
_intermediate = threading.local()
#: released blocks, least recently released first
_idle: collections.deque[_Block] = collections.deque()
_idle_bytes = 0
_idle_limit = 512 << 20
_lease_types: dict[int, type] = {}


class _Block:
    __slots__ = ("address", "nbytes", "storage")

    def __init__(self, nbytes: int):
        self.storage = aligned_empty((nbytes,), np.uint8)
        self.address = self.storage.ctypes.data
        self.nbytes = nbytes


def _evict(room: int) -> None:
    """Free the least recently released blocks until ``room`` more bytes fit (lock held)."""
    global _idle_bytes
    while _idle and _idle_bytes + room > _idle_limit:
        _idle_bytes -= _idle.popleft().nbytes


def set_output_pool_limit(nbytes: int) -> int:
    """Keep at most ``nbytes`` of released output blocks for reuse; returns the old limit.

    0 frees every block as soon as its output is gone, as ``np.empty`` would.
    """
    global _idle_limit
    if nbytes < 0:
        raise ValueError(f"the idle limit must be at least 0 bytes, got {nbytes}")
    with _lock:
        previous, _idle_limit = _idle_limit, nbytes
        _evict(0)
    return previous


def output_pool_bytes() -> int:
    """Bytes of output blocks waiting for reuse."""
    return _idle_bytes


def _refuse_copy(lease, *args):
    raise TypeError("an output lease cannot be copied: its block has one owner")


def _lease_type(nbytes: int) -> type:
    lease = _lease_types.get(nbytes)
    if lease is None:
        if len(_lease_types) >= 64:
            _lease_types.clear()
        lease = _lease_types[nbytes] = type(
            "OutputLease", (ctypes.c_char * nbytes,),
            {"__del__": _release, "__reduce__": _refuse_copy, "__copy__": _refuse_copy,
             "__deepcopy__": _refuse_copy})
    return lease


def _release(lease) -> None:
    """Return a dead lease's block to the pool.

    A finaliser may run inside this module on the same thread (a garbage
    collection during an allocation), so it never waits for the lock: on
    contention the block is simply freed.
    """
    global _idle_bytes
    block = lease.__dict__.pop("block", None)
    if block is None or not _lock.acquire(blocking=False):
        return
    try:
        if block.nbytes <= _idle_limit:
            _evict(block.nbytes)
            _idle.append(block)
            _idle_bytes += block.nbytes
    finally:
        _lock.release()


def _take(nbytes: int) -> _Block:
    global _idle_bytes
    with _lock:
        for index in range(len(_idle) - 1, -1, -1):
            if _idle[index].nbytes == nbytes:
                block = _idle[index]
                del _idle[index]
                _idle_bytes -= nbytes
                return block
    return _Block(nbytes)


def block_bytes(nbytes: int) -> int:
    """The size of the block that holds ``nbytes``: rounded up to a sixteenth of its
    octave."""
    octave = 1 << (nbytes.bit_length() - 1)
    granule = max(ALIGNMENT, octave // SIZES_PER_OCTAVE)
    return -(-nbytes // granule) * granule


def recycled_from(dtype: np.dtype) -> int:
    """The element count from which :func:`empty` may recycle: hot paths check it themselves
    and call ``np.empty`` below it, saving the call."""
    return -(-INTERMEDIATE_MINIMUM_BYTES // dtype.itemsize)


def intermediates(on: bool) -> None:
    """Whether the outputs this thread makes next are a session's intermediates, recycled
    from ``INTERMEDIATE_MINIMUM_BYTES`` on (a session says so around the steps whose
    outputs it does not return)."""
    _intermediate.on = on


def empty(shape: tuple[int, ...], dtype: np.dtype, aligned: bool = False,
          like: np.ndarray | None = None) -> np.ndarray:
    """``np.empty(shape, dtype)``, from a recycled block when the array is large.

    Recycled blocks start on a cache line (:func:`aligned_empty`); ``aligned`` places smaller
    arrays there too, at a small cost per array: for an operand that a product reads in
    place (:mod:`kerneltune._support.aligned` says why). A recycled output of an elementwise
    kernel starts where its input ``like`` does within a cache line: a loop that stores one
    stream aligned and loads the other across cache lines runs up to a fifth slower
    (docs/kernels.md, Output blocks).
    """
    if not isinstance(dtype, np.dtype):
        dtype = np.dtype(dtype)
    nbytes = dtype.itemsize * math.prod(shape)
    minimum = (INTERMEDIATE_MINIMUM_BYTES if getattr(_intermediate, "on", False)
               else RECYCLE_MINIMUM_BYTES)
    if nbytes < minimum or not _idle_limit:
        return aligned_empty(shape, dtype) if aligned else np.empty(shape, dtype)
    offset = 0
    if like is not None:
        offset = like.ctypes.data % ALIGNMENT // dtype.itemsize * dtype.itemsize
    block = _take(block_bytes(nbytes + offset))
    lease = _lease_type(block.nbytes).from_address(block.address)
    lease.block = block
    return np.frombuffer(lease, dtype, nbytes // dtype.itemsize, offset).reshape(shape)


def _forget_in_child() -> None:
    """A forked child starts with an empty pool and a free lock, whatever its parent held."""
    global _lock, _idle_bytes
    _lock = threading.Lock()
    _idle.clear()
    _idle_bytes = 0


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_in_child)
