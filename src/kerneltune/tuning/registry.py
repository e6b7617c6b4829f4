"""The process-wide tuning registry: schemas, profiles and immutable generations.

Writers copy the current generation, validate everything they add, then swap
one reference; a failing batch leaves the generation unchanged. Readers take a
:class:`TuningSnapshot` (one generation) and resolve against it, so a session
that resolved its kernels keeps its values whatever is published later.

The registry also keeps the code a kernel library registers with its schemas:
calibration functions by key and machine probes by (library, aspect). It
stores them as given; :mod:`kerneltune.calibration` validates and runs them.
"""

from __future__ import annotations

import functools
import threading
import types
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..errors import (
    AmbiguousProfileError,
    KernelTuningError,
    Problem,
    TuningValidationError,
    UnknownKernelError,
)
from ..machine.selectors import CpuSelector, Tier, overlapping_pairs
from .counters import Counters
from .resolution import (
    AccessCounts,
    KernelTuningProfile,
    RejectedCandidate,
    Resolution,
    TuningSource,
)
from .schema import KernelTuningKey, KernelTuningSchema, TuningValue

if TYPE_CHECKING:
    from ..machine.descriptor import CpuExecutionDescriptor
    from .libraries import KernelLibraryInfo

TUNING_MODES = ("resolved", "portable")


@dataclass(frozen=True, eq=False)
class _Entry:
    """A published profile with its complete values and its precedence, computed once."""

    profile: KernelTuningProfile
    resolved: Mapping[str, TuningValue]

    @functools.cached_property
    def order(self) -> tuple[int, int]:
        return (int(self.profile.tier), self.profile.priority)

    @functools.cached_property
    def threads(self) -> tuple[int, int]:
        """The selector's thread bounds, so resolution passes other ranges without a call."""
        s = self.profile.selector
        return (s.minimum_threads or 1, s.maximum_threads or 2**31)

    @functools.cached_property
    def source(self) -> TuningSource:
        p = self.profile
        return TuningSource(p.tier, p.name, p.digest, p.origin, p.priority)

    def rejected(self, reason: str) -> RejectedCandidate:
        p = self.profile
        return RejectedCandidate(p.label, p.digest, p.tier, p.priority, reason, p.origin)


@dataclass(frozen=True, eq=False)
class _KeyState:
    """Everything one generation knows about one key, found with a single dict lookup.

    Selector profiles are bucketed so resolution only tests plausible ones: a
    selector naming models is filed under each (vendor, family, model), one
    naming a microarchitecture under it, one naming a family under it; the
    rest (features, vendor, threads only) are always tested.
    """

    schema: KernelTuningSchema
    defaults: Mapping[str, TuningValue]
    calibrated: Mapping[tuple, _Entry]
    entries: tuple[_Entry, ...]
    by_model: Mapping[tuple, tuple[_Entry, ...]]
    by_microarchitecture: Mapping[str, tuple[_Entry, ...]]
    by_family: Mapping[tuple, tuple[_Entry, ...]]
    general: tuple[_Entry, ...]

    @classmethod
    def build(
        cls, schema: KernelTuningSchema, calibrated: Mapping[tuple, _Entry] | None = None,
        entries: Iterable[_Entry] = (),
    ) -> _KeyState:
        entries = tuple(entries)
        by_model: dict[tuple, list[_Entry]] = {}
        by_uarch: dict[str, list[_Entry]] = {}
        by_family: dict[tuple, list[_Entry]] = {}
        general = []
        for entry in entries:
            s = entry.profile.selector
            if s.models:
                for model in s.models:
                    by_model.setdefault((s.vendor, s.family, model), []).append(entry)
            elif s.microarchitecture:
                by_uarch.setdefault(s.microarchitecture, []).append(entry)
            elif s.family is not None:
                by_family.setdefault((s.vendor, s.family), []).append(entry)
            else:
                general.append(entry)
        return cls(schema, types.MappingProxyType(schema.default_values()),
                   types.MappingProxyType(dict(calibrated or {})), entries, _frozen(by_model),
                   _frozen(by_uarch), _frozen(by_family), _by_precedence(general))

    def buckets(self, processor: Any) -> tuple[tuple[_Entry, ...], ...]:
        """The buckets that may hold a profile for ``processor``, most specific first."""
        if not self.entries:
            return ()
        vendor, family = processor.vendor, processor.family
        return (
            self.by_model.get((vendor, family, processor.model), ()),
            self.by_microarchitecture.get(processor.microarchitecture, ()),
            self.by_family.get((vendor, family), ()),
            self.general,
        )

    def all_entries(self) -> tuple[_Entry, ...]:
        return (*self.calibrated.values(), *self.entries)


