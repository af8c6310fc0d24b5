"""The control records of a PostgreSQL store: one row per record in the controls table, read
within a reader's bounds, created one at a time or a batch all or none, written many groups at
once. ``PostgresStore`` takes them from this mixin."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

from cron_bridge.plumbing import inbound
from cron_bridge.stores import run_summary
from cron_bridge.stores.base import StoreStats
from cron_bridge.stores.postgres_sql import CONTROLS, fetch
from cron_bridge.stores.records import (
    CONTROL_KEY_MAX,
    CONTROLS_BYTES,
    CONTROLS_MAX,
    FIRST_KEYS_MAX,
    UNREADABLE,
    control_records,
)

if TYPE_CHECKING:
    import psycopg
    from psycopg import sql

__all__ = ["PostgresControls"]

# An entry's shape and place (run_summary.order), read by the server: a value of another
# shape (its outcome one an entry names) is replaced before its digits are read (CASE keeps
# that order).
_SHAPE = "^" + "[0-9]" * 15 + " [1-4] " + "[0-9]" * 5 + f" ({'|'.join(run_summary.OUTCOMES)})$"


def _place(value: str) -> str:
    return (
        f"(substr({value}, 1, 15)::bigint, substr({value}, 17, 1)::int,"
        f" substr({value}, 19, 5)::int)"
    )


RAISE = (
    "INSERT INTO {controls} AS c (grp, key, value) SELECT %s, k, v"
    " FROM unnest(%s::text[], %s::text[]) AS t(k, v)"
    " ON CONFLICT (grp, key) DO UPDATE SET value = EXCLUDED.value, updated_at = now()"
    f" WHERE CASE WHEN c.value !~ '{_SHAPE}' THEN true"
    " WHEN substr(c.value, 1, 15)::bigint > %s THEN true"
    f" ELSE {_place('c.value')} < {_place('EXCLUDED.value')} END"
)

T = TypeVar("T")


class PostgresControls:
    """The control records of a PostgreSQL store (a mixin: it uses the store's ``_call`` and
    ``_sql``)."""

    stats: StoreStats

    if TYPE_CHECKING:  # the store's own, for the methods below

        def _call(self, work: Callable[[psycopg.Connection[Any]], T]) -> T: ...

        def _sql(self, text: str) -> sql.Composed: ...

    def put_control(self, group: str, key: str, value: str | None) -> None:
        if value is None:
            statement = self._sql("DELETE FROM {controls} WHERE grp = %s AND key = %s")
            self._call(lambda conn: conn.execute(statement, (group, key)))
            return
        statement = self._sql(
            "INSERT INTO {controls} (grp, key, value) VALUES (%s, %s, %s) ON CONFLICT (grp, key) "
            "DO UPDATE SET value = excluded.value, updated_at = now()"
        )
        self._call(lambda conn: conn.execute(statement, (group, key, value)))

    def add_control(self, group: str, key: str, value: str) -> bool:
        statement = self._sql(
            "INSERT INTO {controls} (grp, key, value) VALUES (%s, %s, %s) ON CONFLICT (grp, key) "
            "DO NOTHING RETURNING 1"
        )
        rows = self._call(lambda conn: conn.execute(statement, (group, key, value)).fetchall())
        return bool(rows)

    def write_controls(self, writes: Mapping[str, Mapping[str, str | None]]) -> None:
        sets = [
            (g, k, v) for g, values in writes.items() for k, v in values.items() if v is not None
        ]
        deletes = [(g, k) for g, values in writes.items() for k, v in values.items() if v is None]
        upsert = self._sql(
            "INSERT INTO {controls} (grp, key, value) SELECT * FROM"
            " unnest(%s::text[], %s::text[], %s::text[])"
            " ON CONFLICT (grp, key) DO UPDATE SET value = EXCLUDED.value, updated_at = now()"
        )
        delete = self._sql(
            "DELETE FROM {controls} c USING unnest(%s::text[], %s::text[]) AS d(g, k)"
            " WHERE c.grp = d.g AND c.key = d.k"
        )

        def work(conn: psycopg.Connection[Any]) -> None:
            if sets:
                conn.execute(upsert, [list(column) for column in zip(*sets, strict=True)])
            if deletes:
                conn.execute(delete, [list(column) for column in zip(*deletes, strict=True)])

        if sets or deletes:
            self._call(work)

    def raise_controls(self, group: str, values: Mapping[str, str], *, ceiling_ms: int) -> None:
        if values:
            self._call(lambda conn: self._raise_on(conn, group, values, ceiling_ms))

    def _raise_on(
        self,
        conn: psycopg.Connection[Any],
        group: str,
        values: Mapping[str, str],
        ceiling_ms: int,
    ) -> None:
        """``raise_controls`` in the caller's transaction (``record_many``'s): one statement,
        the order of ``run_summary.raised`` kept by the server, row by row, the rows taken in
        the order of their keys (two writers never wait for each other's)."""
        keys = sorted(values)
        conn.execute(self._sql(RAISE), (group, keys, [values[key] for key in keys], ceiling_ms))

    def add_controls(self, group: str, values: Mapping[str, str]) -> list[str]:
        statement = self._sql(
            "INSERT INTO {controls} (grp, key, value) SELECT %s, k, v"
            " FROM unnest(%s::text[], %s::text[]) AS t(k, v)"
            " ON CONFLICT (grp, key) DO NOTHING RETURNING key"
        )
        return self._all_or_none(statement, group, values)

    def replace_controls(self, group: str, values: Mapping[str, str]) -> list[str]:
        statement = self._sql(
            "UPDATE {controls} SET value = t.v, updated_at = now()"
            " FROM (SELECT %s::text AS grp, k, v FROM unnest(%s::text[], %s::text[]) AS t(k, v)) t"
            " WHERE {controls}.grp = t.grp AND key = t.k RETURNING key"
        )
        return self._all_or_none(statement, group, values)

    def _all_or_none(self, statement: Any, group: str, values: Mapping[str, str]) -> list[str]:
        """Write ``values`` with ``statement`` (of the group, the keys and the values) in one
        transaction, rolled back when it wrote fewer than all: the keys it did not write."""
        if not values:
            return []
        keys, texts = list(values), list(values.values())

        def work(conn: psycopg.Connection[Any]) -> list[str]:
            rows = conn.execute(statement, (group, keys, texts)).fetchall()
            made = {row[0] if isinstance(row[0], str) else bytes(row[0]).decode() for row in rows}
            if len(made) < len(keys):
                raise _Taken(sorted(set(keys) - made))  # _call's transaction rolls back
            return []

        try:
            return self._call(work)
        except _Taken as left:
            self.stats.add()
            return left.keys

    def put_controls(self, group: str, values: Mapping[str, str]) -> None:
        if not values:
            return
        statement = self._sql(
            "INSERT INTO {controls} (grp, key, value) VALUES (%s, %s, %s) ON CONFLICT (grp, key) "
            "DO UPDATE SET value = excluded.value, updated_at = now()"
        )
        rows = [(group, key, value) for key, value in values.items()]
        self._call(lambda conn: conn.cursor().executemany(statement, rows))

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
        statement = self._sql(CONTROLS)
        rows = self._call(lambda conn: fetch(conn, statement, bounds))
        total = rows[0][2] if rows else 0
        pairs = ((key, value) for key, value, _ in rows)
        return control_records(pairs, group, most=most, max_bytes=max_bytes, total=total)

    def control_keys(self, group: str, *, most: int = CONTROLS_MAX) -> list[str]:
        statement = self._sql(
            "SELECT key FROM {controls} WHERE grp = %s AND octet_length(key) <= %s"
            " ORDER BY key LIMIT %s"
        )
        rows = self._call(lambda conn: fetch(conn, statement, (group, CONTROL_KEY_MAX, most)))
        where = f"controls:{group}"
        keys = (inbound.text(row[0], where, row[0], max_bytes=CONTROL_KEY_MAX) for row in rows)
        return sorted(key for key in keys if key is not None)

    def first_control_keys(
        self, group: str, count: int, *, most: int = CONTROLS_MAX
    ) -> tuple[list[str], int]:
        if count <= 0:
            statement = self._sql("SELECT count(*) FROM {controls} WHERE grp = %s")
            return [], int(self._call(lambda conn: fetch(conn, statement, (group,)))[0][0])
        # Byte order (COLLATE "C"), which is code-point order in UTF-8, as Python sorts: not
        # the database's collation, which may put "b" before "B" before "c".
        statement = self._sql(
            'SELECT key, count(*) OVER () FROM {controls} WHERE grp = %s ORDER BY key COLLATE "C"'
            " LIMIT %s"
        )
        asked = min(count, FIRST_KEYS_MAX)
        rows = self._call(lambda conn: fetch(conn, statement, (group, asked)))
        where = f"controls:{group}"
        keys = (inbound.text(row[0], where, row[0], max_bytes=CONTROL_KEY_MAX) for row in rows)
        return [key for key in keys if key is not None], int(rows[0][1]) if rows else 0

    def controls_of(self, group: str, keys: Sequence[str]) -> dict[str, str]:
        wanted = list(dict.fromkeys(keys))
        if not wanted:
            return {}
        statement = self._sql(
            "SELECT key, CASE WHEN octet_length(value) <= %s THEN value END"
            " FROM {controls} WHERE grp = %s AND key = ANY(%s)"
        )
        rows = self._call(lambda conn: fetch(conn, statement, (inbound.MAX_BYTES, group, wanted)))
        found = {}
        for raw_key, value in rows:
            key = inbound.text(raw_key, f"controls:{group}", raw_key, max_bytes=CONTROL_KEY_MAX)
            if key is not None:
                text = None if value is None else inbound.text(value, f"controls:{group}", key)
                found[key] = UNREADABLE if text is None else text
        return found

    def control(self, group: str, key: str) -> str | None:
        statement = self._sql("SELECT value FROM {controls} WHERE grp = %s AND key = %s")
        rows = self._call(lambda conn: fetch(conn, statement, (group, key)))
        if not rows:
            return None
        found = inbound.text(rows[0][0], f"controls:{group}", key)
        return UNREADABLE if found is None else found


class _Taken(Exception):
    """Ends ``add_controls``'s transaction (rolled back) when some keys exist, or
    ``replace_controls``'s when some do not."""

    def __init__(self, keys: list[str]) -> None:
        super().__init__(keys)
        self.keys = keys
