"""The development lock (lock/): every venv installs exactly its lock, and the locks agree with
what the project declares and with each other."""

from __future__ import annotations

import importlib.util
import re
import sys
import tomllib
from pathlib import Path
from types import ModuleType

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

REPO = Path(__file__).resolve().parent.parent
PYPROJECTS = [REPO / "pyproject.toml"] + [
    REPO / "adapters" / name / "pyproject.toml" for name in ("celery", "rq", "dramatiq")
]


def _lock_module() -> ModuleType:
    spec = importlib.util.spec_from_file_location("lock_tool", REPO / "lock" / "lock.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


lock = _lock_module()


def declared() -> list[Requirement]:
    """Every requirement the four pyproject.toml files name: dependencies, extras, groups."""
    found = []
    for path in PYPROJECTS:
        data = tomllib.loads(path.read_text())
        project = data["project"]
        lines = list(project["dependencies"])
        for extra in project.get("optional-dependencies", {}).values():
            lines += extra
        for group in data.get("dependency-groups", {}).values():
            lines += [line for line in group if isinstance(line, str)]
        found += [Requirement(line) for line in lines]
    return [r for r in found if canonicalize_name(r.name) not in lock.OWN]


def test_every_lock_has_its_input_and_pins_each_package_with_its_hashes() -> None:
    """A lock for each input and none other, and no pin without a hash: pip and uv refuse to
    install a hashed lock with one, so a hand-added line would fail every venv build."""
    inputs = {path.stem for path in (REPO / "lock").glob("*.in")}
    assert inputs == {entry.name for entry in lock.LOCKS}
    for entry in lock.LOCKS:
        text = entry.pinned.read_text()
        assert text.startswith(f"# The lock of {entry.name}'s venv"), entry.pinned
        assert not re.search(r"^-e ", text, re.MULTILINE), "the tree's own are not pinned"
        # Its annotations name the tree's paths only: a temporary file's name would change
        # every lock at every refresh.
        assert not re.search(r"^\s*#\s+-c /", text, re.MULTILINE), entry.pinned
        for block in re.split(r"\n(?=[A-Za-z0-9])", text):
            if lock._PIN.match(block):
                assert "--hash=sha256:" in block, (entry.name, block.splitlines()[0])


def test_the_dev_lock_satisfies_every_requirement_the_project_declares() -> None:
    """Each range in the pyproject files (the published ones and the dev group) admits the
    version the dev lock pins: a range raised without `make lock` fails here, not in CI's
    venv build."""
    pins = lock.pins(lock.BY_NAME["dev"].pinned)
    for requirement in declared():
        if requirement.marker and not requirement.marker.evaluate():
            continue
        name = canonicalize_name(requirement.name)
        assert name in pins, f"{requirement} is declared but not in lock/dev.txt: make lock"
        assert any(requirement.specifier.contains(v) for v in pins[name]), (
            f"lock/dev.txt pins {name} {pins[name]}, outside the declared {requirement}"
        )


def test_each_venv_has_devs_versions_but_for_its_own_pins() -> None:
    """A package has one version in every venv (the newest's, resolved once), but where a
    floor's input pins it or names it free."""
    dev = lock.pins(lock.BY_NAME["dev"].pinned)
    for entry in lock.LOCKS:
        if not entry.constrained:
            continue
        own = lock.own_pins(entry.source)
        for name, versions in lock.pins(entry.pinned).items():
            if name in own or name not in dev:
                continue
            assert versions <= dev[name], (entry.name, name, versions, dev[name])


@pytest.mark.parametrize(
    ("venv", "adapter", "library"),
    [
        ("celery-floor", "celery", "celery"),
        ("queue-floor", "rq", "rq"),
        ("queue-floor", "dramatiq", "dramatiq"),
    ],
)
def test_the_floor_venvs_hold_the_lowest_version_each_adapter_declares(
    venv: str, adapter: str, library: str
) -> None:
    """An untested floor is a false one: the floor venv holds exactly the adapter's `>=`."""
    text = (REPO / "adapters" / adapter / "pyproject.toml").read_text()
    found = re.search(rf'"{library}>=([0-9.]+)"', text)
    assert found, f"adapters/{adapter} declares no floor for {library}"
    (pinned,) = lock.pins(lock.BY_NAME[venv].pinned)[library]
    assert Version(pinned) == Version(found.group(1)), (venv, pinned)


def test_the_makefile_installs_nothing_but_the_locks() -> None:
    """Every install the Makefile does checks a lock's hashes, or is the tree's own
    distributions without their dependencies: no venv takes what the registry serves that
    day."""
    text = (REPO / "Makefile").read_text().replace("\\\n", " ")
    installs = re.findall(r"^\t.*\bpip (?:install|sync)\b.*$", text, re.MULTILINE)
    assert len(installs) >= 5, installs
    for line in installs:
        hashed = "--require-hashes" in line
        assert hashed or ("--no-deps" in line and "-r " not in line), line


def test_drift_names_what_a_venv_holds_that_its_lock_does_not_pin(tmp_path: Path) -> None:
    """What `.ci/run` prints on a failure: the installed versions that differ from the lock
    (this venv, the core's, against lock/core.txt, is in step when make check built it)."""
    fake = tmp_path / "lock.txt"
    fake.write_text("pytest==0.0.1 \\\n    --hash=sha256:00\nnothing-installed==1.0 \\\n")
    lines = lock.drift(sys.executable, fake)
    assert any(line.startswith("pytest ") and "(locked: 0.0.1)" in line for line in lines)
    assert any("(not in lock.txt)" in line for line in lines)
    assert not any(line.startswith("nothing-installed") for line in lines)
