"""Many stored schedules in one call: the checks ``StoredSchedules.add_many``, ``update_many``
and ``remove_many`` make of every entry before anything is written, and the JSON lines the
command line and the API take them as.

Each entry is checked as ``add``, ``update`` or ``remove`` checks one, and a refusal names the
entry it is about (``ConfigError.entry``, counted from 0). Building a job to check it is most
of a bulk write's time, so the task and options that entries share (a thousand tenants on one
cron and task) are checked once (``SharedChecks``); what depends on the name, the arguments and
the size is checked for each.

JSON lines (``json_lines``) come from anywhere (a file, standard input, a request's body): each
line is bounded, decoded and checked to be an object here, and a bad one is refused naming its
line, before any entry is looked at.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any

from cron_bridge.control.schedule_spec import (
    SPEC_MAX,
    ScheduleEntry,
    changed,
    check_own,
    check_storable,
    shared_key,
    spec_from,
    stored_json,
    summary,
)
from cron_bridge.errors import ConfigError
from cron_bridge.jobs import NAME_PATTERN
from cron_bridge.plumbing import inbound

__all__ = [
    "BULK",
    "LINES_MAX",
    "LINE_MAX",
    "SharedChecks",
    "checked_adds",
    "checked_names",
    "checked_updates",
    "json_lines",
    "line_of",
    "stored_only",
]

BULK = 5_000  # schedules written in one round trip
LINE_MAX = 2 * SPEC_MAX  # bytes of one line of JSON lines
LINES_MAX = 1_000_000  # lines of one file or body


class SharedChecks:
    """``ScheduleEntry.job`` and the allow-list, checked once for the entries that share what
    they depend on besides the name, the arguments and the size."""

    def __init__(self) -> None:
        self._jobs: set[str] = set()  # shared_key of the specs whose job() passed
        self._storable: set[tuple[str, str]] = set()  # (library, task) the allow-list agreed

    def checked(self, spec: ScheduleEntry, *, storable: bool) -> str:
        """``spec`` as stored (its JSON), checked as ``ScheduleEntry.job`` checks it, then,
        with ``storable``, against the allow-list (``check_storable``), then its size.

        Raises:
            ConfigError: what those checks refuse, naming the schedule and the option.
        """
        shared = shared_key(spec)
        try:
            raw: str | None = json.dumps(spec.to_json(), allow_nan=False)
        except (TypeError, ValueError):  # the arguments: spec.job() names which
            raw = None
        if shared is not None and shared in self._jobs and raw is not None:
            check_own(spec)  # what else spec.job() checks depends on the shared part alone
        else:
            spec.job()
            if shared is not None:
                self._jobs.add(shared)
        if storable and (spec.library, spec.task) not in self._storable:
            check_storable(spec)
            self._storable.add((spec.library, spec.task))
        return stored_json(spec, raw)


@contextmanager
def _entry(index: int) -> Iterator[None]:
    """A ``ConfigError`` raised within, said of the entry ``index``."""
    try:
        yield
    except ConfigError as exc:
        exc.entry = index
        raise


def checked_adds(entries: Iterable[Mapping[str, Any]]) -> list[tuple[ScheduleEntry, str]]:
    """Each entry as ``add`` would store it, with its JSON, checked as ``add`` checks it (the
    allow-list included); no two of one name.

    Raises:
        ConfigError: the first entry refused, naming it (``entry``), the option and the value.
    """
    checks = SharedChecks()
    specs: list[tuple[ScheduleEntry, str]] = []
    names: set[str] = set()
    for index, entry in enumerate(entries):
        with _entry(index):
            if not isinstance(entry, Mapping):
                raise ConfigError(
                    "expected a schedule: an object with name, task and library",
                    job=f"entry {index + 1}",
                    option="entry",
                    value=str(entry)[:80],
                )
            fields = dict(entry)
            name = fields.pop("name", None)
            try:
                spec = spec_from(name, **fields)
            except TypeError as exc:  # a missing task or library, an unknown field
                raise ConfigError(
                    f"expected name, task, library and the options of add ({exc})",
                    job=str(name) if name is not None else f"entry {index + 1}",
                    option="entry",
                    value=sorted(map(str, entry))[:10],
                ) from None
            raw = checks.checked(spec, storable=True)
            if spec.name in names:
                raise ConfigError(
                    "two entries of one name", job=spec.name, option="name", value=spec.name
                )
            names.add(spec.name)
            specs.append((spec, raw))
    return specs


def checked_updates(
    entries: Iterable[Mapping[str, Any]],
    read: Callable[[Sequence[str]], Mapping[str, ScheduleEntry]],
) -> list[tuple[ScheduleEntry, str, str]]:
    """Each entry (``name`` and the fields to change) as ``update`` would store it, with its
    JSON and the change in words, checked as ``update`` checks it: the schedule must exist
    (``read`` gets ``BULK`` of them at a time: the stored schedules of those names that can
    be read), the allow-list is asked when the task or library changes; no two of one name
    (refused before it is checked: one at a time, it would be checked against what the
    first one made).

    Raises:
        ConfigError: the first entry refused, naming it (``entry``), the option and the value.
        StoreUnavailable: the store could not be reached.
    """
    listed = list(entries)
    checks = SharedChecks()
    names: set[str] = set()
    checked: list[tuple[ScheduleEntry, str, str]] = []
    for start in range(0, len(listed), BULK):
        chunk = listed[start : start + BULK]
        wanted = [entry.get("name") for entry in chunk if isinstance(entry, Mapping)]
        # Only names that are text are read (one that is not is refused below, by its entry).
        stored = read(stored_only(dict.fromkeys(n for n in wanted if isinstance(n, str))))
        for index, entry in enumerate(chunk, start):
            with _entry(index):
                name = _name_of(entry, index)
                if name in names:
                    raise ConfigError(
                        "two entries of one name", job=name, option="name", value=name
                    )
                names.add(name)
                current = stored.get(name)
                if current is None:
                    raise ConfigError(
                        "no stored schedule of this name", job=name, option="name", value=name
                    )
                spec = changed(current, {k: v for k, v in entry.items() if k != "name"})
                moved = (spec.library, spec.task) != (current.library, current.task)
                raw = checks.checked(spec, storable=moved)  # a new task is checked as added
                checked.append((spec, raw, f"{summary(current)} -> {summary(spec)}"))
    return checked


def checked_names(names: Iterable[object]) -> list[str]:
    """The names to remove, each once, in the order given.

    Raises:
        ConfigError: one that is not text, naming its entry.
    """
    found: dict[str, None] = {}
    for index, name in enumerate(names):
        if not isinstance(name, str):
            error = ConfigError(
                "expected a stored schedule's name",
                job=f"entry {index + 1}",
                option="name",
                value=str(name)[:80],
            )
            error.entry = index
            raise error
        found[name] = None
    return list(found)


def stored_only(names: Iterable[object]) -> list[str]:
    """Those of ``names`` a stored schedule can have (``add`` refuses any other name): the
    others are not looked for in the store."""
    return [name for name in names if isinstance(name, str) and NAME_PATTERN.fullmatch(name)]


def _name_of(entry: object, index: int) -> str:
    """The name an update's entry is for."""
    if not isinstance(entry, Mapping):
        raise ConfigError(
            "expected the changes of a schedule: an object with its name",
            job=f"entry {index + 1}",
            option="entry",
            value=str(entry)[:80],
        )
    name = entry.get("name")
    if not isinstance(name, str):
        raise ConfigError(
            "expected the name of a stored schedule",
            job=f"entry {index + 1}",
            option="name",
            value=str(name)[:80],
        )
    return name


