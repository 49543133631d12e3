"""The HTTP status each error answers with: the server's business, not the error classes'."""

from __future__ import annotations

from changestream import errors

#: Status by error class; an error answers with the status of the nearest class it derives from.
STATUSES: dict[type[errors.ChangeStreamError], int] = {
    errors.InvalidArgument: 400,
    errors.Unauthenticated: 401,
    errors.PermissionDenied: 403,
    errors.NotFound: 404,
    errors.AlreadyExists: 409,
    errors.FailedPrecondition: 412,
    errors.ResourceExhausted: 429,
    errors.DatabaseBusy: 503,
    errors.DatabaseClosed: 503,
    errors.Unavailable: 503,
}


class RequestTooLarge(errors.InvalidArgument):
    """The request body is larger than the server accepts (413)."""


def http_status(exc: errors.ChangeStreamError) -> int:
    """The status ``exc`` answers with (500 for an error no request could have caused)."""
    if isinstance(exc, RequestTooLarge):
        return 413
    return next((STATUSES[c] for c in type(exc).__mro__ if c in STATUSES), 500)
