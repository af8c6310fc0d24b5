"""The seam with the queue libraries is one typed base class: every adapter subclasses it, a
misspelt member fails mypy, and a worker that imports an adapter loads no command line."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import textwrap
import tomllib
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from cron_bridge.errors import ConfigError
from cron_bridge.jobs import Job
from cron_bridge.queues.adapter import Adapter, Dispatch, TaskRef
from cron_bridge.queues.installed import register
from cron_bridge.queues.sending import DropInSender
from cron_bridge_celery import CeleryAdapter
from cron_bridge_dramatiq import DramatiqAdapter
from cron_bridge_rq import RQAdapter

pytestmark = pytest.mark.extras  # the three adapters, checked against the base class

REPO = Path(__file__).resolve().parents[1]
ADAPTER_PACKAGES = ("cron_bridge_celery", "cron_bridge_rq", "cron_bridge_dramatiq")


class Bare(Adapter, name="bare"):
    """An adapter with the four required members only."""

    def accepts(self, obj: object, queue: object | None) -> bool:
        return False

    def describe(self, obj: object, queue: object | None) -> TaskRef:
        raise NotImplementedError

    def wrap(self, obj: Any, job: Job) -> Any:
        return obj

    def enqueue_many(self, dispatches: Sequence[Dispatch]) -> list[Exception | None]:
        return [None for _ in dispatches]


def test_an_adapter_without_the_optional_members_gets_what_the_core_did_without_them() -> None:
    """The defaults are what the core assumed of an adapter that lacked a member: copies
    refused, jobs declared on it, no stored-schedule task, no send options, nothing declared
    in the modules, listed under its own name."""
    bare = Bare()
    assert (bare.refuses_copies, bare.declares, bare.stored_task) == (True, True, None)
    assert (bare.declared_in([]), bare.declared_as, bare.runs_with) == ([], "bare", "")
    assert bare.as_listed(None, []) == {}
    bare.check_send({})
    with pytest.raises(ConfigError, match="the bare adapter takes no send options") as caught:
        bare.check_send({"ttl": 5})
    assert (caught.value.option, caught.value.value) == ("send", {"ttl": 5})


def test_a_misspelt_class_keyword_fails_when_the_class_is_made() -> None:
    """The traits are class keywords: Python refuses one the base class does not take."""
    with pytest.raises(TypeError, match="refuse_copies"):
        type("Misspelt", (Bare,), {}, refuse_copies=False)


@pytest.mark.parametrize(
    "body",
    [
        {"refuse_copies": False},  # the trait set as a class attribute, misspelt
        {"as_listd": lambda self, store, jobs: {}},  # an optional member without @override
        {"runs_whith": property(lambda self: "celery beat")},
    ],
    ids=["trait", "method", "property"],
)
def test_a_misspelt_member_fails_when_the_class_is_made(body: dict[str, Any]) -> None:
    """A name nearly one of the interface's is a misspelling that would keep the default and
    turn a feature off silently: the class is refused, naming the member meant. A name of its
    own (a sender's ``publish``) is left alone."""
    (own,) = body
    with pytest.raises(TypeError, match=rf"Misspelt\.{own} is no member .* did you mean"):
        type("Misspelt", (Bare,), body)
    assert type("Own", (Bare,), {"publish": lambda self: None}).publish  # type: ignore[attr-defined]


def test_a_name_of_its_own_near_a_members_is_kept_when_of_another_kind_or_said() -> None:
    """A method near a trait's name (``names`` beside ``name``) is not a misspelling of it;
    one near a method's (``accepted`` beside ``accepts``) is kept when the class says it is
    its own; a subclass of an adapter is compared with the interface, not the adapter."""
    assert type("Names", (Bare,), {"names": lambda self: ["a"]})
    accepted = {"accepted": lambda self: True}
    with pytest.raises(TypeError, match="accepts"):
        type("Accepted", (Bare,), accepted)
    assert type("Accepted", (Bare,), accepted, own=("accepted",))
    assert type("Deeper", (type("Middle", (Bare,), {"publish": print}),), {"publishes": print})


def test_register_refuses_what_is_not_an_adapter_with_a_name() -> None:
    """An object of another class (an adapter written against the old protocol), or one
    whose class names none, is refused before the core reads members it lacks."""

    class Nameless(Bare):
        name = ""

    with pytest.raises(TypeError, match=r"not a subclass of cron_bridge\.adapters\.Adapter"):
        register(object())  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="has no name"):
        register(Nameless())


@pytest.mark.parametrize("adapter", [CeleryAdapter, RQAdapter, DramatiqAdapter])
def test_every_public_member_of_an_adapter_is_one_of_the_base_class(
    adapter: type[Adapter],
) -> None:
    """A member the base class lacks would be one the core never calls: a misspelling."""
    assert issubclass(adapter, Adapter)
    own = {name for name in vars(adapter) if not name.startswith("_")}
    assert own <= set(dir(Adapter)), own - set(dir(Adapter))
    assert adapter.name and adapter.stored_task


def test_the_drop_in_senders_share_the_base_of_senders() -> None:
    """Each sender of another scheduler's declarations is a DropInSender with its own name."""
    from cron_bridge_celery.django_beat import DjangoSender
    from cron_bridge_celery.sender import BeatScheduleSender
    from cron_bridge_dramatiq.crontab import CrontabSender
    from cron_bridge_dramatiq.periodiq import PeriodiqSender
    from cron_bridge_rq.rq_cron import RQCronSender

    senders = [BeatScheduleSender, DjangoSender, CrontabSender, PeriodiqSender, RQCronSender]
    for sender in senders:
        assert issubclass(sender, DropInSender) and not sender.declares, sender
        assert sender.what != DropInSender.what, sender
    assert len({s.name for s in senders}) == 4  # DjangoSender sends as BeatScheduleSender


