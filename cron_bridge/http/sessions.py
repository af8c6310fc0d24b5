"""Dashboard sessions: signed, timestamped, with a lifetime, revoked cluster-wide on sign-out.

A session cookie is ``<id>.<issued at, unix seconds>.<HMAC-SHA256 of both under the secret>``.
It is valid while its signature checks out under the current secret (so changing the secret
signs everyone out), it is younger than its lifetime, and its id has not been revoked. Sign-out
revokes the id in the store (a lock key held until the cookie would have expired anyway), so
every replica behind a load balancer refuses it from then on.

What a button press said comes back to the page in its link (``?said=``), sealed with an
HMAC of the session's form token and the text: a page shows only what this server said to
this session, never the words of a link someone else made.
"""

from __future__ import annotations

import hashlib
import hmac
import re
import secrets
import time
from collections.abc import Callable
from datetime import timedelta

from cron_bridge.stores import Store

__all__ = ["SESSION_LIFETIME", "Sessions"]

SESSION_LIFETIME = timedelta(hours=12)
_COOKIE = re.compile(r"([0-9a-f]{32})\.(\d{1,12})\.([0-9a-f]{64})")


class Sessions:
    """Issues and checks dashboard sessions for one secret.

    Args:
        secret: the HTTP secret, as bytes.
        store: where revoked sessions are kept, shared by every replica.
        lifetime: how long a session lasts after sign-in.
        clock: seconds since the epoch (a fake one in tests).
    """

    def __init__(
        self,
        secret: bytes,
        store: Store,
        *,
        lifetime: timedelta = SESSION_LIFETIME,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._secret = secret
        self._store = store
        self.lifetime = lifetime
        self._clock = clock

    def _sign(self, purpose: str, text: str) -> str:
        message = f"cron-bridge {purpose}|{text}".encode()
        return hmac.new(self._secret, message, hashlib.sha256).hexdigest()

    def issue(self) -> str:
        """A new session's cookie value."""
        session_id = secrets.token_hex(16)
        issued = str(int(self._clock()))
        return f"{session_id}.{issued}.{self._sign('session', f'{session_id}.{issued}')}"

    def check(self, cookie: str | None) -> str | None:
        """The session id of a valid cookie, else None.

        Raises:
            StoreUnavailable: the store could not say whether it was revoked.
        """
        parsed = self._parse(cookie)
        if parsed is None:
            return None
        session_id, _ = parsed
        # One read: revoke() holds this key until the cookie would have expired anyway.
        if self._store.holder(_revoked_key(session_id)) is not None:
            return None
        return session_id

    def revoke(self, cookie: str | None) -> None:
        """Sign the session out on every replica.

        Raises:
            StoreUnavailable: the store could not be told (the cookie is still cleared).
        """
        parsed = self._parse(cookie)
        if parsed is None:
            return
        session_id, issued = parsed
        left = issued + self.lifetime.total_seconds() - self._clock()
        self._store.acquire(_revoked_key(session_id), "revoked", timedelta(seconds=max(1, left)))

    def csrf(self, session_id: str | None) -> str:
        """The form token of a session (or of bearer-token use, without one)."""
        return self._sign("csrf", session_id or "bearer")

    def seal(self, csrf: str, said: str) -> str:
        """The seal of ``said``, a message of this server to the session whose form token is
        ``csrf``."""
        return self._sign("said", f"{csrf}|{said}")

    def unsealed(self, csrf: str, said: str | None, seal: str | None) -> str | None:
        """``said`` when ``seal`` is its seal for this session, else None."""
        if not said or not seal:
            return None
        expected = self.seal(csrf, said)
        if not hmac.compare_digest(seal.encode("utf-8", "replace"), expected.encode()):
            return None
        return said

    def max_age(self) -> int:
        return int(self.lifetime.total_seconds())

    def _parse(self, cookie: str | None) -> tuple[str, float] | None:
        match = _COOKIE.fullmatch(cookie or "")
        if match is None:
            return None
        session_id, issued, signature = match.groups()
        expected = self._sign("session", f"{session_id}.{issued}")
        if not hmac.compare_digest(signature, expected):
            return None
        age = self._clock() - int(issued)
        if not -60 <= age <= self.lifetime.total_seconds():  # a minute of clock skew
            return None
        return session_id, float(issued)


def _revoked_key(session_id: str) -> str:
    return f"session-revoked:{session_id}"
