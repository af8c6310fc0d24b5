"""The options a job is declared with, each written once: here.

Each key of the ``TypedDict`` s below is an option, typed as a declaration may give it and
annotated with its ``Option``: its default, one line of help, whether a stored schedule may set
it, how the command line reads it. Everything else is derived from them:

- ``declare`` takes ``**options: Unpack[DeclareOptions]``, ``@cluster_task``
  ``Unpack[JobOptions]``, ``Beat.cron`` and ``Beat.every`` ``Unpack[CommonOptions]``, so mypy
  checks every call; ``given`` reads a call's options, defaults filled in, an old name read
  as the new one;
- ``Job``'s fields take their defaults from ``DEFAULTS``;
- a stored schedule may set the options marked ``stored`` (``STORED``);
- ``cron-bridge schedule add|update`` has a flag for each option with a ``cli`` reader, and
  its help;
- docs/configuration.md lists them all (``python -m tests.reference``).

Adding an option is a line here plus what it does (its ``Job`` field, its check);
``tests/test_options.py`` fails when a place misses one.
"""

# No ``from __future__ import annotations``: the annotations are the definition, evaluated
# once, here, and read back with ``get_type_hints``.

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Annotated, Any, Literal, TypedDict, get_args, get_origin, get_type_hints

from cron_bridge.backoff import Backoff
from cron_bridge.errors import ConfigError
from cron_bridge.monitors import Monitor

__all__ = [
    "CHOICES",
    "DEFAULTS",
    "OPTIONS",
    "STORED",
    "WHEN",
    "CommonOptions",
    "DeclareOptions",
    "JobOptions",
    "Misfire",
    "Option",
    "Overlap",
    "Scope",
    "StoredOptions",
    "Target",
    "check_names",
    "given",
    "shown",
]

Scope = Literal["cluster", "instance"]
Overlap = Literal["skip", "allow"]
Misfire = Literal["skip", "run-once"]
Target = Literal["queue", "inline"]
Duration = str | float | timedelta  # "90s", "5m", a number of seconds, a timedelta
Instant = datetime | str  # an aware datetime, or ISO 8601 text with its UTC offset


@dataclass(frozen=True, kw_only=True, slots=True)
class Option:
    """What the definition says of one option besides its type.

    Attributes:
        default: what a declaration that leaves it out gets (and ``Job``'s field, unchanged).
        help: one line, for ``--help`` and the reference.
        schedule: it says when the job runs: shown where a stored schedule is summarised.
        stored: a stored schedule may set it among its options (its JSON, the HTTP API,
            ``cron-bridge schedule add|update``).
        cli: how ``cron-bridge schedule add|update`` reads ``--<name, _ as ->``: as text
            (``str``, then read as the Python API reads text) or as a whole number in a
            ``range``; None: no flag.
        old_name_of: this key is an older spelling of that option, read as it.
    """

    default: Any = None
    help: str
    schedule: bool = False
    stored: bool = False
    cli: type[str] | range | None = None
    old_name_of: str | None = None


class _Kind(TypedDict, total=False):
    cron: Annotated[
        str | None,
        Option(
            help="A 5-field cron expression, or @hourly, @daily, @weekly, @monthly, @yearly.",
            schedule=True,
            stored=True,
            cli=str,
        ),
    ]
    every: Annotated[
        Duration | None,
        Option(
            help="An interval: 90s, 5m, 1h, 1d, or seconds (a stored schedule's: at least 1s).",
            schedule=True,
            stored=True,
            cli=str,
        ),
    ]
    at: Annotated[
        Instant | None,
        Option(
            help="One time for a one-off run, ISO 8601 with its zone (2026-12-01T09:00:00+01:00).",
            schedule=True,
            stored=True,
            cli=str,
        ),
    ]


