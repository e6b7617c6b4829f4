"""An accelerated backend's whole persistence integration: the "example_gpu" MatMul.

The backend owns its policy (tile sizes and split-K) and how to serialise and
check it; kerneltune's CalibrationProfileStore owns the file, its lock, its
format and the merging with other processes. Nothing below opens a file.

    python examples/calibration_profile_backend.py [FILE]

FILE is the store's file; by default a temporary one, removed at the end.
"""

from __future__ import annotations

import hashlib
import json
import sys
import tempfile
from dataclasses import asdict, dataclass
from pathlib import Path

from kerneltune.store import (
    CalibrationProfileKey,
    CalibrationProfileLookup,
    CalibrationProfileStore,
)

#: the tile sizes this backend's MatMul kernels are compiled for
TILES = (16, 32, 64, 128)


@dataclass(frozen=True)
class ExamplePolicy:
    """What the backend decides per operator: the store never looks inside."""

    tile_m: int
    tile_n: int
    split_k: bool

    def serialize(self) -> str:
        return json.dumps(asdict(self), sort_keys=True)

    @staticmethod
    def validate_serialized(payload: str) -> str | None:
        """None when this build of the backend can run ``payload``, else why not."""
        data = json.loads(payload)  # a ValueError is a refusal too
        if set(data) != {"tile_m", "tile_n", "split_k"}:
            return f"fields {sorted(data)}"
        for name in ("tile_m", "tile_n"):
            if data[name] not in TILES:
                return f"{name} {data[name]} is not a compiled tile size"
        return None

    @classmethod
    def parse(cls, payload: str) -> ExamplePolicy:
        return cls(**json.loads(payload))


MODEL = b"an ONNX model's bytes"
KEY = CalibrationProfileKey(
    backend="example_gpu", operator_name="MatMul", implementation_version="3",
    model_digest=hashlib.sha256(MODEL).hexdigest()[:16],
    processor="example-gpu sm_90, 50 MiB L2", thread_count=8)
STRUCTURE = {"dtype": "float16", "shape": "m,n,4096"}


def show(title: str, lookup: CalibrationProfileLookup) -> None:
    selected = lookup.selected
    if selected is None:
        print(f"{title}: no profile")
    else:
        policy = ExamplePolicy.parse(selected.policy)
        measured = ", ".join(f"{m.name} {m.value:g} {m.unit}" for m in selected.measurements)
        print(f"{title}: {selected.tier}, tiles {policy.tile_m}x{policy.tile_n}, "
              f"split_k {policy.split_k}" + (f" ({measured})" if measured else ""))
    for rejection in lookup.rejected:
        print(f"    not {rejection.profile.tier}: {rejection.reason}: {rejection.message}")


def lookup(store: CalibrationProfileStore, key: CalibrationProfileKey = KEY,
           **options: bool) -> CalibrationProfileLookup:
    return store.lookup(key, STRUCTURE, validate=ExamplePolicy.validate_serialized, **options)


def main(path: Path) -> None:
    validate = ExamplePolicy.validate_serialized
    store = CalibrationProfileStore(path)
    exact = store.store(KEY, [("median_latency", 2.5, "us"), ("speedup", 1.8, "x")],
                        ExamplePolicy(128, 64, False).serialize, validate)
    portable = store.store(KEY.portable(STRUCTURE), [("median_latency", 3.1, "us")],
                           ExamplePolicy(64, 64, False).serialize, validate)
    bad = store.store(KEY, [("median_latency", 2.0, "us")],
                      ExamplePolicy(96, 64, False).serialize, validate)
    print(f"calibrated: exact {exact.status}, portable {portable.status}, "
          f"tile 96: {bad.status} ({bad.problems[0].message})")

    store = CalibrationProfileStore(path)  # the next run of the application
    print(f"next run: {store.load_report.status}, {store.load_report.profiles} profiles")
    show("this machine", lookup(store))
    show("4 threads", lookup(store, CalibrationProfileKey(
        "example_gpu", "MatMul", "3", KEY.model_digest, KEY.processor, 4)))

    override = store.install_override(KEY.portable(STRUCTURE),
                                      ExamplePolicy(32, 32, True).serialize, validate)
    print(f"user override: {override.status}")
    show("this machine", lookup(store))
    print(f"cleared: {store.clear_override(KEY.portable(STRUCTURE)).status}")
    show("forced portable", lookup(store, force_portable=True))

    upgraded = CalibrationProfileKey("example_gpu", "MatMul", "4", KEY.model_digest,
                                     KEY.processor, KEY.thread_count)
    show("implementation 4", lookup(store, upgraded))
    invalidated = store.invalidate("example_gpu", "3")
    print(f"invalidated implementation 3: {invalidated.status}, "
          f"{len(invalidated.removed)} removed, {len(store.profiles())} left")


if __name__ == "__main__":
    if len(sys.argv) > 1:
        main(Path(sys.argv[1]))
    else:
        with tempfile.TemporaryDirectory() as folder:
            main(Path(folder) / "calibration_profiles.json")
