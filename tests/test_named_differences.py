"""Every difference docs/migrating.md admits is one the differential and twin tests allow by
name, and every difference they allow is in its tables: a row without a test is a promise
nobody checks, and a test's exception without a row is a difference users are not told of.

Each row of an "Every intended difference" table ends with one code span, the name the tests
give it (``periodiq.sunday``); the tests declare theirs in module-level ``NAMED_DIFFERENCES``
dicts (read here with ``ast``, so no tool has to be importable)."""

from __future__ import annotations

import ast
from collections import Counter
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
MIGRATING = REPO / "docs" / "migrating.md"
COLUMN = "Named in the tests"


def _documented() -> list[tuple[str, str]]:
    """(table heading, name) for each row of each table of differences: every table under an
    "Every intended difference" heading, and any other table whose last column is
    ``Named in the tests`` (dramatiq-crontab's, under its own heading)."""
    rows: list[tuple[str, str]] = []
    heading, table, named = "", False, False
    for line in MIGRATING.read_text().splitlines():
        if line.startswith("#"):
            heading, table = line.lstrip("# ").strip(), False
            continue
        if not line.startswith("|"):
            table = False
            continue
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        if not table:  # the header row
            table, named = True, cells[-1] == COLUMN
            if "intended difference" in heading.lower():
                assert named, f"{heading!r}: the last column is {cells[-1]!r}, not {COLUMN!r}"
            continue
        if not named or set(line) <= set("|-: "):
            continue
        last = cells[-1]
        assert last.count("`") == 2 and last.startswith("`") and last.endswith("`"), (
            f"{heading!r}: the row {cells[0]!r} names no difference of the tests: {last!r}"
        )
        rows.append((heading, last.strip("`")))
    return rows


def _declared() -> dict[str, tuple[Path, str]]:
    """Each name of every ``NAMED_DIFFERENCES`` dict of the tests (the core's and the
    adapters'), with its file and text."""
    found: dict[str, tuple[Path, str]] = {}
    tests = [REPO / "tests", *sorted((REPO / "adapters").glob("*/tests"))]
    for path in sorted(path for folder in tests for path in folder.rglob("test_*.py")):
        tree = ast.parse(path.read_text(), filename=str(path))
        for node in tree.body:
            target = node.target if isinstance(node, ast.AnnAssign) else None
            if isinstance(node, ast.Assign) and len(node.targets) == 1:
                target = node.targets[0]
            if not (isinstance(target, ast.Name) and target.id == "NAMED_DIFFERENCES"):
                continue
            assert node.value is not None
            value = ast.literal_eval(node.value)
            assert isinstance(value, dict), path
            for name, said in value.items():
                assert name not in found, f"{name} is named in {found[name][0]} and {path}"
                assert isinstance(said, str) and said.strip(), f"{path}: {name} says nothing"
                found[name] = (path, said)
    return found


def test_each_row_of_the_difference_tables_is_a_difference_the_tests_name() -> None:
    rows = _documented()
    assert len(rows) >= 20, rows  # the tables were found and read
    names = [name for _, name in rows]
    twice = [name for name, count in Counter(names).items() if count > 1]
    assert not twice, f"named by more than one row: {twice}"
    declared = _declared()
    unknown = sorted(set(names) - set(declared))
    assert not unknown, f"rows of docs/migrating.md no test names: {unknown}"
    untold = sorted(set(declared) - set(names))
    assert not untold, f"differences the tests allow that docs/migrating.md does not list: {untold}"