class CommonOptions(TypedDict, total=False):
    """The options of every declaration but the kind of schedule: what ``Beat.cron`` and
    ``Beat.every`` take beside their expression or interval."""

    tz: Annotated[
        str,
        Option(
            default="UTC",
            help="The IANA zone the cron fields are read in.",
            schedule=True,
            stored=True,
            cli=str,
        ),
    ]
    day_or: Annotated[
        bool,
        Option(
            default=True,
            help="A cron restricting both the day of month and the weekday fires on a day "
            "matching either; False: both.",
            schedule=True,
            stored=True,
        ),
    ]
    offset: Annotated[
        Duration,
        Option(
            default=timedelta(0),
            help="Shift an interval from the epoch's multiples (every 1h, offset 15m: at :15).",
            schedule=True,
            stored=True,
            cli=str,
        ),
    ]
    start: Annotated[
        Instant | None,
        Option(
            help="No occurrence before this time (ISO 8601 with its zone).",
            schedule=True,
            stored=True,
            cli=str,
        ),
    ]
    end: Annotated[
        Instant | None,
        Option(
            help="No occurrence after this time (ISO 8601 with its zone).",
            schedule=True,
            stored=True,
            cli=str,
        ),
    ]
    jitter: Annotated[
        Duration,
        Option(
            default=timedelta(0),
            help="Delay each occurrence by up to this much (at most 1d), the same on every "
            "replica.",
            schedule=True,
            stored=True,
            cli=str,
        ),
    ]
    scope: Annotated[
        Scope,
        Option(
            default="cluster",
            help="cluster: claimed once in the cluster; instance: every replica runs it "
            "(inline only).",
        ),
    ]
    overlap: Annotated[
        Overlap,
        Option(
            default="skip",
            help="skip, or allow: a run while the previous one still runs.",
            stored=True,
            cli=str,
        ),
    ]
    misfire: Annotated[
        Misfire,
        Option(
            default="skip",
            help="skip, or run-once: run the latest occurrence missed while down.",
            stored=True,
            cli=str,
        ),
    ]
    misfire_grace: Annotated[
        Duration,
        Option(
            default=timedelta(seconds=30),
            help="How late an occurrence may still start; how long a failed enqueue is retried.",
            stored=True,
            cli=str,
        ),
    ]
    coalesce: Annotated[
        bool,
        Option(
            default=True,
            help="Occurrences due together: the latest runs, the others are recorded missed "
            "(False: each is dispatched).",
        ),
    ]
    attempts: Annotated[
        int,
        Option(
            default=1,
            help="Total tries, the first included.",
            stored=True,
            cli=range(1, 1001),
        ),
    ]
    backoff: Annotated[
        Backoff | None,
        Option(
            default=Backoff.fixed(0),
            help="The wait between tries: Backoff.fixed(s) or Backoff.exponential(s, max=...).",
        ),
    ]
    lock_ttl: Annotated[
        Duration,
        Option(
            default=timedelta(seconds=30),
            help="The overlap lock's lifetime, renewed by the heartbeat.",
            stored=True,
            cli=str,
        ),
    ]
    timeout: Annotated[
        Duration | None,
        Option(
            help="Abort the run (ctx.signal, reason timeout) after this long.",
            stored=True,
            cli=str,
        ),
    ]
    on_demand: Annotated[
        bool,
        Option(
            default=False,
            help="Never armed by a beat's timer: it runs only when asked for (cron-bridge run, "
            "HTTP, the dashboard).",
        ),
    ]
    external: Annotated[
        bool,
        Option(
            default=False, help="The old name of on_demand, read as it.", old_name_of="on_demand"
        ),
    ]
    kwargs: Annotated[
        Mapping[str, Any] | None,
        Option(default={}, help="JSON-serialisable keyword arguments for the handler."),
    ]
    monitor: Annotated[
        str | Monitor | None,
        Option(
            help='"sentry" or Ping(url): a check-in as each attempt starts and ends '
            "(default: the process's, $CRON_BRIDGE_MONITOR).",
        ),
    ]


class JobOptions(_Kind, CommonOptions, total=False):
    """The options of ``@cluster_task``: the kind of schedule (one of ``cron``, ``every``,
    ``at``), the common options and the target."""

    target: Annotated[
        Target,
        Option(
            default="queue",
            help="queue: the queue library's task runs it; inline: the beat calls it itself.",
        ),
    ]


class DeclareOptions(JobOptions, total=False):
    """The options of ``declare``: those of ``@cluster_task``, and what a queue target declared
    by its task's name (a stored schedule) may hand its queue library."""

    send: Annotated[
        Mapping[str, Any] | None,
        Option(
            default={},
            help="Options the queue library gets with each message, by its own names (RQ: "
            "job_timeout, result_ttl, ttl, meta, at_front).",
            stored=True,
        ),
    ]


