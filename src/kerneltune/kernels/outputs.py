"""Output arrays whose large buffers are recycled once their owner lets go.

A fresh 64 MB output costs the kernel as much as the kernel itself: the C
library maps new pages for every allocation above its mmap threshold (at
most 32 MiB with glibc), and the operating system faults and zeroes each of
them on first touch. onnxruntime's arena avoids it by reusing memory. This
module does the same for kernel outputs without giving up ownership: a large
output is a view of a pooled block through a *lease*, and the block returns
to the pool only when the lease dies, that is when the array and every view
of it are gone. Until then nobody else sees the block, so each output is as
much the caller's as ``np.empty`` would make it.

Blocks wait in the pool up to :func:`set_idle_limit` bytes (0 turns recycling
off); a block that would exceed it is freed.
"""

from __future__ import annotations

import ctypes
import threading

import numpy as np

#: Below this, the C library's own heap already reuses freed memory.
RECYCLE_MINIMUM_BYTES = 16 << 20
#: Blocks are sized in these steps, so nearby shapes share them.
BLOCK_GRANULE = 2 << 20
#: Alignment of every recycled output, a cache line and every SIMD width.
ALIGNMENT = 64

_lock = threading.Lock()
_idle: dict[int, list[_Block]] = {}
_idle_bytes = 0
_idle_limit = 512 << 20
_lease_types: dict[int, type] = {}


class _Block:
    __slots__ = ("address", "nbytes", "storage")

    def __init__(self, nbytes: int):
        self.storage = np.empty(nbytes + ALIGNMENT, np.uint8)
        self.address = -self.storage.ctypes.data % ALIGNMENT + self.storage.ctypes.data
        self.nbytes = nbytes


def set_idle_limit(nbytes: int) -> int:
    """Keep at most ``nbytes`` of released output blocks for reuse; returns the old limit.

    0 frees every block as soon as its output is gone, as ``np.empty`` would.
    """
    global _idle_limit, _idle_bytes
    if nbytes < 0:
        raise ValueError(f"the idle limit must be at least 0 bytes, got {nbytes}")
    with _lock:
        previous, _idle_limit = _idle_limit, nbytes
        while _idle_bytes > _idle_limit:
            size = max(_idle)
            _idle[size].pop()
            _idle_bytes -= size
            if not _idle[size]:
                del _idle[size]
    return previous


def idle_bytes() -> int:
    """Bytes of output blocks waiting for reuse."""
    return _idle_bytes


def _lease_type(nbytes: int) -> type:
    lease = _lease_types.get(nbytes)
    if lease is None:
        if len(_lease_types) >= 64:
            _lease_types.clear()
        lease = _lease_types[nbytes] = type(
            "OutputLease", (ctypes.c_char * nbytes,), {"__del__": _release})
    return lease


def _release(lease) -> None:
    """Return a dead lease's block to the pool.

    A finaliser may run inside :func:`empty` on the same thread (a garbage
    collection during an allocation), so it never waits for the lock: on
    contention the block is simply freed.
    """
    global _idle_bytes
    block = lease.block
    if not _lock.acquire(blocking=False):
        return
    try:
        if _idle_bytes + block.nbytes <= _idle_limit:
            _idle.setdefault(block.nbytes, []).append(block)
            _idle_bytes += block.nbytes
    finally:
        _lock.release()


def _take(nbytes: int) -> _Block:
    global _idle_bytes
    with _lock:
        blocks = _idle.get(nbytes)
        if blocks:
            _idle_bytes -= nbytes
            block = blocks.pop()
            if not blocks:
                del _idle[nbytes]
            return block
    return _Block(nbytes)


def recycled_from(dtype: np.dtype) -> int:
    """The element count from which :func:`empty` recycles, for a caller's own fast check."""
    return -(-RECYCLE_MINIMUM_BYTES // np.dtype(dtype).itemsize)


def empty(shape: tuple[int, ...], dtype: np.dtype) -> np.ndarray:
    """``np.empty(shape, dtype)``, from a recycled block when the array is large."""
    dtype = np.dtype(dtype)
    nbytes = dtype.itemsize * int(np.prod(shape, dtype=np.int64))
    if nbytes < RECYCLE_MINIMUM_BYTES or not _idle_limit:
        return np.empty(shape, dtype)
    block = _take(-(-nbytes // BLOCK_GRANULE) * BLOCK_GRANULE)
    lease = _lease_type(block.nbytes).from_address(block.address)
    lease.block = block
    return np.frombuffer(lease, dtype, nbytes // dtype.itemsize).reshape(shape)