def test_mypy_enables_explicit_override_for_the_seam_and_every_adapter() -> None:
    """The project's mypy config marks every override in the seam and the adapters."""
    config = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["mypy"]
    enabled = {
        module
        for override in config["overrides"]
        if "explicit-override" in override.get("enable_error_code", [])
        for module in override["module"]
    }
    assert {"cron_bridge.queues.*", *(f"{p}.*" for p in ADAPTER_PACKAGES)} <= enabled


# Each probe is a module of its own; the error each must get (None: none at all). They opt in
# to explicit-override as the project's config does for the adapters' packages.
PROBES = {
    "conforming": (
        """
        class Conforming(Adapter, name="probe", refuses_copies=False, stored_task="probe.run"):
            @override
            def accepts(self, obj: object, queue: object | None) -> bool:
                return False

            @override
            def describe(self, obj: object, queue: object | None) -> TaskRef:
                raise NotImplementedError

            @override
            def wrap(self, obj: Any, job: Job) -> Any:
                return obj

            @override
            def enqueue_many(self, dispatches: Sequence[Dispatch]) -> list[Exception | None]:
                return [None for _ in dispatches]

            @override
            def check_send(self, options: Mapping[str, Any]) -> None:
                pass

            @property
            @override
            def declared_as(self) -> str:
                return "probe's own"
        """,
        None,
    ),
    "misspelt_keyword": (
        """
        class Misspelt(DropInSender, name="probe", what="probes", refuse_copies=True):
            @override
            def enqueue_many(self, dispatches: Sequence[Dispatch]) -> list[Exception | None]:
                return []
        """,
        'Unexpected keyword argument "refuse_copies"',
    ),
    "misspelt_method": (
        """
        class Misspelt(DropInSender, name="probe", what="probes"):
            @override
            def enqueue_many(self, dispatches: Sequence[Dispatch]) -> list[Exception | None]:
                return []

            @override
            def check_sends(self, options: Mapping[str, Any]) -> None:
                pass
        """,
        'Method "check_sends" is marked as an override, but no base method was found',
    ),
    "misspelt_property": (
        """
        class Misspelt(DropInSender, name="probe", what="probes"):
            @override
            def enqueue_many(self, dispatches: Sequence[Dispatch]) -> list[Exception | None]:
                return []

            @property
            @override
            def run_with(self) -> str:
                return "probe {modules}"
        """,
        'Method "run_with" is marked as an override, but no base method was found',
    ),
    "unmarked": (
        """
        class Unmarked(DropInSender, name="probe", what="probes"):
            def enqueue_many(self, dispatches: Sequence[Dispatch]) -> list[Exception | None]:
                return []
        """,
        'Method "enqueue_many" is not using @override but is overriding a method',
    ),
}
PROBE_HEAD = """\
# mypy: enable-error-code="explicit-override"
from collections.abc import Mapping, Sequence
from typing import Any

from cron_bridge.adapters import Adapter, Dispatch, DropInSender, Job, TaskRef, override
"""


def test_mypy_fails_an_adapter_that_misspells_a_member(tmp_path: Path) -> None:
    """mypy, with the project's config, passes a conforming adapter and fails each probe
    with its misspelling (a class keyword, a method, a property) or an override unmarked."""
    files = {}
    for name, (body, _) in PROBES.items():
        files[name] = tmp_path / f"probe_{name}.py"
        files[name].write_text(PROBE_HEAD + "\n\n" + textwrap.dedent(body))
    paths = [str(REPO), *(str(REPO / "adapters" / lib) for lib in ("celery", "rq", "dramatiq"))]
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "mypy",
            "--config-file",
            str(REPO / "pyproject.toml"),
            "--strict",
            "--cache-dir",
            str(tmp_path / "cache"),
            "--no-error-summary",
            "--hide-error-context",
            *map(str, files.values()),
        ],
        cwd=tmp_path,
        env={**os.environ, "MYPYPATH": os.pathsep.join(paths)},
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    errors: dict[str, list[str]] = {name: [] for name in PROBES}
    for line in done.stdout.splitlines():
        if ": note: " in line:
            continue
        found = re.match(r"(?:.*[/\\])?probe_(\w+)\.py:\d+: error: (.*)", line)
        assert found is not None and found[1] in errors, (line, done.stderr)
        errors[found[1]].append(found[2])
    for name, (_, expected) in PROBES.items():
        if expected is None:
            assert errors[name] == [], name
        else:
            assert len(errors[name]) == 1 and expected in errors[name][0], (name, errors[name])


# What a worker must not load with an adapter: click (except where the queue library loads it
# itself: celery.exceptions imports it), cron-bridge's command line and its web surface.
LOADED_BY_NONE = ("cron_bridge.cli", "cron_bridge.http", "cron_bridge.commands")


@pytest.mark.parametrize(
    ("package", "forbidden"),
    [
        ("cron_bridge_celery", LOADED_BY_NONE),
        ("cron_bridge_rq", ("click", *LOADED_BY_NONE)),
        ("cron_bridge_dramatiq", ("click", *LOADED_BY_NONE)),
    ],
)
def test_a_worker_that_imports_an_adapter_loads_no_command_line(
    package: str, forbidden: tuple[str, ...]
) -> None:
    """What a worker loads with the adapter package, in a fresh process (the import-linter
    contract says it of the modules' imports, this of what an import really runs)."""
    code = (
        f"import json, sys, {package}\n"
        f"print(json.dumps(sorted(m for m in sys.modules if m.split('.')[0] == 'click' "
        f"and 'click' in {forbidden!r} or m.startswith({forbidden!r}))))"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True
    )
    assert json.loads(done.stdout) == []