class StoredOptions(TypedDict, total=False):
    """The options a stored schedule may set (``StoredSchedules.add``, ``check`` and
    ``update``), typed as ``@cluster_task`` takes them: those of ``OPTIONS`` marked
    ``stored``, which a test checks these keys against. A duration or a time given as a
    ``timedelta`` or ``datetime`` is stored as its text."""

    cron: str | None
    every: Duration | None
    at: Instant | None
    tz: str
    day_or: bool
    offset: Duration
    start: Instant | None
    end: Instant | None
    jitter: Duration
    overlap: Overlap
    misfire: Misfire
    misfire_grace: Duration
    attempts: int
    lock_ttl: Duration
    timeout: Duration | None
    send: Mapping[str, Any] | None


def _read(options: type) -> dict[str, Option]:
    """The ``Option`` of each key of ``options``, in their order."""
    found = {}
    for name, hint in get_type_hints(options, include_extras=True).items():
        said = [m for m in getattr(hint, "__metadata__", ()) if isinstance(m, Option)]
        if len(said) != 1:
            raise TypeError(f"the option {name} needs one Option(...) in its annotation")
        found[name] = said[0]
    return found


OPTIONS: Mapping[str, Option] = _read(DeclareOptions)  # every option, in the definition's order
# The values an option typed as a Literal may take.
CHOICES: Mapping[str, tuple[str, ...]] = {
    name: get_args(kind)
    for name, kind in get_type_hints(DeclareOptions).items()
    if get_origin(kind) is Literal
}
DEFAULTS: Mapping[str, Any] = {name: option.default for name, option in OPTIONS.items()}
STORED = tuple(name for name, option in OPTIONS.items() if option.stored)
WHEN = tuple(name for name, option in OPTIONS.items() if option.schedule)
_KEYS: dict[type, frozenset[str]] = {
    kind: frozenset(_read(kind)) for kind in (CommonOptions, JobOptions, DeclareOptions)
}


def check_names(options: Mapping[str, Any], accepted: type, *, caller: str) -> frozenset[str]:
    """The options ``accepted`` (one of the ``TypedDict`` s above) has.

    Raises:
        TypeError: ``options`` has one it does not, as Python says of a keyword argument.
    """
    known = _KEYS[accepted]
    for name in options:
        if name not in known:
            raise TypeError(f"{caller}() got an unexpected keyword argument {name!r}")
    return known


def given(options: Mapping[str, Any], accepted: type, *, caller: str, job: str) -> dict[str, Any]:
    """``options`` as a declaration taking ``accepted`` (one of the ``TypedDict`` s above)
    reads them: every option it takes, the default where one is not given, an old name read as
    the new one.

    Raises:
        TypeError: an option ``accepted`` does not have, as Python says of a keyword argument.
        ConfigError: an option given under its old and its new name, with different values.
    """
    known = check_names(options, accepted, caller=caller)
    values = {}
    for name in known:
        option = OPTIONS[name]
        if option.old_name_of is None:
            values[name] = options.get(name, option.default)
    for name in known & options.keys():
        new = OPTIONS[name].old_name_of
        if new is None:
            continue
        if new in options and options[new] != options[name]:
            raise ConfigError(
                f"{name}= is the old name of {new}=, which says {options[new]!r}",
                job=job,
                option=name,
                value=options[name],
            )
        values[new] = options[name]
    return values


def shown(value: Any) -> str:
    """A default as the reference and ``--help`` write it: ``30s``, ``UTC``,
    ``Backoff.fixed(0)``, ``none``."""
    if value is None:
        return "none"
    if isinstance(value, timedelta):
        return _seconds(value.total_seconds())
    if isinstance(value, Backoff):
        if value.kind == "fixed":
            return f"Backoff.fixed({value.base:g})"
        return f"Backoff.exponential({value.base:g}, max={value.max!r})"
    return str(value)


def _seconds(seconds: float) -> str:
    for unit, size in (("d", 86_400), ("h", 3_600), ("m", 60)):
        if seconds and seconds % size == 0:
            return f"{seconds / size:g}{unit}"
    return f"{seconds:g}s" if seconds else "0"
