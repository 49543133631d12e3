"""Bearer tokens with scopes, kept as hashes in a tokens file.

A token is ``cs_`` and 43 random URL-safe characters (256 bits). The tokens file holds one JSON
object per line: the token's SHA-256 (no salt or slow hash is needed, as the token is random
and as long as a key, not a password), its scopes and when it was made; never the token itself.
The server rereads the file when it changes, so adding or deleting a line takes effect without
a restart.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import hashlib
import os
import secrets
import threading
import time
from collections.abc import Iterable
from dataclasses import dataclass

import orjson

from changestream.errors import InvalidArgument, PermissionDenied, Unauthenticated

SCOPES = ("read", "write", "admin")
_PREFIX = "cs_"
#: How often the tokens file is checked for changes, in seconds.
_RECHECK_S = 1.0


def parse_scopes(text: str | Iterable[str]) -> tuple[str, ...]:
    """Scopes from ``"read,write"`` (or a list), checked, in canonical order."""
    names = text.split(",") if isinstance(text, str) else list(text)
    wanted = {name.strip() for name in names if name.strip()}
    unknown = sorted(wanted - set(SCOPES))
    if unknown or not wanted:
        raise InvalidArgument(
            f"scopes must be a comma-separated list of {', '.join(SCOPES)}; got {text!r}"
        )
    return tuple(s for s in SCOPES if s in wanted)


def token_hash(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def create_token(path: str, scopes: tuple[str, ...], name: str = "") -> str:
    """Make a new token, append its hash and scopes to the tokens file, and return it."""
    token = _PREFIX + secrets.token_urlsafe(32)
    entry = {
        "sha256": token_hash(token),
        "scopes": list(scopes),
        "name": name,
        "created": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
    }
    # Only the owner may read the file: the hashes do not reveal tokens, but scopes and names
    # are nobody else's business.
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    with os.fdopen(fd, "ab") as out:
        out.write(orjson.dumps(entry) + b"\n")
    return token


#: The name of a caller without a token (public endpoints, ``--insecure-no-auth``).
ANONYMOUS = "anonymous"


@dataclass(frozen=True, slots=True)
class Principal:
    """Who made a request: the hash of their token (or :data:`ANONYMOUS`) and their scopes."""

    name: str
    scopes: frozenset[str]

    def require(self, scope: str) -> None:
        if scope not in self.scopes:
            have = ", ".join(s for s in SCOPES if s in self.scopes) or "none"
            raise PermissionDenied(f"this request needs the {scope!r} scope; the token has {have}")


class TokenFile:
    """The accepted tokens, from a tokens file that may change while the server runs."""

    def __init__(self, path: str) -> None:
        self._path = path
        self._lock = threading.Lock()
        self._stamp: tuple[int, int] | None = None
        self._checked = 0.0
        self._tokens: dict[str, frozenset[str]] = {}
        self._reload()

    def _reload(self) -> None:
        try:
            stat = os.stat(self._path)
        except FileNotFoundError as exc:
            raise InvalidArgument(f"no tokens file at {self._path!r}") from exc
        stamp = (stat.st_mtime_ns, stat.st_size)
        if stamp == self._stamp:
            return
        tokens: dict[str, frozenset[str]] = {}
        with open(self._path, "rb") as source:
            for number, line in enumerate(source, 1):
                if not line.strip():
                    continue
                try:
                    entry = orjson.loads(line)
                    tokens[entry["sha256"]] = frozenset(parse_scopes(entry["scopes"]))
                except (orjson.JSONDecodeError, KeyError, TypeError, InvalidArgument) as exc:
                    raise InvalidArgument(
                        f"{self._path}:{number} is not a tokens file line ({exc})"
                    ) from exc
        self._tokens, self._stamp = tokens, stamp

    def authenticate(self, authorization: str | None) -> Principal:
        """The principal of an ``Authorization: Bearer ...`` header value."""
        if not authorization:
            raise Unauthenticated("this server needs a bearer token (Authorization: Bearer ...)")
        scheme, _, token = authorization.partition(" ")
        if scheme.lower() != "bearer" or not token.strip():
            raise Unauthenticated("the Authorization header must be 'Bearer <token>'")
        now = time.monotonic()
        if now - self._checked >= _RECHECK_S:
            with self._lock:
                self._checked = now
                # A broken edit keeps the last good set of tokens rather than locking all out.
                with contextlib.suppress(OSError, InvalidArgument):
                    self._reload()
        # Looking up the hash leaks no timing about stored tokens an attacker could use.
        digest = token_hash(token.strip())
        scopes = self._tokens.get(digest)
        if scopes is None:
            raise Unauthenticated("the bearer token is not valid on this server")
        return Principal(digest, scopes)


class NoAuth:
    """``--insecure-no-auth``: every request may do everything."""

    def authenticate(self, authorization: str | None) -> Principal:
        return Principal(ANONYMOUS, frozenset(SCOPES))
