"""Registry: transactional publication, precedence, ambiguity, snapshots and counters."""

from __future__ import annotations

import threading

import pytest

from conftest import ToyConfig, execution, toy_key
from kerneltune.errors import (
    AmbiguousProfileError,
    KernelTuningError,
    TuningValidationError,
    UnknownKernelError,
)
from kerneltune.machine.selectors import CpuSelector, Tier
from kerneltune.tuning.registry import AccessCounts, KernelTuningProfile, KernelTuningRegistry

GRAIN = "parallel.minimum_elements"

EXACT = CpuSelector(vendor="amd", family=25, models=[17])
GROUP = CpuSelector(microarchitecture="zen4")
ISA = CpuSelector(required_features=["avx512f"])
PORTABLE = CpuSelector(architecture="x86_64")


@pytest.fixture
def registry(key) -> KernelTuningRegistry:
    registry = KernelTuningRegistry()
    registry.register_schema(key, ToyConfig)
    return registry


def grain(resolution) -> int:
    return resolution.values[GRAIN]


def test_defaults_without_profiles(registry, key):
    resolution = registry.resolve(key, execution())
    assert resolution.source.tier is Tier.DEFAULTS
    assert dict(resolution.values) == registry.snapshot().schema(key).default_values()
    assert resolution.rejected == ()


def test_a_second_schema_for_one_key_is_an_error(registry, key):
    with pytest.raises(KernelTuningError, match="already registered"):
        registry.register_schema(key, ToyConfig)


def test_unknown_key_is_an_error(registry):
    with pytest.raises(UnknownKernelError, match="Exp"):
        registry.resolve(toy_key("Exp"), execution())


def test_profile_values_are_completed_with_defaults(registry, key):
    registry.register_profile(key, EXACT, {GRAIN: 4096}, name="zen4-exact")
    resolution = registry.resolve(key, execution())
    assert grain(resolution) == 4096
    assert resolution.values["algorithm.tile_m"] == 64
    assert resolution.source.profile_name == "zen4-exact"
    assert resolution.source.tier is Tier.EXACT_PROCESSOR
    assert len(resolution.source.digest) == 64


def _full_stack(key, layers):
    """A registry holding the given layers, each with a value that names it."""
    registry = KernelTuningRegistry()
    registry.register_schema(key, ToyConfig)
    selectors = {"exact": EXACT, "group": GROUP, "isa": ISA, "portable": PORTABLE}
    values = {"calibrated": 10, "exact": 20, "group": 30, "isa": 40, "portable": 50}
    for layer in layers:
        if layer == "calibrated":
            registry.register_profiles([KernelTuningProfile(key, {GRAIN: values[layer]},
                                                            execution=execution())])
        elif layer in selectors:
            registry.register_profile(key, selectors[layer], {GRAIN: values[layer]}, name=layer)
    return registry


PRECEDENCE = [
    ("override", Tier.OVERRIDE, 1),
    ("calibrated", Tier.CALIBRATED, 10),
    ("exact", Tier.EXACT_PROCESSOR, 20),
    ("group", Tier.PROCESSOR_GROUP, 30),
    ("isa", Tier.INSTRUCTION_SET, 40),
    ("portable", Tier.PORTABLE, 50),
    ("defaults", Tier.DEFAULTS, 32768),
]


@pytest.mark.parametrize("top", range(len(PRECEDENCE)))
def test_precedence_each_step_by_removing_the_one_above(key, top):
    layers = [name for name, _, _ in PRECEDENCE[top:]]
    registry = _full_stack(key, layers)
    overrides = {GRAIN: 1} if "override" in layers else None
    resolution = registry.resolve(key, execution(), overrides)
    name, tier, value = PRECEDENCE[top]
    assert resolution.source.tier is tier
    assert grain(resolution) == value
    below = {r.reason for r in resolution.rejected}
    assert below <= {"tier"}
    registered = [layer for layer in layers if layer not in ("override", "defaults")]
    assert len(resolution.rejected) == max(len(registered) - 1, 0)  # all but the chosen base


