"""The errors cron-bridge raises.

::

    CronBridgeError            the root: catch this to catch everything of ours
    ├── ConfigError            a bad declaration, option or URL (also a ValueError)
    ├── StoreUnavailable       the store could not be reached or answered with an error
    ├── InvalidMessage         a queue message whose cron-bridge metadata is not ours to run
    │   └── RefusedTask        a stored schedule naming a task it may not name (not retried)
    ├── QueueRetry             the queue library took the next try itself (Celery's Retry)
    └── Aborted                a cooperative stop asked through ``ctx.signal``
"""

from __future__ import annotations

from typing import Any

__all__ = [
    "Aborted",
    "ConfigError",
    "CronBridgeError",
    "InvalidMessage",
    "QueueRetry",
    "RefusedTask",
    "StoreUnavailable",
]


class CronBridgeError(Exception):
    """The root of every error cron-bridge raises on purpose."""


class ConfigError(CronBridgeError, ValueError):
    """A bad declaration or option, found before anything runs.

    Attributes:
        reason: what is wrong, without the job and option.
        job: the job the declaration is for, when there is one.
        option: the option that is wrong.
        value: the value given for it.
        entry: the entry of a batch it is about, counted from 0 (``StoredSchedules.add_many``,
            ``update_many`` and ``remove_many`` say it; the command line and the API name its
            line).
    """

    def __init__(
        self,
        message: str,
        *,
        job: str | None = None,
        option: str | None = None,
        value: Any = None,
    ) -> None:
        self.reason = message
        self.job = job
        self.option = option
        self.value = value
        self.entry: int | None = None
        parts = []
        if job is not None:
            parts.append(f"job {job!r}")
        if option is not None:
            parts.append(f"option {option}={value!r}")
        prefix = ", ".join(parts)
        super().__init__(f"{prefix}: {message}" if prefix else message)

    def for_job(self, job: str, option: str | None = None, value: Any = None) -> ConfigError:
        """The same error, said of ``job`` (and of its option, when the error had none)."""
        if option is None:
            option, value = self.option, self.value
        return ConfigError(self.reason, job=job, option=option, value=value)


class StoreUnavailable(CronBridgeError):
    """The store could not be reached, or failed while answering.

    Transient: a caller may try again later. A cluster job never runs without a claim, so
    while this is raised cluster jobs do not run.

    Attributes:
        host: where the store was expected (host:port, or a file path).
    """

    def __init__(self, message: str, *, host: str | None = None) -> None:
        self.host = host
        super().__init__(f"{message} (store at {host})" if host else message)


class FenceUnreadable(CronBridgeError):
    """A lock's fencing counter in the store holds what no token can come from (another
    program's value or type, a number at its end): the lock is not taken, and the run does
    not start (recorded ``failed`` with this text) until the counter is repaired. Other
    jobs are not concerned, and the store is not down.

    Attributes:
        key: the lock whose counter it is.
    """

    def __init__(self, key: str, found: str) -> None:
        self.key = key
        super().__init__(
            f"the fencing counter of {key} holds {found}: no token can follow it; "
            "repair it (set it above every token handed out) or delete it"
        )


class InvalidMessage(CronBridgeError):
    """A queue message whose cron-bridge metadata is malformed or names another job.

    The worker refuses it before the handler runs and before anything is recorded: whoever
    can write to the broker cannot make a run count under another job's name.
    """


class RefusedTask(InvalidMessage):
    """A stored schedule's delivery that names a task stored schedules may not name here
    (``cron_bridge.storable``), or a schedule that is gone: nothing was imported or called,
    the delivery is recorded ``failed`` with the reason, and the queue must not retry it.
    """


class QueueRetry(CronBridgeError):
    """Raised by an adapter's call when the handler asked its queue library to try again and
    the library has already scheduled the next try (Celery's ``Retry``, from ``self.retry()``
    or ``autoretry_for``): the guard records the attempt ``failed`` with ``cause`` as its error,
    as one that is not the last, and gives ``retry`` back to the library.

    Attributes:
        cause: what the handler failed with, when the library says (``Retry.exc``).
        retry: the library's own signal, to raise again once the attempt is recorded.
    """

    def __init__(self, retry: BaseException, cause: BaseException | None) -> None:
        self.retry = retry
        self.cause = cause
        super().__init__(f"retried by the queue: {cause or retry}")


class Aborted(CronBridgeError):
    """Raised by ``ctx.signal.raise_if_aborted()`` once the run has been asked to stop.

    Attributes:
        reason: ``lock-lost``, ``shutdown`` or ``timeout``.
    """

    def __init__(self, reason: str) -> None:
        self.reason = reason
        super().__init__(f"run aborted: {reason}")
