"""Python threads that share a compiled loop's chunks with the calling thread.

pythran's exports release the GIL while they compute, so a large product of several
threads can run on the calling thread and ``threads - 1`` of these workers, each calling an
export without a parallel region on chunks of its tasks (docs/kernels.md, "Workers").

The calling thread takes chunks too and never waits for a worker that has not started: a
worker that the scheduler keeps off a CPU (a busy host) leaves its chunks to the others,
and the call waits only for chunks already begun.
"""

from __future__ import annotations

import functools
import os
import threading
import weakref
from collections.abc import Callable


class _Job:
    """``count`` chunks of one call, claimed one at a time by at most ``parties`` threads."""

    def __init__(self, count: int, function: Callable[[int], None], parties: int):
        self.count, self.function, self.parties = count, function, parties
        self._lock = threading.Lock()
        self._claimed = self._finished = 0
        self._joined = 1  # the calling thread
        self._done = threading.Event()
        self.error: BaseException | None = None

    def join(self) -> bool:
        """Whether a worker may take part: the job's threads stay within ``parties``."""
        with self._lock:
            if self._joined >= self.parties or self._claimed >= self.count:
                return False
            self._joined += 1
            return True

    def work(self) -> None:
        """Runs chunks until none is left to claim."""
        while True:
            with self._lock:
                chunk = self._claimed
                if chunk >= self.count:
                    return
                self._claimed += 1
            try:
                self.function(chunk)
            except BaseException as error:  # raised again on the calling thread
                self.error = self.error or error
            with self._lock:
                self._finished += 1
                if self._finished == self.count:
                    self._done.set()

    def wait(self) -> None:
        self._done.wait()


class Workers:
    """Worker threads of one kernel, started when a call first needs them.

    A process that forks gets none of them in the child: this object starts new ones there.
    """

    def __init__(self) -> None:
        self._forget()
        # a fork may copy the lock held by a worker that the child does not have
        os.register_at_fork(after_in_child=functools.partial(_forget_in_child,
                                                             weakref.ref(self)))

    def _forget(self) -> None:
        self._wake = threading.Condition()
        self._job: _Job | None = None
        self._posted = 0
        self._started = 0

    def run(self, count: int, function: Callable[[int], None], threads: int) -> None:
        """``function(chunk)`` for every chunk in ``range(count)``, on the calling thread and
        at most ``threads - 1`` workers; returns when every chunk is done, raising the
        first error a chunk raised."""
        if count <= 0:
            return
        job = _Job(count, function, threads)
        if count > 1 and threads > 1:
            self._post(job, threads - 1)
        job.work()
        job.wait()
        if job.error is not None:
            raise job.error

    def _post(self, job: _Job, wanted: int) -> None:
        with self._wake:
            while self._started < wanted:
                threading.Thread(target=self._serve, name="kerneltune-worker",
                                 daemon=True).start()
                self._started += 1
            self._job = job
            self._posted += 1
            self._wake.notify_all()

    def _serve(self) -> None:
        seen = 0
        while True:
            with self._wake:
                while self._posted == seen:
                    self._wake.wait()
                seen, job = self._posted, self._job
            if job is not None and job.join():
                job.work()


def _forget_in_child(workers: weakref.ref[Workers]) -> None:
    """A forked child's copy of ``workers`` has no threads and a lock no thread of its own
    may hold: it starts afresh."""
    alive = workers()
    if alive is not None:
        alive._forget()