def test_override_keeps_its_base_source(key):
    registry = _full_stack(key, ["exact"])
    resolution = registry.resolve(key, execution(), {"algorithm.layout": "column"})
    assert resolution.source.tier is Tier.OVERRIDE
    assert resolution.base_source.profile_name == "exact"
    assert resolution.overridden == ("algorithm.layout",)
    assert grain(resolution) == 20 and resolution.values["algorithm.layout"] == "column"


def test_invalid_override_is_rejected(registry, key):
    with pytest.raises(TuningValidationError) as error:
        registry.resolve(key, execution(), {GRAIN: -1, "nonsense": 3})
    assert {p.field for p in error.value.problems} == {GRAIN, "nonsense"}


def test_priority_breaks_ties_only_within_a_tier(registry, key):
    registry.register_profile(key, GROUP, {GRAIN: 1000}, priority=0, name="zen4")
    registry.register_profile(key, CpuSelector(vendor="amd", family=25), {GRAIN: 2000},
                              priority=5, name="family")
    registry.register_profile(key, ISA, {GRAIN: 3000}, priority=100, name="isa")
    resolution = registry.resolve(key, execution())
    assert resolution.source.profile_name == "family"
    reasons = {r.profile_name: r.reason for r in resolution.rejected}
    assert reasons == {"zen4": "priority", "isa": "tier"}
    # A high priority never lifts a profile over a more specific tier.
    registry.register_profile(key, EXACT, {GRAIN: 4000}, priority=-100, name="exact")
    assert registry.resolve(key, execution()).source.profile_name == "exact"


def test_ambiguous_profiles_are_rejected(registry, key):
    registry.register_profile(key, GROUP, {GRAIN: 1000}, name="first")
    generation = registry.generation
    with pytest.raises(AmbiguousProfileError, match="first"):
        registry.register_profile(key, CpuSelector(vendor="amd", family=25), {GRAIN: 2000},
                                  name="second")
    assert registry.generation == generation
    # Same tier, other priority: fine. Same tier and priority but disjoint: fine.
    registry.register_profile(key, CpuSelector(vendor="amd", family=25), {GRAIN: 2000},
                              priority=1)
    registry.register_profile(key, CpuSelector(microarchitecture="zen3"), {GRAIN: 3000})


def test_ambiguity_inside_one_batch_is_rejected(registry, key):
    batch = [KernelTuningProfile(key, {GRAIN: n}, selector=ISA) for n in (1, 2)]
    with pytest.raises(AmbiguousProfileError):
        registry.register_profiles(batch)
    assert registry.snapshot().profiles(key) == ()


def test_identical_profile_is_kept_once(registry, key):
    for _ in range(2):
        registry.register_profile(key, GROUP, {GRAIN: 1000}, name="same")
    assert len(registry.snapshot().profiles(key)) == 1


def test_batch_with_one_invalid_profile_publishes_nothing(registry, key):
    other = toy_key("Neg")
    registry.register_schema(other, ToyConfig)
    generation = registry.generation
    batch = [
        KernelTuningProfile(key, {GRAIN: 100}, selector=GROUP, name="good"),
        KernelTuningProfile(other, {GRAIN: 0}, selector=GROUP, name="bad", origin="farm.yaml"),
        KernelTuningProfile(toy_key("Unknown"), {GRAIN: 5}, selector=GROUP, name="nokey"),
        KernelTuningProfile(key, {GRAIN: 7}, execution=execution()),
    ]
    with pytest.raises(TuningValidationError) as error:
        registry.register_profiles(batch)
    problems = error.value.problems
    assert [(p.field, p.file) for p in problems] == [(GRAIN, "farm.yaml"), ("key", None)]
    assert "bad" in problems[0].entry and "nokey" in problems[1].entry
    assert registry.generation == generation
    assert registry.snapshot().profiles() == ()
    assert registry.resolve(key, execution()).source.tier is Tier.DEFAULTS


def test_profile_requires_exactly_one_binding(key):
    with pytest.raises(TuningValidationError, match="exactly one"):
        KernelTuningProfile(key, {GRAIN: 1})
    with pytest.raises(TuningValidationError, match="exactly one"):
        KernelTuningProfile(key, {GRAIN: 1}, selector=GROUP, execution=execution())


