"""The one retry policy: what it retries, when it stops, and that its waits are jittered."""

from __future__ import annotations

import pytest

from changestream.retry import retrying


def run(policy_attempts: int, failures: int, error: type[Exception]) -> tuple[int, list[float]]:
    """(calls made, waits asked for) retrying a call that fails ``failures`` times."""
    calls = 0
    waits: list[float] = []

    def flaky() -> str:
        nonlocal calls
        calls += 1
        if calls <= failures:
            raise error("down")
        return "up"

    policy = retrying(
        lambda exc: isinstance(exc, OSError),
        first=0.1,
        most=0.4,
        attempts=policy_attempts,
        sleep=waits.append,
    )
    assert policy(flaky) == "up"
    return calls, waits


def test_retries_until_it_succeeds_with_jittered_capped_waits() -> None:
    calls, waits = run(policy_attempts=20, failures=12, error=OSError)
    assert calls == 13 and len(waits) == 12
    assert all(0 <= wait <= 0.4 for wait in waits)
    assert len(set(waits)) > 1  # jitter: not the same wait every time


def test_gives_up_after_its_attempts_with_the_last_error() -> None:
    with pytest.raises(OSError, match="down"):
        run(policy_attempts=3, failures=5, error=OSError)


def test_does_not_retry_what_is_not_retryable() -> None:
    with pytest.raises(ValueError, match="down"):
        run(policy_attempts=5, failures=1, error=ValueError)
