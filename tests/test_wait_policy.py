"""The OpenMP wait policy: what libgomp makes of the environment, and that kerneltune keeps it."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys

import pytest

import kerneltune
from kerneltune.machine.openmp import FOREVER, SPIN_COUNTS, WaitPolicy, wait_policy

VARIABLES = ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT")


@pytest.mark.parametrize(("environ", "expected"), [
    ({}, WaitPolicy("default", 300_000, 100)),
    ({"OMP_WAIT_POLICY": "passive"}, WaitPolicy("passive", 0, 0)),
    ({"OMP_WAIT_POLICY": " ACTIVE "}, WaitPolicy("active", 30_000_000_000, 1000)),
    ({"GOMP_SPINCOUNT": "10k"}, WaitPolicy("default", 10_000, 100)),
    ({"GOMP_SPINCOUNT": "2M"}, WaitPolicy("default", 2_000_000, 100)),
    ({"GOMP_SPINCOUNT": "50"}, WaitPolicy("default", 50, 50)),
    ({"GOMP_SPINCOUNT": "Infinity"}, WaitPolicy("default", FOREVER, 100)),
    ({"OMP_WAIT_POLICY": "active", "GOMP_SPINCOUNT": " infinite "},
     WaitPolicy("active", FOREVER, 1000)),
    # as strtoull reads it: a sign, a negative count wrapping round, spaces before the suffix
    ({"GOMP_SPINCOUNT": "+5"}, WaitPolicy("default", 5, 5)),
    ({"GOMP_SPINCOUNT": "-0"}, WaitPolicy("default", 0, 0)),
    ({"GOMP_SPINCOUNT": "-5"}, WaitPolicy("default", 2 ** 64 - 5, 100)),
    ({"GOMP_SPINCOUNT": "10 k"}, WaitPolicy("default", 10_000, 100)),
    # a product beyond the largest count spins for ever
    ({"GOMP_SPINCOUNT": "20000000T"}, WaitPolicy("default", FOREVER, 100)),
    # a spin count with the passive policy still spins, never when throttled
    ({"OMP_WAIT_POLICY": "passive", "GOMP_SPINCOUNT": "1000"}, WaitPolicy("passive", 1000, 0)),
])
def test_the_policy_is_what_libgomp_documents_for_the_environment(environ, expected):
    assert wait_policy(environ) == expected


@pytest.mark.parametrize(("environ", "ignored"), [
    ({"OMP_WAIT_POLICY": "lazy"}, ("OMP_WAIT_POLICY",)),
    ({"GOMP_SPINCOUNT": "1x"}, ("GOMP_SPINCOUNT",)),
    ({"GOMP_SPINCOUNT": "10km"}, ("GOMP_SPINCOUNT",)),
    ({"GOMP_SPINCOUNT": "- 5"}, ("GOMP_SPINCOUNT",)),
    ({"GOMP_SPINCOUNT": "99999999999999999999"}, ("GOMP_SPINCOUNT",)),  # beyond strtoull
    ({"GOMP_SPINCOUNT": "\u0663"}, ("GOMP_SPINCOUNT",)),  # a digit, but not an ASCII one
    ({"GOMP_SPINCOUNT": "infinitely"}, ("GOMP_SPINCOUNT",)),
    ({"GOMP_SPINCOUNT": ""}, ("GOMP_SPINCOUNT",)),
])
def test_a_value_libgomp_rejects_leaves_its_default_and_is_named(environ, ignored):
    policy = wait_policy(environ)
    assert (policy.spin_count, policy.throttled_spin_count) == SPIN_COUNTS["default"]
    assert policy.ignored == ignored


def test_an_endless_spin_is_infinite_in_json():
    record = wait_policy({"GOMP_SPINCOUNT": "infinite"}).as_dict()
    assert wait_policy({"GOMP_SPINCOUNT": "infinite"}).summary().startswith(
        "default, spins for ever before sleeping (100 with")
    assert json.loads(json.dumps(record)) == {"policy": "default", "spin_count": "infinite",
                                              "throttled_spin_count": 100, "ignored": []}


@pytest.mark.parametrize("setting", [
    {}, {"OMP_WAIT_POLICY": "passive"}, {"OMP_WAIT_POLICY": "active"},
    {"GOMP_SPINCOUNT": "2M"}, {"GOMP_SPINCOUNT": "-5"}, {"GOMP_SPINCOUNT": "10 k"},
    {"GOMP_SPINCOUNT": "infinite"}, {"GOMP_SPINCOUNT": "99999999999999999999"},
    {"OMP_WAIT_POLICY": "passive", "GOMP_SPINCOUNT": "1000"},
])
def test_the_spin_count_is_the_one_libgomp_itself_reports(setting):
    """libgomp prints the spin count it read when OMP_DISPLAY_ENV=verbose is set."""
    done = subprocess.run([sys.executable, "-c", _CHILD % (VARIABLES,)],
                          env={**_without_policy(), **setting, "OMP_DISPLAY_ENV": "verbose",
                               "KERNELTUNE_CACHE": "off"},
                          capture_output=True, text=True, check=True)
    shown = re.search(r"GOMP_SPINCOUNT = '(\d+)'", done.stderr)
    assert shown is not None, done.stderr
    assert int(shown[1]) == wait_policy(setting).spin_count


def test_the_top_level_names_are_the_modules_own():
    assert kerneltune.wait_policy is wait_policy and kerneltune.WaitPolicy is WaitPolicy


def _without_policy() -> dict[str, str]:
    return {name: value for name, value in os.environ.items()
            if name not in VARIABLES and name != "OMP_DISPLAY_ENV"}


_CHILD = """
import json, os, numpy as np, kerneltune
from kerneltune.kernels import library
library()["Relu"].run([np.arange(200_000, dtype=np.float32)], threads=2)
with open("/proc/self/maps") as maps:  # libgomp loaded, and read the environment
    loaded = "libgomp" in maps.read()
print(json.dumps({"environ": {name: os.environ.get(name) for name in %r}, "loaded": loaded,
                  "policy": kerneltune.wait_policy().as_dict()}))
"""


@pytest.mark.parametrize("setting", [{}, {"OMP_WAIT_POLICY": "passive"},
                                     {"GOMP_SPINCOUNT": "30k"}])
def test_kerneltune_sets_no_policy_and_keeps_the_users(setting):
    """After import and a parallel kernel the environment is the one the process started with."""
    done = subprocess.run([sys.executable, "-c", _CHILD % (VARIABLES,)],
                          env={**_without_policy(), **setting, "KERNELTUNE_CACHE": "off"},
                          capture_output=True, text=True, check=True)
    seen = json.loads(done.stdout)
    assert seen["loaded"]
    assert seen["environ"] == {name: setting.get(name) for name in VARIABLES}
    assert seen["policy"] == wait_policy(setting).as_dict()
