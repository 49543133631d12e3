"""Stream states (the seed's names exactly) and the verbs that move a stream between them.

=================  ====================================  ==================
verb               from                                  to
=================  ====================================  ==================
(create)                                                 Not started
start              Not started, Paused                   Starting
started            Starting                              Running
pause              Starting, Running, Failed             Paused
resume             Paused, Failed                        Starting
drain              Running                               Draining
drained            Draining                              Paused
fail               Starting, Running, Draining           Failed
retry              Failed                                Starting
fail_permanently   Starting, Running, Draining, Failed   Failed permanently
delete             Not started, Paused, Failed,          (gone)
                   Failed permanently
=================  ====================================  ==================

``start``, ``pause``, ``resume`` and ``drain`` are the user's verbs; ``started``, ``drained``,
``fail``, ``fail_permanently`` and ``retry`` are the pipeline's. Draining ends in Paused, not
Not started: the stream keeps its backfill and CDC position, so ``resume`` carries on where
the drain stopped instead of backfilling again. ``pause`` also stops a Failed stream from
being retried. A stream can be deleted when no pipeline works on it: Not started, Paused,
Failed or Failed permanently.
"""

from __future__ import annotations

import enum

from changestream.errors import FailedPrecondition, InvalidArgument


class StreamState(enum.StrEnum):
    """The state of a stream, with the seed's names as values."""

    NOT_STARTED = "Not started"
    STARTING = "Starting"
    RUNNING = "Running"
    DRAINING = "Draining"
    PAUSED = "Paused"
    FAILED = "Failed"
    FAILED_PERMANENTLY = "Failed permanently"

    @property
    def active(self) -> bool:
        """Whether a pipeline should be working on the stream."""
        return self in ACTIVE_STATES


S = StreamState
#: States a pipeline works in.
ACTIVE_STATES = frozenset({S.STARTING, S.RUNNING, S.DRAINING})
#: States a stream can be deleted from.
DELETABLE_STATES = frozenset({S.NOT_STARTED, S.PAUSED, S.FAILED, S.FAILED_PERMANENTLY})

#: verb -> (the states it applies to, the state it leads to)
TRANSITIONS: dict[str, tuple[frozenset[StreamState], StreamState]] = {
    "start": (frozenset({S.NOT_STARTED, S.PAUSED}), S.STARTING),
    "started": (frozenset({S.STARTING}), S.RUNNING),
    "pause": (frozenset({S.STARTING, S.RUNNING, S.FAILED}), S.PAUSED),
    "resume": (frozenset({S.PAUSED, S.FAILED}), S.STARTING),
    "drain": (frozenset({S.RUNNING}), S.DRAINING),
    "drained": (frozenset({S.DRAINING}), S.PAUSED),
    "fail": (ACTIVE_STATES, S.FAILED),
    "retry": (frozenset({S.FAILED}), S.STARTING),
    "fail_permanently": (ACTIVE_STATES | {S.FAILED}, S.FAILED_PERMANENTLY),
}
#: States ``start``/``resume`` with a CDC start strategy move to Starting from (a stream
#: Failed permanently included: that is how it is recovered).
RECOVERABLE_STATES = frozenset({S.NOT_STARTED, S.PAUSED, S.FAILED, S.FAILED_PERMANENTLY})
#: The verbs for users (the CLI's); the others are the pipeline's.
USER_VERBS = ("start", "pause", "resume", "drain", "delete")


def allowed_verbs(state: StreamState) -> list[str]:
    """The verbs that apply to a stream in ``state`` (``delete`` included when it does)."""
    verbs = [verb for verb, (sources, _) in TRANSITIONS.items() if state in sources]
    return [*verbs, "delete"] if state in DELETABLE_STATES else verbs


def _refuse(stream: str, state: StreamState, verb: str) -> FailedPrecondition:
    verbs = allowed_verbs(state)
    users = [v for v in verbs if v in USER_VERBS]
    pipeline = [v for v in verbs if v not in USER_VERBS]
    if state is S.FAILED_PERMANENTLY:
        users.append("resume with --cdc-start")
    message = (
        f"cannot {verb} stream {stream!r}: it is {state.value}; allowed now: "
        f"{', '.join(users) or 'nothing'}"
    )
    if pipeline:
        message += f" (the pipeline may: {', '.join(pipeline)})"
    return FailedPrecondition(message)


def next_state(stream: str, state: StreamState, verb: str) -> StreamState:
    """The state ``verb`` moves a stream in ``state`` to; FailedPrecondition naming the
    current state and the allowed verbs when it cannot, InvalidArgument for an unknown verb."""
    if verb not in TRANSITIONS:
        raise InvalidArgument(f"unknown stream verb {verb!r}; verbs: {', '.join(TRANSITIONS)}")
    sources, target = TRANSITIONS[verb]
    if state not in sources:
        raise _refuse(stream, state, verb)
    return target


def check_delete(stream: str, state: StreamState) -> None:
    """FailedPrecondition unless a stream in ``state`` can be deleted."""
    if state not in DELETABLE_STATES:
        raise _refuse(stream, state, "delete")