def json_lines(readline: Callable[[int], bytes]) -> list[tuple[int, dict[str, Any]]]:
    """The objects of JSON lines read with ``readline`` (a file's, a body's), each with its
    line's number; blank lines are skipped.

    Raises:
        ConfigError: a line longer than ``LINE_MAX``, not JSON or not an object (naming its
            number), or more than ``LINES_MAX`` of them.
    """
    entries: list[tuple[int, dict[str, Any]]] = []
    for number, line in enumerate(iter(lambda: readline(LINE_MAX + 1), b""), start=1):
        if len(line) > LINE_MAX:
            raise ConfigError(
                f"a line is at most {LINE_MAX} bytes", job=f"line {number}", option="line"
            )
        if not line.strip():
            continue
        if len(entries) >= LINES_MAX:
            raise ConfigError(f"at most {LINES_MAX} schedules at once", option="source")
        try:
            entry = inbound.loads(line, max_bytes=LINE_MAX)
        except ValueError as exc:
            raise ConfigError(
                f"not JSON ({exc})",
                job=f"line {number}",
                option="line",
                value=line[:80].decode(errors="replace"),
            ) from None
        if not isinstance(entry, dict):
            raise ConfigError(
                "expected a JSON object",
                job=f"line {number}",
                option="line",
                value=line[:80].decode(errors="replace"),
            )
        entries.append((number, entry))
    return entries


def line_of(error: ConfigError, numbers: Sequence[int]) -> int | None:
    """The line of the entry ``error`` is about, when it is about one: ``numbers`` are the
    entries' lines, in order."""
    if error.entry is None or not 0 <= error.entry < len(numbers):
        return None
    return numbers[error.entry]