def _frozen(buckets: dict) -> Mapping:
    return types.MappingProxyType({k: _by_precedence(v) for k, v in buckets.items()})


def _by_precedence(entries: Iterable[_Entry]) -> tuple[_Entry, ...]:
    """Highest tier and priority first, so a scan can stop at its first match."""
    return tuple(sorted(entries, key=lambda entry: entry.order, reverse=True))


class TuningSnapshot:
    """One immutable registry generation. Resolution never sees a later publication."""

    def __init__(self, number: int, keys: Mapping[KernelTuningKey, _KeyState],
                 counters: Counters):
        self.number = number
        self._keys = keys
        self._counters = counters

    def _state(self, key: KernelTuningKey) -> _KeyState:
        try:
            return self._keys[key]
        except KeyError:
            raise UnknownKernelError(f"no tuning schema registered for {key}") from None

    def schema(self, key: KernelTuningKey) -> KernelTuningSchema:
        self._counters.lookup()
        return self._state(key).schema

    def keys(self) -> tuple[KernelTuningKey, ...]:
        return tuple(self._keys)

    def tuning_abis(self) -> dict[tuple, list[int]]:
        """The registered tuning ABIs of each key apart from its ABI (``key.without_abi``),
        ascending: what tells a stale entry from an unknown one."""
        abis: dict[tuple, list[int]] = {}
        for key in sorted(self._keys, key=lambda k: k.tuning_abi):
            abis.setdefault(key.without_abi, []).append(key.tuning_abi)
        return abis

    def profiles(self, key: KernelTuningKey | None = None) -> tuple[KernelTuningProfile, ...]:
        """Published profiles, of one key or all, calibrated ones first."""
        self._counters.lookup()
        states = [self._state(key)] if key is not None else list(self._keys.values())
        return tuple(entry.profile for state in states for entry in state.all_entries())

    def resolve(
        self,
        key: KernelTuningKey,
        execution: CpuExecutionDescriptor,
        overrides: Mapping[str, object] | None = None,
        *,
        tuning: str = "resolved",
        profile_name: str | None = None,
        profile_digest: str | None = None,
    ) -> Resolution:
        """The values for ``key`` on ``execution``, by the precedence of docs/design.md.

        ``tuning="portable"`` ignores every profile; ``profile_name`` and
        ``profile_digest`` restrict the candidates to one named profile or one
        digest (which must still match the execution). ``overrides`` are
        validated against the schema and applied last.
        """
        self._counters.resolution()
        state = self._state(key)
        if tuning not in TUNING_MODES:
            raise KernelTuningError(f"tuning must be one of {TUNING_MODES}, got {tuning!r}")
        if tuning == "resolved" and profile_name is None and profile_digest is None:
            mode = _EVERY_PROFILE
        else:
            mode = _Mode(tuning, profile_name, profile_digest)
        best = state.calibrated.get(execution.identity) if state.calibrated else None
        if best is not None and not mode.admits(best):
            best = None
        if best is None:
            threads, processor = execution.effective_threads, execution.processor
            for bucket in state.buckets(processor):
                for entry in bucket:
                    if best is not None and entry.order <= best.order:
                        break
                    low, high = entry.threads
                    if (low <= threads <= high and mode.admits(entry)
                            and entry.profile.selector.matches_processor(processor)):
                        best = entry
                        break
        if best is None:
            values, source = state.defaults, _DEFAULT_SOURCE
        else:
            values, source = best.resolved, best.source
        explain = functools.partial(self._rejections, state, execution, best, mode)
        if not overrides:
            return Resolution._fast(key, values, source, self.number, explain)
        schema = state.schema
        config = schema.configure(overrides, base=schema.configure(values))
        return Resolution(
            key, types.MappingProxyType(schema.values_of(config)), TuningSource(Tier.OVERRIDE),
            self.number, overridden=tuple(overrides), base_source=source, _explain=explain,
        )

    def _rejections(self, state: _KeyState, execution: CpuExecutionDescriptor,
                    chosen: _Entry | None, mode: _Mode) -> tuple[RejectedCandidate, ...]:
        rejected = []
        for identity, entry in state.calibrated.items():
            if entry is not chosen:
                reason = "execution" if identity != execution.identity else "tuning"
                rejected.append(entry.rejected(reason))
        for entry in state.entries:
            if entry is chosen:
                continue
            failed = entry.profile.selector.mismatches(execution)
            if failed:
                reason = "threads" if failed == ("threads",) else f"selector:{failed[0]}"
            elif not mode.admits(entry):
                reason = "tuning"
            elif chosen is not None and entry.profile.tier < chosen.profile.tier:
                reason = "tier"
            else:
                reason = "priority"
            rejected.append(entry.rejected(reason))
        key = state.schema.key
        for other, other_state in self._keys.items():
            if other == key or (other.library, other.kernel, other.implementation,
                                other.device) != (key.library, key.kernel,
                                                  key.implementation, key.device):
                continue
            reason = "element_type" if other.element_type != key.element_type else "abi"
            rejected += [entry.rejected(reason) for entry in other_state.all_entries()]
        return tuple(rejected)


