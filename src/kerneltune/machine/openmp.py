"""The wait policy of the OpenMP threads the compiled kernels run on.

libgomp reads ``OMP_WAIT_POLICY`` and ``GOMP_SPINCOUNT`` once, when it loads:
a thread that waits (for the next parallel kernel, or at the end of one) spins
that many times before it sleeps. kerneltune sets neither, and this module
says what libgomp makes of the environment, so that a calibration report
records the policy its timings were measured under (docs/kernels.md, Beside
other thread pools, has the measurements behind setting none).

The rules are libgomp's documented ones, parsed as its ``strtoull`` does; a
variable changed after kerneltune's import changes the answer here, not
libgomp's, and ``OMP_DISPLAY_ENV=verbose`` makes libgomp print its own.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import asdict, dataclass

#: spins before sleeping for each ``OMP_WAIT_POLICY`` when ``GOMP_SPINCOUNT`` is not set, as
#: (spin count, throttled count): libgomp uses the second while the process runs more
#: OpenMP threads than it has CPUs (its documentation of ``GOMP_SPINCOUNT``)
SPIN_COUNTS = {"default": (300_000, 100), "active": (30_000_000_000, 1000), "passive": (0, 0)}
#: libgomp's count for "spin for ever" (``INFINITE``, or a count beyond it)
FOREVER = 2 ** 64 - 1
_FACTORS = {"": 1, "k": 10 ** 3, "m": 10 ** 6, "g": 10 ** 9, "t": 10 ** 12}
#: C's white space, not Unicode's
_SPACE = " \t\n\v\f\r"
#: what ``strtoull`` reads, then an optional suffix, spaces between
_COUNT = re.compile(rf"([+-]?)([0-9]+)[{_SPACE}]*([kmgt]?)", re.IGNORECASE)


@dataclass(frozen=True)
class WaitPolicy:
    """How long a waiting OpenMP thread spins; :data:`FOREVER` spins for ever.

    ``ignored`` names the variables set to values libgomp rejects (it warns and
    keeps its default).
    """

    policy: str
    spin_count: int
    throttled_spin_count: int
    ignored: tuple[str, ...] = ()

    def summary(self) -> str:
        """One line, as ``kerneltune cpu`` prints it."""
        def spins(count: int) -> str:
            return "for ever" if count == FOREVER else f"{count:,}"

        text = (f"{self.policy}, spins {spins(self.spin_count)} before sleeping "
                f"({spins(self.throttled_spin_count)} with more OpenMP threads than CPUs)")
        return text + "".join(f"; {name} ignored" for name in self.ignored)

    def as_dict(self) -> dict[str, object]:
        """JSON-ready: a count that never ends is ``"infinite"``."""
        record = asdict(self)
        for field in ("spin_count", "throttled_spin_count"):
            if record[field] == FOREVER:
                record[field] = "infinite"
        record["ignored"] = list(self.ignored)
        return record


def _policy(value: str | None) -> str | None:
    text = (value or "").strip(_SPACE).lower()
    return text if text in ("active", "passive") else None


def _spin_count(value: str) -> int:
    """Spins ``value`` asks for; ValueError when libgomp would reject it."""
    text = value.strip(_SPACE)
    if text[:8].lower() in ("infinite", "infinity") and not text[8:].strip(_SPACE):
        return FOREVER
    match = _COUNT.fullmatch(text)
    if match is None or int(match[2]) > FOREVER:  # strtoull's range error
        raise ValueError(value)
    count = int(match[2]) if match[1] != "-" else -int(match[2]) % 2 ** 64
    factor = _FACTORS[match[3].lower()]
    return FOREVER if count > FOREVER // factor else count * factor


def wait_policy(environ: Mapping[str, str] | None = None) -> WaitPolicy:
    """The policy libgomp runs with in a process started with ``environ`` (this one's)."""
    environ = os.environ if environ is None else environ
    ignored = []
    policy = _policy(environ.get("OMP_WAIT_POLICY"))
    if "OMP_WAIT_POLICY" in environ and policy is None:
        ignored.append("OMP_WAIT_POLICY")
    policy = policy or "default"
    spins, throttled = SPIN_COUNTS[policy]
    if "GOMP_SPINCOUNT" in environ:
        try:
            asked = _spin_count(environ["GOMP_SPINCOUNT"])
        except ValueError:
            ignored.append("GOMP_SPINCOUNT")
        else:
            spins = asked
            throttled = min(throttled, asked)
    return WaitPolicy(policy, spins, throttled, tuple(ignored))