def test_old_snapshots_keep_their_profiles(registry, key):
    registry.register_profile(key, GROUP, {GRAIN: 1000}, name="old")
    old = registry.snapshot()
    registry.register_profile(key, GROUP, {GRAIN: 2000}, priority=1, name="new")
    registry.register_profiles([KernelTuningProfile(key, {GRAIN: 3000}, execution=execution())])
    assert grain(old.resolve(key, execution())) == 1000
    assert old.resolve(key, execution()).source.profile_name == "old"
    assert grain(registry.resolve(key, execution())) == 3000
    assert old.number < registry.generation


def test_calibrated_profile_is_bound_to_the_execution_identity(registry, key):
    registry.register_profiles([KernelTuningProfile(key, {GRAIN: 111}, execution=execution(2))])
    assert grain(registry.resolve(key, execution(2))) == 111
    # Same processor, other thread count: not this calibration.
    one_thread = registry.resolve(key, execution(1))
    assert one_thread.source.tier is Tier.DEFAULTS
    assert [r.reason for r in one_thread.rejected] == ["execution"]
    # Same shape on other CPU ids: the same identity.
    from kerneltune.machine.descriptor import CpuExecutionDescriptor

    moved = CpuExecutionDescriptor(execution(2).processor, 2, frozenset({6, 7}), 2)
    assert grain(registry.resolve(key, moved)) == 111


def test_recalibration_replaces_the_previous_profile(registry, key):
    for value in (111, 222):
        registry.register_profiles([KernelTuningProfile(key, {GRAIN: value},
                                                        execution=execution())])
    assert grain(registry.resolve(key, execution())) == 222
    assert len(registry.snapshot().profiles(key)) == 1


def test_no_fallback_across_element_types_or_abis(registry, key):
    double = toy_key(element_type="DOUBLE")
    abi2 = toy_key(tuning_abi=2)
    for other in (double, abi2):
        registry.register_schema(other, ToyConfig)
        registry.register_profile(other, GROUP, {GRAIN: 5}, name=f"for-{other.element_type}-"
                                                                  f"{other.tuning_abi}")
    resolution = registry.resolve(key, execution())
    assert resolution.source.tier is Tier.DEFAULTS
    assert sorted(r.reason for r in resolution.rejected) == ["abi", "element_type"]


def test_rejection_reasons_name_the_failing_field(registry, key):
    registry.register_profile(key, CpuSelector(vendor="intel"), {GRAIN: 1}, name="intel")
    registry.register_profile(key, CpuSelector(vendor="amd", maximum_threads=1), {GRAIN: 2},
                              name="one-thread")
    reasons = {r.profile_name: r.reason for r in registry.resolve(key, execution(2)).rejected}
    assert reasons == {"intel": "selector:vendor", "one-thread": "threads"}


def test_tuning_modes(registry, key):
    registry.register_profile(key, GROUP, {GRAIN: 1000}, name="zen4")
    registry.register_profile(key, ISA, {GRAIN: 2000}, name="isa")
    snapshot = registry.snapshot()
    portable = snapshot.resolve(key, execution(), tuning="portable")
    assert portable.source.tier is Tier.DEFAULTS
    assert {r.reason for r in portable.rejected} == {"tuning"}
    named = snapshot.resolve(key, execution(), profile_name="isa")
    assert named.source.profile_name == "isa"
    digest = named.source.digest
    assert snapshot.resolve(key, execution(), profile_digest=digest).source.profile_name == "isa"
    assert snapshot.resolve(key, execution(), profile_name="absent").source.tier is Tier.DEFAULTS
    with pytest.raises(KernelTuningError, match="tuning must be"):
        snapshot.resolve(key, execution(), tuning="fastest")


def test_access_counters_are_exact(registry, key):
    start = registry.access_counts()
    snapshot = registry.snapshot()
    snapshot.resolve(key, execution())
    snapshot.resolve(key, execution())
    snapshot.schema(key)
    registry.resolve(key, execution())
    end = registry.access_counts()
    assert end == AccessCounts(start.snapshots + 2, start.lookups + 4, start.resolutions + 3)


