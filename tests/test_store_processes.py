"""The calibration profile store across real processes: a round trip, and 8 writers at once.

Children are spawned (a fresh interpreter each), so they share nothing with
the test process but the file: what one process stores, another finds only
through the file, the lock and the re-read before each write.
"""

from __future__ import annotations

import multiprocessing

from kerneltune.store import CalibrationProfileKey, CalibrationProfileStore

SPAWN = multiprocessing.get_context("spawn")
STRUCTURE = {"dtype": "float16", "shape": "m,n,4096"}
WRITERS = 8
PROFILES_EACH = 6
#: what the processes agree on the wire: a policy with every kind of character
POLICY = 'tiles "128x64"\n\tsplit_k=\\false\0 é'


def key(threads: int, backend: str = "example_gpu") -> CalibrationProfileKey:
    return CalibrationProfileKey(backend, "MatMul", "3", model_digest="d1", processor="gpu0",
                                 thread_count=threads)


def store_and_look_up(path: str, results) -> None:
    """In a child: look up what the parent stored, then store an exact profile of its own."""
    store = CalibrationProfileStore(path)
    found = store.lookup(key(8), STRUCTURE)
    results.put((store.load_report.status, found.selected.tier, found.selected.policy,
                 [(m.name, m.value, m.unit) for m in found.selected.measurements]))
    report = store.store(key(8), [("median_latency", 0.1 + 0.2, "µs")], lambda: POLICY + "!")
    results.put(report.status)


def test_round_trip_across_processes(tmp_path):
    path = tmp_path / "calibration_profiles.json"
    parent = CalibrationProfileStore(path)
    parent.store(key(8).portable(STRUCTURE), [("median_latency", 2.5, "us")], lambda: POLICY)
    results = SPAWN.Queue()
    child = SPAWN.Process(target=store_and_look_up, args=(str(path), results))
    child.start()
    try:
        assert results.get(timeout=120) == ("loaded", "portable calibrated", POLICY,
                                             [("median_latency", 2.5, "us")])
        assert results.get(timeout=120) == "stored"
    finally:
        child.join(120)
    assert child.exitcode == 0
    assert parent.lookup(key(8), STRUCTURE).selected.tier == "portable calibrated"
    assert parent.reload().profiles == 2
    selected = parent.lookup(key(8), STRUCTURE).selected
    assert (selected.tier, selected.policy) == ("exact calibrated", POLICY + "!")
    assert selected.measurements[0].value == 0.1 + 0.2 and selected.measurements[0].unit == "µs"


def write_many(path: str, writer: int, start, results) -> None:
    """In a child: wait for the others, then store profiles and fight over one override."""
    store = CalibrationProfileStore(path, lock_timeout=120)
    start.wait(120)
    statuses = []
    for n in range(PROFILES_EACH):
        statuses.append(store.store(key(1 + writer * PROFILES_EACH + n, f"backend{writer}"),
                                    [("median_latency", float(n), "us")],
                                    lambda n=n: f"writer {writer} profile {n}").status)
        statuses.append(store.install_override(key(1), lambda: f"override by {writer}").status)
    results.put((writer, statuses))


def test_eight_concurrent_writer_processes_all_land(tmp_path):
    path = tmp_path / "calibration_profiles.json"
    start, results = SPAWN.Event(), SPAWN.Queue()
    writers = [SPAWN.Process(target=write_many, args=(str(path), n, start, results))
               for n in range(WRITERS)]
    for writer in writers:
        writer.start()
    start.set()
    try:
        reported = dict(results.get(timeout=300) for _ in writers)
    finally:
        for writer in writers:
            writer.join(120)
    assert [writer.exitcode for writer in writers] == [0] * WRITERS
    assert all(statuses == ["stored", "installed"] * PROFILES_EACH
               for statuses in reported.values()), reported
    store = CalibrationProfileStore(path)
    assert store.load_report.status == "loaded"
    calibrated = {p.policy for p in store.profiles() if p.source == "calibrated"}
    assert calibrated == {f"writer {w} profile {n}" for w in range(WRITERS)
                          for n in range(PROFILES_EACH)}
    [override] = [p for p in store.profiles() if p.source == "override"]
    assert override.policy.startswith("override by ")
    assert sorted(p.name for p in tmp_path.iterdir()) == [path.name, path.name + ".lock"]
