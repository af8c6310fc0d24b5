"""The development lock: every package the project's venvs install, resolved once.

Each venv has an input here (``lock/<venv>.in``: what it needs, as pip reads it, with the
dependency groups of pyproject.toml it takes) and a lock beside it (``lock/<venv>.txt``: every
package pinned, with its hashes, for every platform and Python 3.11+). ``dev`` is resolved
first, to the newest releases the ranges admit; every other venv is resolved under dev's pins
(as constraints), but for the packages its input pins itself and those its ``# free:`` line
names (a floor's older dependencies): so a package has one version in every venv but where a
floor says otherwise. The Makefile installs exactly a lock into its venv (``uv pip sync
--require-hashes``: hashes checked, anything else removed), then the project's own
distributions from the tree without their dependencies.

The published distributions keep their ranges: this is for development and CI only.

    python3 lock/lock.py compile UV        make lock: every lock resolved anew, the newest first
    python3 lock/lock.py drift PYTHON LOCK the installed versions that differ from a lock
    python3 lock/lock.py newest UV         make newest: the newest releases, tried (no lock)

Standard library only: it runs before any venv exists.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
HERE = ROOT / "lock"
# The project's own distributions: installed from the tree, never pinned.
OWN = ("cron-bridge", "cron-bridge-celery", "cron-bridge-rq", "cron-bridge-dramatiq")


@dataclass(frozen=True, kw_only=True, slots=True)
class Lock:
    """One venv's input and lock, and the groups of pyproject.toml it takes."""

    name: str
    groups: tuple[str, ...] = ()
    constrained: bool = True  # resolved under dev's pins

    @property
    def source(self) -> Path:
        return HERE / f"{self.name}.in"

    @property
    def pinned(self) -> Path:
        return HERE / f"{self.name}.txt"


# dev first: the others are resolved under its pins.
LOCKS = (
    Lock(name="tools", constrained=False),  # uv itself, which installs the others
    Lock(name="dev", groups=("dev",), constrained=False),  # .venv: everything
    Lock(name="demo"),  # .venv before make test: what make demo runs
    Lock(name="core", groups=("test",)),  # .venv-core: make check's unit tests
    Lock(name="celery-floor"),  # .venv-celery-floor
    Lock(name="queue-floor"),  # .venv-queue-floor
)
BY_NAME = {lock.name: lock for lock in LOCKS}

_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")
_PIN = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)==([^\s;\\]+)")


def canonical(name: str) -> str:
    """A distribution's name as PEP 503 compares them."""
    return re.sub(r"[-_.]+", "-", name).lower()


def pins(lock_file: Path) -> dict[str, set[str]]:
    """Each package a lock pins, with its versions (a universal lock may pin two, by marker)."""
    found: dict[str, set[str]] = {}
    for line in lock_file.read_text().splitlines():
        match = _PIN.match(line)
        if match:
            found.setdefault(canonical(match.group(1)), set()).add(match.group(2))
    return found


def own_pins(source: Path) -> set[str]:
    """The packages an input pins itself or names free: not held to dev's versions."""
    names: set[str] = set()
    for raw in source.read_text().splitlines():
        line = raw.strip()
        if line.startswith("# free:"):
            names.update(canonical(n) for n in line.removeprefix("# free:").split())
        elif line and not line.startswith(("#", "-")) and "==" in line:
            match = _NAME.match(line)
            if match:
                names.add(canonical(match.group(0).split("[")[0]))
    return names


def compile_one(uv: str, lock: Lock, constraints: Path | None) -> None:
    command = [
        uv, "pip", "compile", str(lock.source.relative_to(ROOT)),
        "--universal", "--python-version", "3.11", "--generate-hashes", "--upgrade",
        "--quiet", "--no-header", "-o", str(lock.pinned.relative_to(ROOT)),
    ]  # fmt: skip
    for own in OWN:
        command += ["--no-emit-package", own]
    for group in lock.groups:
        command += ["--group", f"pyproject.toml:{group}"]
    if constraints is not None:
        command += ["-c", str(constraints)]
    subprocess.run(command, cwd=ROOT, check=True)
    body = lock.pinned.read_text()
    header = (
        f"# The lock of {lock.name}'s venv, from lock/{lock.name}.in: written by `make lock`"
        " (lock/lock.py), never by hand.\n"
    )
    lock.pinned.write_text(header + body)


def compile_all(uv: str) -> None:
    """Every lock anew: dev to the newest, the others under dev's pins but their own."""
    for lock in LOCKS:
        if not lock.constrained:
            compile_one(uv, lock, None)
            continue
        held = pins(BY_NAME["dev"].pinned)
        free = own_pins(lock.source)
        # At a path of the tree's, removed after: the lock's annotations name it, and a
        # temporary file's random name would change every lock at every refresh.
        constraints = HERE / f"{lock.name}.dev-pins"
        constraints.write_text(
            "".join(
                f"{name}=={next(iter(versions))}\n"
                for name, versions in sorted(held.items())
                if name not in free and len(versions) == 1
            )
        )
        try:
            compile_one(uv, lock, constraints.relative_to(ROOT))
        finally:
            constraints.unlink()
        print(f"lock/{lock.name}.txt: {len(pins(lock.pinned))} packages")


