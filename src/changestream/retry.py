"""Retrying, one way everywhere: exponential backoff with full jitter, through tenacity.

The remote client's reconnects, the Stream Client's deliveries and the pipeline's sink writes
all retry through :func:`retrying`, so many clients that lost one server do not come back to
it in step.
"""

from __future__ import annotations

from collections.abc import Callable

import tenacity


def retrying(
    retryable: Callable[[BaseException], bool],
    *,
    first: float,
    most: float,
    timeout: float | None = None,
    attempts: int | None = None,
    sleep: Callable[[float], None] | None = None,
    before_sleep: Callable[[tenacity.RetryCallState], None] | None = None,
) -> tenacity.Retrying:
    """Retry what ``retryable`` accepts, waiting a random time up to ``first``, then up to
    twice as long each time, at most ``most`` seconds; give up after ``timeout`` seconds or
    ``attempts`` tries (re-raising the last error). ``sleep`` replaces ``time.sleep`` (to
    wake early), ``before_sleep`` sees each failure before its wait (to log it)."""
    stops: list[tenacity.stop.stop_base] = [tenacity.stop_never]
    if timeout is not None:
        stops.append(tenacity.stop_after_delay(timeout))
    if attempts is not None:
        stops.append(tenacity.stop_after_attempt(attempts))
    options: dict[str, object] = {}
    if sleep is not None:
        options["sleep"] = sleep
    return tenacity.Retrying(
        stop=tenacity.stop_any(*stops),
        wait=tenacity.wait_random_exponential(multiplier=first, max=most),
        retry=tenacity.retry_if_exception(retryable),
        before_sleep=before_sleep,
        reraise=True,
        **options,  # type: ignore[arg-type]
    )


def reconnecting(timeout: float, retryable: Callable[[BaseException], bool]) -> tenacity.Retrying:
    """Reconnecting to a server: quick first tries, at most a second apart, for ``timeout`` s."""
    return retrying(retryable, first=0.05, most=1.0, timeout=timeout)
