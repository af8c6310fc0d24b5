"""The control records of a SQLite store: one row per record in the controls table, read
within a reader's bounds, created one at a time or a batch all or none, written many groups at
once. ``SQLiteStore`` takes them from this mixin."""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, TypeVar

from cron_bridge.plumbing import inbound
from cron_bridge.stores import run_summary
from cron_bridge.stores.records import (
    CONTROL_KEY_MAX,
    CONTROLS_BYTES,
    CONTROLS_MAX,
    FIRST_KEYS_MAX,
    UNREADABLE,
    control_records,
)

__all__ = ["SQLiteControls", "raise_on"]

T = TypeVar("T")

_CONTROLS = """
SELECT key, CASE WHEN size <= :one_max AND used <= :max_bytes THEN value END, total FROM (
    SELECT key, value, length(CAST(value AS BLOB)) AS size, count(*) OVER () AS total,
        sum(CASE WHEN length(CAST(value AS BLOB)) <= :one_max THEN length(CAST(value AS BLOB))
            END) OVER (ORDER BY key ROWS UNBOUNDED PRECEDING) AS used
    FROM controls WHERE grp = :grp AND length(CAST(key AS BLOB)) <= :key_max
) ORDER BY key LIMIT :most
"""


# An entry's shape and place (run_summary.order), read by SQLite: a value of another shape
# (its outcome one an entry names), or not text, is replaced before its digits are read (CASE
# keeps that order).
_SHAPE = "[0-9]" * 15 + " [1-4] " + "[0-9]" * 5 + " *"


def _place(value: str) -> str:
    return (
        f"(CAST(substr({value}, 1, 15) AS INTEGER), CAST(substr({value}, 17, 1) AS INTEGER),"
        f" CAST(substr({value}, 19, 5) AS INTEGER))"
    )


_OUTCOMES = ", ".join(f"'{outcome}'" for outcome in run_summary.OUTCOMES)
_RAISE = (
    "INSERT INTO controls VALUES (?, ?, ?) ON CONFLICT (grp, key) DO UPDATE SET"
    " value = excluded.value WHERE CASE"
    f" WHEN typeof(controls.value) <> 'text' OR controls.value NOT GLOB '{_SHAPE}'"
    f" OR substr(controls.value, 25) NOT IN ({_OUTCOMES}) THEN 1"
    " WHEN CAST(substr(controls.value, 1, 15) AS INTEGER) > ? THEN 1"
    f" ELSE {_place('controls.value')} < {_place('excluded.value')} END"
)


def raise_on(
    conn: sqlite3.Connection, group: str, values: Mapping[str, str], ceiling_ms: int
) -> None:
    """``raise_controls`` in the caller's transaction (``record_many``'s)."""
    rows = [(group, key, values[key], ceiling_ms) for key in sorted(values)]
    conn.executemany(_RAISE, rows)


