"""The secret of the HTTP trigger and dashboard: what makes a string one (not a shipped
placeholder, at least 16 bytes), checked before anything is served."""

from __future__ import annotations

from cron_bridge.errors import ConfigError

__all__ = ["HOW_TO_MAKE_ONE", "MIN_SECRET_BYTES", "check_secret"]

MIN_SECRET_BYTES = 16
PLACEHOLDERS = {
    "change-me",
    "changeme",
    "change_me",
    "secret",
    "s3cret",
    "password",
    "token",
    "your-secret",
    "your-secret-here",
    "replace-me",
    "test",
    "example",
}
HOW_TO_MAKE_ONE = (
    "make one with: python -c 'import secrets; print(secrets.token_urlsafe(32))', and pass it "
    "as CRON_BRIDGE_SECRET or --secret-file"
)


def check_secret(secret: str | None) -> bytes:
    """The secret as bytes, once it looks like a secret.

    Raises:
        ConfigError: no secret, a known placeholder, or fewer than 16 bytes.
    """
    if not secret:
        raise ConfigError(
            f"the HTTP trigger refuses to start without a secret; {HOW_TO_MAKE_ONE}",
            option="secret",
            value="",
        )
    if secret.strip().lower() in PLACEHOLDERS:
        raise ConfigError(
            f"that is a placeholder, not a secret; {HOW_TO_MAKE_ONE}", option="secret", value="***"
        )
    raw = secret.encode("utf-8")
    if len(raw) < MIN_SECRET_BYTES:
        reason = f"a secret needs at least {MIN_SECRET_BYTES} bytes, this one has {len(raw)}"
        raise ConfigError(f"{reason}; {HOW_TO_MAKE_ONE}", option="secret", value="***")
    return raw
