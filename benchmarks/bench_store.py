"""Cost of the calibration profile store's lookups and stores at 100 and 10,000 profiles.

Each store holds profiles of ten backends, half exact (one per thread count)
and half portable (one per shape pattern); the key looked up has an exact
calibrated profile and a portable sibling, so a lookup misses both override
tiers before it selects. Figures are medians of ``-r`` runs:

- lookup: ``store.lookup(key, structure)`` in memory, ns per call over ``-n``
  calls, against a plain ``dict`` lookup of the same key in the same run (the
  floor of any index); ``rejected``: reading the reasons of every other
  profile, once per fresh lookup;
- store: one ``store()`` of a replaced policy (lock, re-read and check the
  file, merge, write a temporary, fsync, replace, fsync the directory),
  against a bare atomic write of the same text; load: a new store reading
  the file.

    python benchmarks/bench_store.py -r 7
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

from results import Recorder, add_arguments

from kerneltune._support.files import write_atomically
from kerneltune.store import CalibrationProfile, CalibrationProfileKey, CalibrationProfileStore
from kerneltune.store.file import serialise

SIZES = (100, 10_000)
BACKENDS = 10
STRUCTURE = {"dtype": "float16", "shape": "m,n,pattern0"}
POLICY = '{"split_k": false, "tile_m": 128, "tile_n": 64}'


def exact(backend: int, threads: int) -> CalibrationProfileKey:
    return CalibrationProfileKey(f"backend{backend}", "MatMul", "3", model_digest="0f" * 8,
                                 processor="bench-gpu sm_90, 50 MiB L2", thread_count=threads)


def filled(count: int, path: Path) -> CalibrationProfileStore:
    """A store of ``count`` profiles, written as one file (a store of one ``store()`` each
    would rewrite the file ``count`` times)."""
    per_backend = count // BACKENDS // 2
    keys = [key for backend in range(BACKENDS) for n in range(per_backend)
            for key in (exact(backend, n + 1),
                        exact(backend, 1).portable({**STRUCTURE, "shape": f"m,n,pattern{n}"}))]
    path.write_text(serialise(CalibrationProfile(key, POLICY, (("median_latency", 2.5, "us"),))
                              for key in keys), encoding="utf-8")
    return CalibrationProfileStore(path)


def median_ns(function, calls: int, repeats: int) -> float:
    """The median over ``repeats`` runs of the time per call of ``calls`` calls."""
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        for _ in range(calls):
            function()
        times.append((time.perf_counter() - start) / calls * 1e9)
    return statistics.median(times)


def lookups(count: int, folder: Path, calls: int, repeats: int) -> dict[str, float]:
    store = filled(count, folder / f"lookup_{count}.json")
    key = exact(0, 1)
    found = store.lookup(key, STRUCTURE)
    assert found.selected is not None and found.selected.tier == "exact calibrated", found
    index = {profile.slot: profile for profile in store.profiles()}
    slot = ("calibrated", key)
    return {
        "lookup_ns": median_ns(lambda: store.lookup(key, STRUCTURE), calls, repeats),
        "dict_ns": median_ns(lambda: index[slot], calls, repeats),
        "rejected_us": median_ns(lambda: store.lookup(key, STRUCTURE).rejected,
                                 max(1, calls // count), repeats) / 1000,
    }


def stores(count: int, folder: Path, repeats: int) -> dict[str, float]:
    path = folder / f"profiles_{count}.json"
    store = filled(count, path)
    assert store.load_report.profiles == count, store.load_report
    key = exact(0, 1)
    values = iter(range(10**9))  # a new policy each run, so each one writes

    def store_once() -> None:
        policy = f'{{"run": {next(values)}}}'
        assert store.store(key, [("median_latency", 2.0, "us")], lambda: policy).written

    text = path.read_text(encoding="utf-8")
    copy = folder / f"copy_{count}.json"
    return {
        "store_ms": median_ns(store_once, 1, repeats) / 1e6,
        "write_ms": median_ns(lambda: write_atomically(copy, text), 1, repeats) / 1e6,
        "load_ms": median_ns(lambda: CalibrationProfileStore(path), 1, repeats) / 1e6,
        "file_kib": len(text.encode("utf-8")) / 1024,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-r", "--repeats", type=int, default=7)
    parser.add_argument("-n", "--calls", type=int, default=20_000)
    add_arguments(parser)
    args = parser.parse_args()
    recorder = Recorder(__file__, args)
    recorder.table("lookup", "in memory, ns per call by profiles stored; over_dict: the lookup's "
                   "time over a plain dict lookup of the same key (above 1: the dict is faster); "
                   "rejected_us: reading every other profile's reason once")
    recorder.table("store", "ms by profiles stored; over_write: store()'s time over a bare "
                   "atomic write of the same text; load_ms: a new store reading the file")
    print(f"{'profiles':>9} {'lookup ns':>10} {'dict ns':>8} {'over dict':>10} "
          f"{'rejected us':>12} {'store ms':>9} {'write ms':>9} {'over write':>11} "
          f"{'load ms':>8}")
    with tempfile.TemporaryDirectory() as folder:
        for count in SIZES:
            found = lookups(count, Path(folder), args.calls, args.repeats)
            written = stores(count, Path(folder), args.repeats)
            over_dict = found["lookup_ns"] / found["dict_ns"]
            over_write = written["store_ms"] / written["write_ms"]
            print(f"{count:>9} {found['lookup_ns']:>10.0f} {found['dict_ns']:>8.0f} "
                  f"{over_dict:>10.1f} {found['rejected_us']:>12.0f} {written['store_ms']:>9.2f} "
                  f"{written['write_ms']:>9.2f} {over_write:>11.1f} {written['load_ms']:>8.2f}")
            recorder.row("lookup", profiles=count, **found, over_dict=over_dict)
            recorder.row("store", profiles=count, **written, over_write=over_write)
            recorder.figure(f"lookup_over_dict_{count}", over_dict)
            recorder.figure(f"store_over_write_{count}", over_write)
    recorder.finish()
    return 0


if __name__ == "__main__":
    sys.exit(main())
