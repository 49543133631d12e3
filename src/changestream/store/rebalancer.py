"""Runs the split policy: on demand, and in the background of one writing process at a time."""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
from typing import TYPE_CHECKING

from changestream.errors import ChangeStreamError, DatabaseBusy, DatabaseClosed, FailedPrecondition
from changestream.store.load import FLUSH_AFTER_S
from changestream.store.policy import Action, load_policy, measure, plan, take_leadership
from changestream.store.splits import splits_live_at

if TYPE_CHECKING:
    from changestream.store.database import Store

log = logging.getLogger(__name__)


class Rebalancer:
    """Measures the live splits and applies the policy's splits and merges."""

    def __init__(self, store: Store) -> None:
        self._store = store
        self._me = f"{socket.gethostname()}:{os.getpid()}:{id(self):x}"
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()

    def run_once(self) -> list[Action]:
        """One pass of the policy; returns the splits and merges it made."""
        store = self._store
        store.flush_load()  # this process's latest load counts too
        now = store.now()
        with store.snapshot() as conn:
            policy = load_policy(conn)
            tables = store.catalog().tables
            live = splits_live_at(conn, store.read_meta(conn).last_commit_ts)
            actions = plan(conn, measure(conn, live, tables, policy, now), tables, policy, now)
        done = []
        for action in actions:
            try:
                store.change_split_boundary(action.boundary, merge=action.merge)
            except FailedPrecondition as exc:
                log.debug("skipped %s: %s", action, exc)
                continue
            log.info("%s: %s", "merged" if action.merge else "split", action.reason)
            done.append(action)
        return done

    def ensure_started(self) -> None:
        """Start the background loop in this process, once."""
        if self._thread is not None:
            return
        with self._lock:
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._loop, name="changestream-rebalancer", daemon=True
                )
                self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join()

    def _loop(self) -> None:
        next_tick = time.monotonic() + 1.0
        while not self._stop.wait(min(FLUSH_AFTER_S, max(0.0, next_tick - time.monotonic()))):
            try:
                self._store.flush_load()  # about once a second, whatever the policy's interval
                if time.monotonic() >= next_tick:
                    next_tick = time.monotonic() + self._tick()
            except (DatabaseClosed, DatabaseBusy):
                if self._store.closed:
                    return
            except ChangeStreamError:
                log.exception("split policy pass failed")
            except Exception:
                log.exception("split policy pass failed unexpectedly")

    def _tick(self) -> float:
        """Lead if no other process does, and run the policy; returns the next wait."""
        store = self._store
        expiring = any(t.row_deletion_policy for t in store.catalog().tables.values())
        with store.locked() as conn:
            policy = load_policy(conn)
            lease = int(policy.check_interval_seconds * 3_000_000)
            wanted = policy.enabled or expiring
            leading = wanted and take_leadership(conn, self._me, store.now(), lease)
        if leading and policy.enabled:
            self.run_once()
        if leading and expiring:
            deleted = store.delete_expired_rows()
            if deleted:
                log.info("row deletion policies deleted %d rows", deleted)
        return policy.check_interval_seconds
