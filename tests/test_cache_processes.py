"""The cache under real processes: writers killed mid-update, many writers at once.

Writers are forked by multiprocessing's fork server, which has imported this
module: they start in milliseconds with the package already imported, and
from a process that runs nothing else. A fork of the test process itself
copies the state of its other threads (the kernels' OpenMP pool, the BLAS
threads, the test runner's) half-way, and a few of those children hung or
crashed before their first write.
"""

from __future__ import annotations

import multiprocessing
import os
import random
import signal
import time

import pytest

from conftest import ToyConfig, execution, toy_key
from kerneltune.cache.kernel_tuning_cache import (
    inspect_kernel_tuning_cache,
    load_kernel_tuning_cache,
    update_kernel_tuning_cache,
)
from kerneltune.tuning.registry import KernelTuningProfile, KernelTuningRegistry

pytestmark = pytest.mark.skipif(
    "forkserver" not in multiprocessing.get_all_start_methods()
    or not hasattr(signal, "SIGKILL"), reason="a fork server and SIGKILL")

FORK = None
if "forkserver" in multiprocessing.get_all_start_methods():
    FORK = multiprocessing.get_context("forkserver")
    FORK.set_forkserver_preload([__name__])


def keys(prefix: str, count: int) -> list:
    return [toy_key(f"{prefix}{n}") for n in range(count)]


def registry_of(keys_: list) -> KernelTuningRegistry:
    registry = KernelTuningRegistry()
    registry.register_schemas((key, ToyConfig) for key in keys_)
    return registry


def entry_for(key, n: int) -> KernelTuningProfile:
    return KernelTuningProfile(key, {"parallel.minimum_elements": 1000 + n},
                               execution=execution(2), origin="calibration",
                               report_digest=f"report-{n}")


SEQUENCE = keys("Step", 400)


def append_forever(path: str, ready) -> None:
    """Add entry n to a cache of n entries, again and again, until killed."""
    registry = registry_of(SEQUENCE)
    ready.set()
    while True:
        n = len(inspect_kernel_tuning_cache(path).entries)
        if n == len(SEQUENCE):  # a fast machine got to the end: wait for the kill
            time.sleep(1)
            continue
        update_kernel_tuning_cache([entry_for(SEQUENCE[n], n)], path, registry=registry)


def test_killed_writers_leave_the_previous_or_the_next_complete_file(tmp_path):
    path = tmp_path / "kernel_tuning.yaml"
    rng = random.Random(20240601)
    seen = 0
    for _ in range(40):
        ready = FORK.Event()
        writer = FORK.Process(target=append_forever, args=(str(path), ready))
        writer.start()
        assert ready.wait(60), "a writer did not start"
        time.sleep(rng.uniform(0.002, 0.06))  # the kill lands anywhere in its updates
        os.kill(writer.pid, signal.SIGKILL)
        writer.join()
        assert writer.exitcode == -signal.SIGKILL
        inspection = inspect_kernel_tuning_cache(path)
        if inspection.status == "not_found":
            assert seen == 0
            continue
        assert inspection.status == "ok", inspection.problems
        assert not inspection.invalid and not inspection.duplicate
        entries = inspection.entries
        assert [e.key for e in entries] == SEQUENCE[:len(entries)]
        assert all(e.values == {"parallel.minimum_elements": 1000 + n}
                   and e.report_digest == f"report-{n}" for n, e in enumerate(entries))
        assert len(entries) >= seen
        seen = len(entries)
    assert seen > 0
    loaded = load_kernel_tuning_cache(path=path, execution=execution(2),
                                      registry=registry_of(SEQUENCE))
    assert len(loaded.loaded) == seen and not loaded.invalid


WRITERS, ROUNDS = 8, 12


def merge_own_entries(path: str, writer: int) -> None:
    """Add this writer's entries one update at a time, rewriting its first entry each round."""
    own = keys(f"W{writer}x", ROUNDS)
    registry = registry_of(own)
    for n in range(ROUNDS):
        profiles = [entry_for(own[n], n), entry_for(own[0], 100 + n)]
        report = update_kernel_tuning_cache(profiles[:1] if n == 0 else profiles, path,
                                            registry=registry, lock_timeout=60)
        if report.status != "updated":
            raise SystemExit(f"writer {writer}: {report.status} {report.problems}")


def read_while_writing(path: str, stop) -> None:
    while not stop.is_set():
        status = inspect_kernel_tuning_cache(path).status
        if status not in ("ok", "not_found"):
            raise SystemExit(f"reader saw {status}")


def test_concurrent_writers_keep_every_entry(tmp_path):
    path = tmp_path / "kernel_tuning.yaml"
    stop = FORK.Event()
    reader = FORK.Process(target=read_while_writing, args=(str(path), stop))
    reader.start()
    writers = [FORK.Process(target=merge_own_entries, args=(str(path), w))
               for w in range(WRITERS)]
    for writer in writers:
        writer.start()
    for writer in writers:
        writer.join(timeout=120)
    stop.set()
    reader.join(timeout=30)
    assert [w.exitcode for w in writers] == [0] * WRITERS
    assert reader.exitcode == 0
    inspection = inspect_kernel_tuning_cache(path)
    assert inspection.status == "ok" and not inspection.invalid and not inspection.duplicate
    found = {e.key: dict(e.values) for e in inspection.entries}
    assert len(found) == WRITERS * ROUNDS
    for writer in range(WRITERS):
        own = keys(f"W{writer}x", ROUNDS)
        assert found[own[0]] == {"parallel.minimum_elements": 100 + ROUNDS - 1 + 1000}
        assert all(found[own[n]] == {"parallel.minimum_elements": 1000 + n}
                   for n in range(1, ROUNDS))
    assert not list(tmp_path.glob("*.tmp"))