@dataclass(frozen=True)
class _Mode:
    """Which profiles a resolution may use: all, none (portable), one name or one digest."""

    tuning: str
    profile_name: str | None
    digest: str | None

    def admits(self, entry: _Entry) -> bool:
        if self is _EVERY_PROFILE:
            return True
        p = entry.profile
        return self.tuning != "portable" and self.profile_name in (None, p.name) and (
            self.digest in (None, p.digest))


_DEFAULT_SOURCE = TuningSource(Tier.DEFAULTS)
_EVERY_PROFILE = _Mode("resolved", None, None)


class KernelTuningRegistry:
    """Schemas and profiles published as immutable generations.

    Every writer validates its whole batch before swapping the generation
    reference, under one writer lock; readers never lock anything but the
    access counters. Calibration functions and machine probes are code, not
    published values: they live beside the generations, under their own lock.
    """

    def __init__(self) -> None:
        self._write_lock = threading.Lock()
        self._counters = Counters()
        self._generation = TuningSnapshot(0, types.MappingProxyType({}), self._counters)
        self._callables_lock = threading.Lock()
        self._calibration_functions: dict[KernelTuningKey, Callable[..., Any]] = {}
        self._machine_probes: dict[tuple[str, str], Callable[..., Any]] = {}
        self._implementations: dict[str, frozenset[str]] = {}
        self._libraries: dict[str, KernelLibraryInfo] = {}

    def snapshot(self) -> TuningSnapshot:
        self._counters.snapshot()
        return self._generation

    @property
    def generation(self) -> int:
        return self._generation.number

    def access_counts(self) -> AccessCounts:
        return self._counters.read()

    def resolve(
        self,
        key: KernelTuningKey,
        execution: CpuExecutionDescriptor,
        overrides: Mapping[str, object] | None = None,
        **mode: Any,
    ) -> Resolution:
        """Resolve against the current generation (see :meth:`TuningSnapshot.resolve`)."""
        return self.snapshot().resolve(key, execution, overrides, **mode)

    def register_schema(self, key: KernelTuningKey, config_type: type) -> KernelTuningSchema:
        return self.register_schemas([(key, config_type)])[0]

    def register_schemas(
        self, items: Iterable[tuple[KernelTuningKey, type]]
    ) -> tuple[KernelTuningSchema, ...]:
        """Register typed configs for exact keys; a key registered twice is an error."""
        schemas = tuple(KernelTuningSchema.from_config(key, config) for key, config in items)
        with self._write_lock:
            keys = dict(self._generation._keys)
            for schema in schemas:
                if schema.key in keys:
                    raise KernelTuningError(f"a tuning schema is already registered for "
                                            f"{schema.key}")
                keys[schema.key] = _KeyState.build(schema)
            self._publish(keys)
        return schemas

    def register_profile(
        self,
        key: KernelTuningKey,
        selector: CpuSelector | Mapping[str, object],
        values: Mapping[str, object],
        priority: int = 0,
        name: str | None = None,
        origin: str | None = "api",
    ) -> KernelTuningProfile:
        if isinstance(selector, Mapping):
            selector = CpuSelector.from_dict(selector)
        profile = KernelTuningProfile(key, values, selector=selector, priority=priority,
                                      name=name, origin=origin)
        return self.register_profiles([profile])[0]

    def register_profiles(
        self, profiles: Iterable[KernelTuningProfile]
    ) -> tuple[KernelTuningProfile, ...]:
        """Validate a batch of selector or calibrated profiles, then publish it as one generation.

        Nothing is published unless every profile validates against its schema
        and no two selector profiles of one key are ambiguous (equal tier and
        priority, selectors that can overlap). A profile identical to a
        published one is kept once; a calibrated profile replaces the previous
        one for the same key and execution.
        """
        profiles = list(profiles)
        with self._write_lock:
            keys, problems, ambiguous = self._stage(profiles)
            if problems:
                raise TuningValidationError(problems, context="profiles not published")
            if ambiguous:
                raise AmbiguousProfileError("\n".join(ambiguous))
            self._publish(keys)
        return tuple(profiles)

    def check_profiles(self, profiles: Iterable[KernelTuningProfile]) -> tuple[str, ...]:
        """Every reason :meth:`register_profiles` would refuse ``profiles`` now; publishes nothing.

        An importer asks this of one file's profiles (with those it already
        accepted) to tell which file a refusal belongs to.
        """
        with self._write_lock:
            _, problems, ambiguous = self._stage(list(profiles))
        return (*map(str, problems), *ambiguous)

    def _stage(self, profiles: list[KernelTuningProfile]
               ) -> tuple[dict[KernelTuningKey, _KeyState], list[Problem], list[str]]:
        """The key states ``profiles`` would publish, their problems and their ambiguities."""
        keys = dict(self._generation._keys)
        entries, problems, ambiguous = [], [], []
        for index, profile in enumerate(profiles):
            state = keys.get(profile.key)
            if state is None:
                problems.append(Problem("key", "no tuning schema is registered for this key",
                                        entry=_where(index, profile), file=profile.origin))
                continue
            try:
                config = state.schema.configure(profile.values)
            except TuningValidationError as error:
                problems += error.located(entry=_where(index, profile),
                                          file=profile.origin).problems
                continue
            resolved = types.MappingProxyType(state.schema.values_of(config))
            entries.append(_Entry(profile, resolved))
        if problems:
            return keys, problems, ambiguous
        touched: dict[KernelTuningKey, tuple[dict, list[_Entry]]] = {}
        for entry in entries:
            key = entry.profile.key
            if key not in touched:
                touched[key] = (dict(keys[key].calibrated), [])
            calibrated, added = touched[key]
            if entry.profile.execution is not None:
                calibrated[entry.profile.execution.identity] = entry
            else:
                added.append(entry)
        for key, (calibrated, added) in touched.items():
            selected = _merged(list(keys[key].entries), added, ambiguous)
            keys[key] = _KeyState.build(keys[key].schema, calibrated, selected)
        return keys, problems, ambiguous

    def _publish(self, keys: dict[KernelTuningKey, _KeyState]) -> None:
        """Swap in a new generation; callers hold the write lock and validated everything."""
        number = self._generation.number + 1
        self._generation = TuningSnapshot(number, types.MappingProxyType(keys), self._counters)

    def register_calibration_function(self, key: KernelTuningKey,
                                      function: Callable[..., Any]) -> None:
        """Keep ``function`` for ``key``, replacing an earlier one."""
        with self._callables_lock:
            self._calibration_functions[key] = function

    def calibration_function(self, key: KernelTuningKey) -> Callable[..., Any] | None:
        with self._callables_lock:
            return self._calibration_functions.get(key)

    def register_implementations(self, library: str, names: Iterable[str]) -> None:
        """Declare every implementation ``library`` can have, loaded here or not.

        A profile entry naming another is refused as unknown rather than left to
        another machine; a library that declares none has every name accepted.
        """
        with self._callables_lock:
            self._implementations[library] = frozenset(names)

    def implementations(self, library: str) -> frozenset[str] | None:
        """The implementations ``library`` declared, or None when it declared none."""
        with self._callables_lock:
            return self._implementations.get(library)

    def register_machine_probe(self, library: str, aspect: str,
                               probe: Callable[..., Any]) -> None:
        """Keep ``probe`` for one aspect of the machine, replacing the library's earlier one."""
        with self._callables_lock:
            self._machine_probes[(library, aspect)] = probe

    def machine_probes(self, library: str) -> dict[str, Callable[..., Any]]:
        """The library's probes by aspect (a copy)."""
        with self._callables_lock:
            return {aspect: probe for (owner, aspect), probe in self._machine_probes.items()
                    if owner == library}


    def add_library(self, info: KernelLibraryInfo, staging: KernelTuningRegistry) -> None:
        """Publish what a library registered in ``staging``, its registry of its own, in one
        generation: its schemas (with any profiles), calibration functions, machine probes and
        implementations. Refused whole when any of them is another library's, or a key or the
        library is registered here already (see :mod:`.libraries`)."""
        keys = staging._generation._keys
        owners = {key.library for key in keys} | {owner for owner, _ in staging._machine_probes}
        owners |= set(staging._implementations)
        if owners - {info.name}:
            raise KernelTuningError(f"library {info.name} registered for another library: "
                                    f"{', '.join(sorted(owners - {info.name}))}")
        with self._write_lock, self._callables_lock:
            if info.name in self._libraries:
                raise KernelTuningError(f"library {info.name} is already registered")
            published = dict(self._generation._keys)
            taken = sorted(map(str, published.keys() & keys.keys()))
            if taken:
                raise KernelTuningError(f"a tuning schema is already registered for {taken[0]}"
                                        + (f" and {len(taken) - 1} more keys" if taken[1:]
                                           else ""))
            self._publish({**published, **keys})
            self._calibration_functions.update(staging._calibration_functions)
            self._machine_probes.update(staging._machine_probes)
            self._implementations.update(staging._implementations)
            self._libraries[info.name] = info

    def libraries(self) -> dict[str, KernelLibraryInfo]:
        """The libraries :meth:`add_library` published, by name (a copy)."""
        with self._callables_lock:
            return dict(self._libraries)

    def library_version(self, library: str) -> str | None:
        """The version of a published library; None for one registered key by key."""
        with self._callables_lock:
            info = self._libraries.get(library)
        return None if info is None else info.version