def test_counters_do_not_move_when_nothing_reads(registry):
    before = registry.access_counts()
    assert registry.access_counts() == before
    assert registry.generation == registry.generation


def test_concurrent_resolution_sees_only_complete_generations(registry, key):
    """Each batch sets every key to its batch number; a reader must never mix two batches."""
    keys = [key] + [toy_key(f"K{i}") for i in range(3)]
    for k in keys[1:]:
        registry.register_schema(k, ToyConfig)
    stop = threading.Event()
    torn: list[tuple[int, ...]] = []
    resolved = [0] * 8

    def reader(slot: int) -> None:
        while not stop.is_set():
            snapshot = registry.snapshot()
            values = tuple(grain(snapshot.resolve(k, execution())) for k in keys)
            if len(set(values)) != 1:
                torn.append(values)
            resolved[slot] += 1

    def publisher() -> None:
        for batch in range(1, 201):
            registry.register_profiles(
                KernelTuningProfile(k, {GRAIN: batch}, execution=execution()) for k in keys)
        stop.set()

    threads = [threading.Thread(target=reader, args=(i,)) for i in range(8)]
    threads.append(threading.Thread(target=publisher))
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    assert not torn
    assert all(resolved)
    assert grain(registry.resolve(key, execution())) == 200
    counts = registry.access_counts()
    assert counts.resolutions == sum(resolved) * len(keys) + 1


def test_resolution_with_many_profiles_picks_the_matching_one(registry, key):
    profiles = [
        KernelTuningProfile(key, {GRAIN: 1000 + model}, name=f"model-{model}",
                            selector=CpuSelector(vendor="amd", family=25, models=[model]))
        for model in range(200)
    ]
    profiles += [
        KernelTuningProfile(key, {GRAIN: 5000 + t}, name=f"threads-{t}", priority=t,
                            selector=CpuSelector(required_features=["avx2"], minimum_threads=t,
                                                 maximum_threads=t))
        for t in range(1, 50)
    ]
    registry.register_profiles(profiles)
    assert registry.resolve(key, execution(2)).source.profile_name == "model-17"
    assert registry.resolve(key, execution(2, model=250)).source.profile_name == "threads-2"
    assert len(registry.resolve(key, execution(2)).rejected) == len(profiles) - 1


def test_every_ambiguity_of_a_batch_is_named_and_nothing_is_published(registry, key):
    batch = [KernelTuningProfile(key, {GRAIN: n}, selector=ISA, name=f"p{n}") for n in (1, 2, 3)]
    generation = registry.generation
    with pytest.raises(AmbiguousProfileError) as raised:
        registry.register_profiles(iter(batch))
    assert "p2" in str(raised.value) and "p3" in str(raised.value)
    assert registry.generation == generation


def test_check_profiles_reports_what_registration_would_refuse_and_publishes_nothing(
        registry, key):
    registry.register_profile(key, ISA, {GRAIN: 1000}, name="first")
    generation = registry.generation
    clash = KernelTuningProfile(key, {GRAIN: 2000}, selector=ISA, name="second")
    bad = KernelTuningProfile(key, {GRAIN: 0}, selector=ISA, priority=1, name="bad")
    fine = KernelTuningProfile(key, {GRAIN: 2000}, selector=ISA, priority=2, name="fine")
    assert any("second" in problem for problem in registry.check_profiles([clash]))
    assert any("parallel.minimum_elements" in problem for problem in registry.check_profiles([bad]))
    assert registry.check_profiles([fine]) == ()
    assert registry.generation == generation
    assert registry.register_profiles(iter([fine])) == (fine,)


def test_disjoint_thread_ranges_of_one_selector_never_overlap():
    one = CpuSelector(vendor="amd", family=25, models=[17], minimum_threads=1, maximum_threads=1)
    two = CpuSelector(vendor="amd", family=25, models=[17], minimum_threads=2, maximum_threads=3)
    assert not one.can_overlap(two) and two.can_overlap(
        CpuSelector(vendor="amd", family=25, minimum_threads=3))