def installed(python: str) -> dict[str, str]:
    """What a venv holds, by canonical name."""
    code = (
        "import importlib.metadata as m, json;"
        "print(json.dumps({d.metadata['Name']: d.version for d in m.distributions()}))"
    )
    out = subprocess.run([python, "-c", code], capture_output=True, text=True, check=True)
    return {canonical(k): v for k, v in json.loads(out.stdout).items()}


def drift(python: str, lock_file: Path) -> list[str]:
    """One line for each package whose installed version the lock does not pin."""
    held = pins(lock_file)
    lines = []
    for name, version in sorted(installed(python).items()):
        if name in OWN:
            continue
        if name not in held:
            lines.append(f"{name} {version} (not in {lock_file.name})")
        elif version not in held[name]:
            lines.append(f"{name} {version} (locked: {', '.join(sorted(held[name]))})")
    return lines


# What make newest runs in the newest venv: lint, types, and the adapters' own tests and
# end-to-end tests (the floor venvs' cases left out: they are the floors, not the newest).
NEWEST_CHECKS = (
    ("ruff", ["ruff", "check", "."]),
    ("ruff format", ["ruff", "format", "--check", "."]),
    ("import-linter", ["lint-imports"]),
    ("mypy", ["mypy"]),
)
NEWEST_TESTS = (
    "adapters",
    "tests/test_queues.py",
    "tests/e2e/test_queues.py",
    "tests/e2e/test_celery_beat.py",
    "tests/e2e/test_celery_retries.py",
    "tests/e2e/test_celery_twin.py",
    "tests/e2e/test_django_beat.py",
    "tests/e2e/test_rq_cron.py",
    "tests/e2e/test_rq_cron_anchor.py",
    "tests/e2e/test_periodiq.py",
    "tests/e2e/test_dramatiq_crontab.py",
    "tests/e2e/test_stored.py",
)


def newest(uv: str, workers: str) -> int:
    """A venv of the newest releases (no lock), checked and tested; what differs and failed."""
    venv = ROOT / ".venv-newest"
    shutil.rmtree(venv, ignore_errors=True)
    subprocess.run([uv, "venv", "--quiet", "--python", sys.executable, str(venv)], check=True)
    python = str(venv / "bin" / "python")
    subprocess.run(
        [uv, "pip", "install", "--quiet", "--python", python, "--upgrade", "--refresh",
         "-r", "lock/dev.in", "--group", "pyproject.toml:dev"],
        cwd=ROOT, check=True,
    )  # fmt: skip
    env = {**os.environ, "PATH": f"{venv / 'bin'}{os.pathsep}{os.environ['PATH']}"}
    failed = []
    for what, command in NEWEST_CHECKS:
        print(f"make newest: {what}", flush=True)
        if subprocess.run(command, cwd=ROOT, env=env, check=False).returncode != 0:
            failed.append(what)
    print("make newest: the adapters' tests", flush=True)
    tests = subprocess.run(
        [python, "-m", "pytest", "-n", workers, "--maxschedchunk=1", "-m", "not alone",
         "-k", "not floor", "-p", "no:cacheprovider", *NEWEST_TESTS],
        cwd=ROOT, env=env, check=False,
    )  # fmt: skip
    if tests.returncode != 0:
        failed.append(f"pytest (exit {tests.returncode})")
    print("\nmake newest: the newest releases that differ from lock/dev.txt:")
    for line in drift(python, BY_NAME["dev"].pinned) or ["(none: the lock is at the newest)"]:
        print(f"  {line}")
    print("make newest: " + (f"FAILED: {', '.join(failed)}" if failed else "all passed"))
    return 1 if failed else 0


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="lock.py", description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("compile").add_argument("uv")
    check = sub.add_parser("drift")
    check.add_argument("python")
    check.add_argument("lock")
    new = sub.add_parser("newest")
    new.add_argument("uv")
    new.add_argument("--workers", default="8")
    args = parser.parse_args(argv)
    if args.command == "compile":
        try:
            compile_all(args.uv)
        except subprocess.CalledProcessError as failed:
            print(f"lock.py: {failed.cmd[3]} did not resolve (uv said why above)", file=sys.stderr)
            return 1
        return 0
    if args.command == "drift":
        lines = drift(args.python, ROOT / args.lock)
        for line in lines:
            print(line)
        return 1 if lines else 0
    return newest(args.uv, args.workers)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