def _where(index: int, profile: KernelTuningProfile) -> str:
    """Where a profile of a batch is, for a message; only built for one (a label hashes)."""
    return f"profile {index} ({profile.label}, {profile.key})"


#: ambiguities described per key; the others are counted
SHOWN_AMBIGUITIES = 10


def _merged(published: list[_Entry], added: list[_Entry], ambiguous: list[str]) -> list[_Entry]:
    """One key's selector profiles with ``added`` among them: a profile identical to one
    before it kept once, every ambiguity (equal tier and priority, selectors that can
    overlap) described in ``ambiguous``. Only pairs :func:`overlapping_pairs` finds are
    compared, so a key with thousands of thread ranges costs n log n."""
    entries = published + added
    groups: dict[tuple[int, int], list[int]] = {}
    for index, entry in enumerate(entries):
        groups.setdefault(entry.order, []).append(index)
    duplicates, conflicts = set(), []
    for members in groups.values():
        if members[-1] < len(published):
            continue  # nothing added here: what is published was checked when it was
        pairs = overlapping_pairs([entries[index].profile.selector for index in members])
        for first, second in ((members[a], members[b]) for a, b in pairs):
            if second < len(published):
                continue
            p, q = entries[second].profile, entries[first].profile
            if p.digest == q.digest:
                duplicates.add(second)
                continue
            conflicts.append(
                f"{p.key}: profile {p.label} ({p.origin or 'api'}; {p.selector}) and "
                f"profile {q.label} ({q.origin or 'api'}; {q.selector}) have the same tier "
                f"({p.tier.label}) and priority ({p.priority}) and their selectors can "
                f"match the same processor; give one a different priority or narrow a selector")
    ambiguous += conflicts[:SHOWN_AMBIGUITIES]
    if len(conflicts) > SHOWN_AMBIGUITIES:
        ambiguous.append(f"... and {len(conflicts) - SHOWN_AMBIGUITIES} more ambiguities of "
                         f"{entries[0].profile.key}")
    return [entry for index, entry in enumerate(entries) if index not in duplicates]


default_registry = KernelTuningRegistry()


def snapshot() -> TuningSnapshot:
    """The current generation of the process-wide registry."""
    return default_registry.snapshot()


def access_counts() -> AccessCounts:
    return default_registry.access_counts()


def register_kernel_tuning_schema(key: KernelTuningKey, config_type: type) -> KernelTuningSchema:
    return default_registry.register_schema(key, config_type)


def register_kernel_tuning_profile(
    key: KernelTuningKey,
    selector: CpuSelector | Mapping[str, object],
    values: Mapping[str, object],
    priority: int = 0,
    name: str | None = None,
) -> KernelTuningProfile:
    return default_registry.register_profile(key, selector, values, priority, name)


def register_kernel_tuning_profiles(
    profiles: Iterable[KernelTuningProfile],
) -> tuple[KernelTuningProfile, ...]:
    return default_registry.register_profiles(profiles)


def resolve_kernel_tuning(
    key: KernelTuningKey,
    execution: CpuExecutionDescriptor,
    overrides: Mapping[str, object] | None = None,
    **mode: Any,
) -> Resolution:
    return default_registry.resolve(key, execution, overrides, **mode)
