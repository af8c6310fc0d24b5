"""What a failed `make test` comes to, in one screen: the stage that failed, the failing tests
with their first error lines, the type and lint errors, and every installed version that
differs from the lock. `.ci/run` prints it at the end of a failed run, from the run's log.

    python3 .ci/summary.py LOG

Standard library only: it must work whatever the venvs hold.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
VENVS = {  # each venv the Makefile builds, and its lock
    ".venv": "dev",
    ".venv-core": "core",
    ".venv-celery-floor": "celery-floor",
    ".venv-queue-floor": "queue-floor",
}
SHOWN = 40  # lines of each kind, at most
_STAGE = re.compile(r"^make(?:\[\d+\])?: \*\*\* \[(Makefile:\d+): ([^\]]+)\] Error (\d+)")
_TEST = re.compile(r"^(FAILED|ERROR) (\S+)(?: - (.*))?$")
_CHECK = re.compile(r"^\S+\.py:\d+(?::\d+)?: (?:error|[A-Z]+\d+)\b.*$")
_RUFF = re.compile(r"^\s*--> (\S+\.py:\d+:\d+)$")


def summarize(log: str, root: Path = ROOT) -> list[str]:
    lines = log.splitlines()
    out = []
    stages = [m for m in map(_STAGE.match, lines) if m]
    if stages:
        where, target, code = stages[0].groups()
        out.append(f"make test failed at the stage `{target}` ({where}, exit {code})")
    else:
        out.append("make test failed before any stage said so (see the log's end)")
    tests = [m for m in map(_TEST.match, lines) if m]
    if tests:
        out.append(f"failing tests ({len(tests)}):")
        for kind, name, first in (m.groups() for m in tests[:SHOWN]):
            out.append(f"  {kind} {name}")
            if first:
                out.append(f"      {first[:300]}")
    checks = [line for line in lines if _CHECK.match(line) or _RUFF.match(line)]
    if checks:
        out.append(f"lint and type errors ({len(checks)}):")
        out += [f"  {line.strip()[:300]}" for line in checks[:SHOWN]]
    out.append("installed versions that differ from the lock:")
    differ = False
    for venv, lock in VENVS.items():
        python = root / venv / "bin" / "python"
        if not python.exists():
            out.append(f"  {venv}: not built")
            continue
        tool = [sys.executable, str(ROOT / "lock" / "lock.py")]
        done = subprocess.run(
            [*tool, "drift", str(python), f"lock/{lock}.txt"],
            capture_output=True, text=True, check=False, timeout=120,
        )  # fmt: skip
        for line in done.stdout.splitlines():
            differ = True
            out.append(f"  {venv}: {line}")
    if not differ:
        out.append("  none")
    return out


def main() -> int:
    log = Path(sys.argv[1]).read_text(errors="replace")
    print("\n==== .ci/run: why it failed ====")
    for line in summarize(log):
        print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