class SQLiteControls:
    """The control records of a SQLite store (a mixin: it uses the store's ``_run``)."""

    if TYPE_CHECKING:  # the store's own, for the methods below

        def _run(self, work: Callable[[sqlite3.Connection], T], *, write: bool = True) -> T: ...

    def put_control(self, group: str, key: str, value: str | None) -> None:
        if value is None:
            self._run(
                lambda conn: conn.execute(
                    "DELETE FROM controls WHERE grp = ? AND key = ?", (group, key)
                )
            )
        else:
            self._run(
                lambda conn: conn.execute(
                    "INSERT INTO controls VALUES (?, ?, ?) ON CONFLICT (grp, key) DO UPDATE SET "
                    "value = excluded.value",
                    (group, key, value),
                )
            )

    def add_control(self, group: str, key: str, value: str) -> bool:
        rows = self._run(
            lambda conn: conn.execute(
                "INSERT INTO controls VALUES (?, ?, ?)"
                " ON CONFLICT (grp, key) DO NOTHING RETURNING key",
                (group, key, value),
            ).fetchall()
        )
        return bool(rows)

    def write_controls(self, writes: Mapping[str, Mapping[str, str | None]]) -> None:
        sets = [
            (g, k, v) for g, values in writes.items() for k, v in values.items() if v is not None
        ]
        deletes = [(g, k) for g, values in writes.items() for k, v in values.items() if v is None]

        def work(conn: sqlite3.Connection) -> None:
            conn.executemany(
                "INSERT INTO controls VALUES (?, ?, ?) ON CONFLICT (grp, key) DO UPDATE SET "
                "value = excluded.value",
                sets,
            )
            conn.executemany("DELETE FROM controls WHERE grp = ? AND key = ?", deletes)

        if sets or deletes:
            self._run(work)

    def raise_controls(self, group: str, values: Mapping[str, str], *, ceiling_ms: int) -> None:
        if values:
            self._run(lambda conn: raise_on(conn, group, values, ceiling_ms))

    def add_controls(self, group: str, values: Mapping[str, str]) -> list[str]:
        rows = [(group, key, value) for key, value in values.items()]

        def work(conn: sqlite3.Connection) -> list[str]:
            # One write transaction (``_run`` with write): the check and the writes see the
            # same records.
            taken: list[str] = []
            keys = list(values)
            for start in range(0, len(keys), 500):  # within SQLite's bound on parameters
                part = keys[start : start + 500]
                taken += [
                    row[0].decode(errors="replace")
                    for row in conn.execute(
                        f"SELECT key FROM controls WHERE grp = ? AND key IN "
                        f"({', '.join('?' * len(part))})",
                        (group, *part),
                    ).fetchall()
                ]
            if not taken:
                conn.executemany("INSERT INTO controls VALUES (?, ?, ?)", rows)
            return sorted(taken)

        return self._run(work) if rows else []

    def replace_controls(self, group: str, values: Mapping[str, str]) -> list[str]:
        rows = [(value, group, key) for key, value in values.items()]

        def work(conn: sqlite3.Connection) -> list[str]:
            # One write transaction (``_run`` with write): the check and the writes see the
            # same records.
            there: set[str] = set()
            keys = list(values)
            for start in range(0, len(keys), 500):  # within SQLite's bound on parameters
                part = keys[start : start + 500]
                there.update(
                    row[0] if isinstance(row[0], str) else bytes(row[0]).decode(errors="replace")
                    for row in conn.execute(
                        f"SELECT key FROM controls WHERE grp = ? AND key IN "
                        f"({', '.join('?' * len(part))})",
                        (group, *part),
                    ).fetchall()
                )
            missing = sorted(key for key in keys if key not in there)
            if not missing:
                conn.executemany("UPDATE controls SET value = ? WHERE grp = ? AND key = ?", rows)
            return missing

        return self._run(work) if rows else []

    def put_controls(self, group: str, values: Mapping[str, str]) -> None:
        if values:
            rows = [(group, key, value) for key, value in values.items()]
            self._run(
                lambda conn: conn.executemany(
                    "INSERT INTO controls VALUES (?, ?, ?) ON CONFLICT (grp, key) DO UPDATE SET "
                    "value = excluded.value",
                    rows,
                )
            )

    def controls(
        self, group: str, *, most: int = CONTROLS_MAX, max_bytes: int = CONTROLS_BYTES
    ) -> dict[str, str]:
        bounds = {
            "grp": group,
            "key_max": CONTROL_KEY_MAX,
            "one_max": inbound.MAX_BYTES,
            "max_bytes": max_bytes,
            "most": most,
        }
        rows = self._run(lambda conn: conn.execute(_CONTROLS, bounds).fetchall(), write=False)
        total = rows[0][2] if rows else 0
        pairs = ((key, value) for key, value, _ in rows)
        return control_records(pairs, group, most=most, max_bytes=max_bytes, total=total)

    def control_keys(self, group: str, *, most: int = CONTROLS_MAX) -> list[str]:
        rows = self._run(
            lambda conn: conn.execute(
                "SELECT key FROM controls WHERE grp = ? AND length(CAST(key AS BLOB)) <= ?"
                " ORDER BY key LIMIT ?",
                (group, CONTROL_KEY_MAX, most),
            ).fetchall(),
            write=False,
        )
        where = f"controls:{group}"
        keys = (inbound.text(row[0], where, row[0], max_bytes=CONTROL_KEY_MAX) for row in rows)
        return sorted(key for key in keys if key is not None)

    def first_control_keys(
        self, group: str, count: int, *, most: int = CONTROLS_MAX
    ) -> tuple[list[str], int]:
        # BINARY collation: byte order, which is code-point order in UTF-8, as Python sorts.
        rows = self._run(
            lambda conn: conn.execute(
                "SELECT key, count(*) OVER () FROM controls WHERE grp = ? ORDER BY key LIMIT ?",
                (group, min(max(count, 1), FIRST_KEYS_MAX)),
            ).fetchall(),
            write=False,
        )
        where = f"controls:{group}"
        keys = (inbound.text(row[0], where, row[0], max_bytes=CONTROL_KEY_MAX) for row in rows)
        found = [key for key in keys if key is not None][: max(count, 0)]
        return found, int(rows[0][1]) if rows else 0

    def controls_of(self, group: str, keys: Sequence[str]) -> dict[str, str]:
        wanted = list(dict.fromkeys(keys))

        def work(conn: sqlite3.Connection) -> list[tuple[bytes, bytes | None]]:
            rows = []
            for start in range(0, len(wanted), 500):  # within SQLite's bound on parameters
                part = wanted[start : start + 500]
                rows += conn.execute(
                    "SELECT key, CASE WHEN length(CAST(value AS BLOB)) <= ? THEN value END"
                    f" FROM controls WHERE grp = ? AND key IN ({', '.join('?' * len(part))})",
                    (inbound.MAX_BYTES, group, *part),
                ).fetchall()
            return rows

        found = {}
        for raw_key, value in self._run(work, write=False) if wanted else []:
            key = inbound.text(raw_key, f"controls:{group}", raw_key, max_bytes=CONTROL_KEY_MAX)
            if key is not None:
                text = None if value is None else inbound.text(value, f"controls:{group}", key)
                found[key] = UNREADABLE if text is None else text
        return found

    def control(self, group: str, key: str) -> str | None:
        rows = self._run(
            lambda conn: conn.execute(
                "SELECT value FROM controls WHERE grp = ? AND key = ?", (group, key)
            ).fetchall(),
            write=False,
        )
        if not rows:
            return None
        found = inbound.text(rows[0][0], f"controls:{group}", key)
        return UNREADABLE if found is None else found
