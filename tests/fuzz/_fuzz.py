"""Shared pieces of the boundary fuzz tests: profiles, case counts, and the one rule every case checks.

``SLIMKIT_FUZZ_PROFILE=slow`` runs ten times the cases with fresh random seeds; the default profile is
derandomized (the same cases every run, so the suite is stable) and sized so each boundary tries >= 500 cases.
"""

from __future__ import annotations

import collections
import os
from collections.abc import Callable
from typing import Any

from hypothesis import HealthCheck, event, settings

from slimkit.errors import SlimkitError

SCALE = {"default": 1, "slow": 10}
PROFILE = os.environ.get("SLIMKIT_FUZZ_PROFILE", "default")
if PROFILE not in SCALE:
    raise RuntimeError(f"SLIMKIT_FUZZ_PROFILE={PROFILE!r}: use one of {', '.join(SCALE)}.")

_COMMON: dict[str, Any] = dict(deadline=None, database=None, print_blob=True,
                               suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                                      HealthCheck.function_scoped_fixture,
                                                      HealthCheck.filter_too_much])
settings.register_profile("slimkit-default", derandomize=True, **_COMMON)
settings.register_profile("slimkit-slow", derandomize=False, **_COMMON)

#: generated cases tried per boundary in this session (printed in the terminal summary)
COUNTS: collections.Counter[str] = collections.Counter()


def examples(n: int) -> settings:
    """Settings for a test trying ``n`` cases in the default profile (``10 * n`` in the slow one)."""
    return settings(settings.get_profile(f"slimkit-{PROFILE}"), max_examples=n * SCALE[PROFILE])


def tried(boundary: str) -> None:
    """Count one generated case for ``boundary``."""
    COUNTS[boundary] += 1


def clear_or_ok(boundary: str, call: Callable[[], Any], *words: str) -> Any:
    """Run ``call``: it may return, or raise a SlimkitError whose message names one of ``words``; else it fails.

    Any other exception propagates (Hypothesis shrinks it to the smallest failing input).
    """
    tried(boundary)
    try:
        result = call()
    except SlimkitError as exc:
        event(f"{boundary}: refused with {type(exc).__name__}")
        message = str(exc)
        assert len(message) > 20, f"slimkit error without a useful message: {message!r}"
        if words:
            assert any(w in message for w in words), f"message names none of {words}: {message!r}"
        return exc
    event(f"{boundary}: accepted")
    return result
