"""The job options are defined once (``cron_bridge.options``): each reaches every place that
takes options, so an option added to the definition and forgotten anywhere fails here."""

from __future__ import annotations

import dataclasses
import inspect
import re
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, Unpack, get_type_hints

import pytest
from click.testing import CliRunner

from cron_bridge import Backoff, Beat, ConfigError, Cron, Every, Registry, Sentry, cluster_task
from cron_bridge.cli.main import main
from cron_bridge.control.schedules import ScheduleEntry, StoredSchedules
from cron_bridge.http.job_page import job_page
from cron_bridge.http.views import View
from cron_bridge.jobs import Job, declare
from cron_bridge.options import (
    OPTIONS,
    STORED,
    CommonOptions,
    DeclareOptions,
    JobOptions,
)
from cron_bridge.stores import MemoryStore, store_from_url
from cron_bridge.windows import At, Window
from tests.e2e.processes import REPO


def handler(ctx: Any) -> None:
    """A plain inline handler."""


EVERY = {"every": "1h"}
CRON = {"cron": "0 3 * * 1"}

# For each option: the kind of schedule it is declared with (none for a kind itself), a value
# other than its default (JSON for one a stored schedule may set), and what a job declared with
# it shows of it. An option missing here fails test_every_option_has_a_sample.
SAMPLES: dict[str, tuple[dict[str, Any], Any, Callable[[Job], object]]] = {
    "cron": ({}, "0 3 * * 1", lambda job: job.schedule == Cron("0 3 * * 1")),
    "every": ({}, "7m", lambda job: job.schedule == Every("7m")),
    "at": (
        {},
        "2030-01-01T00:00:00+00:00",
        lambda job: (
            isinstance(job.schedule, At) and job.schedule.when == datetime(2030, 1, 1, tzinfo=UTC)
        ),
    ),
    "tz": (CRON, "Europe/Warsaw", lambda job: str(job.schedule.tz) == "Europe/Warsaw"),
    "day_or": (CRON, False, lambda job: job.schedule == Cron("0 3 * * 1", day_or=False)),
    "offset": (EVERY, "15m", lambda job: job.schedule == Every("1h", offset="15m")),
    "start": (
        EVERY,
        "2030-01-01T00:00:00+00:00",
        lambda job: (
            isinstance(job.schedule, Window)
            and job.schedule.start == datetime(2030, 1, 1, tzinfo=UTC)
        ),
    ),
    "end": (
        EVERY,
        "2030-01-01T00:00:00+00:00",
        lambda job: (
            isinstance(job.schedule, Window)
            and job.schedule.end == datetime(2030, 1, 1, tzinfo=UTC)
        ),
    ),
    "jitter": (EVERY, "10s", lambda job: job.jitter == timedelta(seconds=10)),
    "scope": (EVERY, "instance", lambda job: job.scope == "instance"),
    "overlap": (EVERY, "allow", lambda job: job.overlap == "allow"),
    "misfire": (EVERY, "run-once", lambda job: job.misfire == "run-once"),
    "misfire_grace": (EVERY, "45s", lambda job: job.misfire_grace == timedelta(seconds=45)),
    "coalesce": (EVERY, False, lambda job: job.coalesce is False),
    "attempts": (EVERY, 3, lambda job: job.attempts == 3),
    "backoff": (
        EVERY,
        Backoff.exponential(2, max=30),
        lambda job: job.backoff == Backoff.exponential(2, max=30),
    ),
    "lock_ttl": (EVERY, "3s", lambda job: job.lock_ttl == timedelta(seconds=3)),
    "timeout": (EVERY, "2m", lambda job: job.timeout == timedelta(minutes=2)),
    "on_demand": (EVERY, True, lambda job: job.on_demand is True),
    "external": (EVERY, True, lambda job: job.on_demand is True),
    "kwargs": (EVERY, {"tenant": 7}, lambda job: dict(job.kwargs) == {"tenant": 7}),
    "monitor": (EVERY, "sentry", lambda job: isinstance(job.monitor, Sentry)),
    "target": (EVERY, "inline", lambda job: job.target == "inline"),
    "send": (EVERY, {"job_timeout": 60}, lambda job: dict(job.send) == {"job_timeout": 60}),
}
NEEDS_INLINE = {"scope"}  # an instance scope runs in every replica: inline targets only


@pytest.fixture(autouse=True)
def _storable_tasks(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CRON_BRIDGE_STORED_TASKS", "proj.*")


def keys(options: type) -> set[str]:
    return set(get_type_hints(options))


def test_every_option_has_a_sample() -> None:
    """The samples below walk the definition: a new option needs one."""
    assert set(SAMPLES) == set(OPTIONS)


def test_each_signature_unpacks_the_definition() -> None:
    """``declare``, ``@cluster_task`` and ``Beat.cron``/``every`` take their options as
    ``Unpack`` of the definition, beside parameters that are no option."""
    takes = {
        declare: DeclareOptions,
        cluster_task: JobOptions,
        Beat.cron: CommonOptions,
        Beat.every: CommonOptions,
    }
    for function, options in takes.items():
        assert get_type_hints(function)["options"] == Unpack[options], function
        named = set(inspect.signature(function).parameters) - {"self", "options"}
        assert not named & set(OPTIONS), (function, named & set(OPTIONS))
    assert keys(CommonOptions) < keys(JobOptions) < keys(DeclareOptions) == set(OPTIONS)
    # What Beat.cron and Beat.every do not take: the kind of schedule (their first argument),
    # the target (inline) and what only a queue target declared by name sends.
    assert keys(DeclareOptions) - keys(CommonOptions) == {"cron", "every", "at", "target", "send"}


def test_the_stored_options_type_has_the_options_stored_schedules_take() -> None:
    """``StoredOptions`` (what ``StoredSchedules.add`` is typed with) names every option
    marked ``stored`` and no other, each with the type ``@cluster_task`` takes it as."""
    from cron_bridge.options import StoredOptions

    assert tuple(StoredOptions.__annotations__) == STORED
    declared = get_type_hints(DeclareOptions)
    assert get_type_hints(StoredOptions) == {name: declared[name] for name in STORED}


def test_job_takes_each_default_from_the_definition() -> None:
    """Each option ``Job`` keeps as a field defaults to the definition's default; the others
    are folded into its schedule, or are old names."""
    fields = {f.name: f for f in dataclasses.fields(Job)}
    for name, option in OPTIONS.items():
        if name not in fields:
            continue
        found = fields[name]
        made = found.default_factory() if found.default is dataclasses.MISSING else found.default
        assert made == option.default, name
    folded = set(OPTIONS) - set(fields)
    assert folded == {"cron", "every", "at", "tz", "day_or", "offset", "start", "end", "external"}
    # And nothing else: a field added to Job alone is an option no declaration can give.
    made_by_declaring = {"name", "schedule", "queue", "handler", "adapter", "task"}
    assert set(fields) - set(OPTIONS) == made_by_declaring, set(fields) - set(OPTIONS)


def declared(name: str, **more: Any) -> dict[str, Any]:
    when, value, _ = SAMPLES[name]
    target = {"target": "inline"} if name in NEEDS_INLINE else {}
    return {**when, **target, name: value, **more}


@pytest.mark.parametrize("name", list(OPTIONS))
def test_declare_takes_each_option(name: str) -> None:
    job = declare("opt.job", adapter="listqueue", task="proj.t", handler=handler, **declared(name))
    assert SAMPLES[name][2](job), job


@pytest.mark.parametrize("name", sorted(keys(JobOptions)))
def test_cluster_task_takes_each_of_its_options(name: str) -> None:
    registry = Registry()
    options = {"target": "inline", **declared(name)}
    cluster_task(name="opt.job", registry=registry, **options)(handler)
    job = registry.get("opt.job")
    assert job is not None and SAMPLES[name][2](job), job


@pytest.mark.parametrize("name", sorted(keys(CommonOptions)))
def test_beat_cron_and_every_take_each_of_their_options(name: str) -> None:
    when, value, seen = SAMPLES[name]
    beat = Beat(MemoryStore(), [])
    if "cron" in when:
        beat.cron(when["cron"], name="opt.job", **{name: value})(handler)
    else:
        beat.every(when["every"], name="opt.job", **{name: value})(handler)
    (job,) = beat.jobs()
    assert seen(job), job


@pytest.mark.extras  # a stored schedule names an installed adapter (RQ's)
@pytest.mark.parametrize("name", list(OPTIONS))
def test_a_stored_schedule_sets_exactly_the_options_marked_stored(name: str) -> None:
    """A stored option reaches the job a worker runs; any other is an unknown option."""
    seen = SAMPLES[name][2]
    spec = ScheduleEntry(name="opt.job", library="rq", task="proj.t", options=declared(name))
    if name in STORED:
        assert seen(spec.job(worker=True))
        return
    with pytest.raises(ConfigError, match="unknown option") as caught:
        spec.job(worker=True)
    assert (caught.value.job, caught.value.option) == ("opt.job", name)


def flag(name: str) -> str:
    return "--" + name.replace("_", "-")


def squashed(text: str) -> str:
    return " ".join(text.split())


@pytest.mark.parametrize("command", ["add", "update"])
def test_the_schedule_commands_have_a_flag_for_each_option_with_a_reader(command: str) -> None:
    shown = CliRunner().invoke(main, ["schedule", command, "--help"], terminal_width=200)
    assert shown.exit_code == 0, shown.output
    text = squashed(shown.output)
    own = {f.name for f in dataclasses.fields(ScheduleEntry)}  # --kwargs: a field of its own
    for name, option in OPTIONS.items():
        if name in own:
            continue
        if option.cli is None:
            assert f"{flag(name)} " not in text, name
        else:
            assert option.stored, f"{name}: a flag of the stored schedules' commands"
            assert f"{flag(name)} " in text and squashed(option.help) in text, name


@pytest.mark.extras  # a stored schedule names an installed adapter (RQ's)
@pytest.mark.parametrize("name", [n for n, o in OPTIONS.items() if o.cli is not None])
def test_each_flag_reaches_the_stored_schedule(name: str, tmp_path: Path) -> None:
    """``schedule add --<option> VALUE`` stores what the definition's reader makes of it,
    and the job runs with it."""
    when, value, seen = SAMPLES[name]
    url = f"sqlite:///{tmp_path / 'store.db'}"
    given = [arg for key, said in (*when.items(), (name, value)) for arg in (flag(key), str(said))]
    done = CliRunner().invoke(
        main,
        [
            "schedule",
            "add",
            "opt.job",
            "--task",
            "proj.t",
            "--library",
            "rq",
            *given,
            "--store",
            url,
        ],
    )
    assert done.exit_code == 0, done.output
    store = store_from_url(url)
    try:
        spec = StoredSchedules(store).get("opt.job")
    finally:
        store.close()
    assert spec is not None and seen(spec.job(worker=True)), spec


def test_each_option_is_in_the_reference_and_in_the_jobs_page() -> None:
    """docs/configuration.md has its row (generated); docs/jobs.md's options table, written
    by hand, names each one, an old name beside its new one."""
    reference = (REPO / "docs" / "configuration.md").read_text()
    jobs_page = (REPO / "docs" / "jobs.md").read_text()
    table = jobs_page.partition("## Options")[2].partition("\n\n```")[0]
    rows = {row.split(" | ")[0]: row for row in table.splitlines() if row.startswith("| `")}
    for name, option in OPTIONS.items():
        assert f"\n| `{name}` |" in reference, name
        new = option.old_name_of or name
        (row,) = [row for first, row in rows.items() if f"`{new}`" in first]
        assert f"`{name}`" in row, name


def test_the_reference_and_the_jobs_page_give_each_option_its_own_default() -> None:
    """The reference's job options table is the one the definitions make (checked here, in
    the fast loop, not only with the adapters' commands in make test), and each default the
    jobs page writes by hand is the one the reference gives (words, not a value, where it has
    none)."""
    from tests.reference import OPTIONS_BEGIN, OPTIONS_END, PAGE, job_options

    reference = PAGE.read_text()
    generated = reference.partition(OPTIONS_BEGIN)[2].partition(OPTIONS_END)[0]
    assert generated.strip() == job_options().strip(), "run python -m tests.reference"
    defaults = {}
    for row in job_options().splitlines()[2:]:
        name, default = row.split(" | ")[:2]
        defaults[name.removeprefix("| ").strip("`")] = default
    table = (REPO / "docs" / "jobs.md").read_text().partition("## Options")[2]
    for row in table.partition("\n\n```")[0].splitlines():
        if not row.startswith("| `"):
            continue
        first, default = row.split(" | ")[:2]
        for name in re.findall(r"`(\w+)`", first):
            if name in defaults:
                said = defaults[name]
                # No default in the reference: the page says in words what happens instead.
                assert default == said or (said == "-" and not default.startswith("`")), (
                    name,
                    default,
                    said,
                )


def test_the_old_name_of_on_demand_is_read_as_it_everywhere() -> None:
    """``external=`` is read as ``on_demand=`` silently (warnings are errors here), is
    ``Job.external``, and contradicting the new name is a ConfigError naming both."""
    registry = Registry()
    cluster_task(every="1h", name="old.a", target="inline", external=True, registry=registry)(
        handler
    )
    beat = Beat(MemoryStore(), [])
    beat.every("1h", name="old.b", external=True)(handler)
    beat.cron("0 3 * * *", name="old.c", external=True, on_demand=True)(handler)
    jobs = [
        *registry.jobs(),
        *beat.jobs(),
        declare("old.d", every="1h", external=True, adapter="a", task="t"),
    ]
    assert [(job.on_demand, job.external) for job in jobs] == [(True, True)] * 4
    with pytest.raises(ConfigError) as caught:
        declare("old.e", every="1h", external=True, on_demand=False, adapter="a", task="t")
    assert (caught.value.job, caught.value.option, caught.value.value) == (
        "old.e",
        "external",
        True,
    )
    assert "on_demand" in str(caught.value)


def test_an_option_there_is_none_of_is_a_type_error_as_python_says_it() -> None:
    with pytest.raises(
        TypeError, match=r"cluster_task\(\) got an unexpected keyword argument 'colour'"
    ):
        cluster_task(every="1h", colour="blue")  # type: ignore[call-arg]
    with pytest.raises(TypeError, match=r"declare\(\) got an unexpected keyword argument 'colour'"):
        declare("x", every="1h", colour="blue")  # type: ignore[call-arg]
    with pytest.raises(
        TypeError, match=r"Beat\.every\(\) got an unexpected keyword argument 'cron'"
    ):
        Beat(MemoryStore(), []).every("1h", cron="* * * * *")  # type: ignore[call-arg]
    with pytest.raises(
        TypeError, match=r"cluster_task\(\) got an unexpected keyword argument 'send'"
    ):
        cluster_task(every="1h", send={})  # type: ignore[call-arg]


@pytest.mark.slow
def test_mypy_checks_each_call_against_the_definition(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A value outside an option's Literal, a value of the wrong type and an option there is
    none of are mypy errors in user code; the old name is not."""
    from mypy import api

    monkeypatch.setenv("MYPYPATH", str(REPO))  # this checkout's cron_bridge, not an install

    user = tmp_path / "user.py"
    user.write_text(
        "from cron_bridge import Beat, cluster_task, declare\n"
        "from cron_bridge.stores import MemoryStore\n"
        'cluster_task(cron="0 3 * * *", overlap="skipp")\n'
        'cluster_task(cron="0 3 * * *", attempts="3")\n'
        'cluster_task(cron="0 3 * * *", colour="blue")\n'
        'cluster_task(cron="0 3 * * *", external=True, on_demand=True, day_or=False)\n'
        'declare("x", every="1h", send={"job_timeout": 3}, adapter="rq", task="t")\n'
        'Beat(MemoryStore(), []).cron("0 3 * * *", tz="Europe/Warsaw", misfire="run-once")\n'
    )
    out, err, _ = api.run(
        [
            "--no-error-summary",
            *("--cache-dir", str(tmp_path / "cache")),
            *("--config-file", str(REPO / "pyproject.toml")),
            str(user),
        ]
    )
    lines = sorted(re.findall(r"user\.py:(\d+): error", out))
    assert lines == ["3", "4", "5"], out + err


KEPT = [name for name in OPTIONS if name in {field.name for field in dataclasses.fields(Job)}]


def _page_options(job: Job) -> dict[str, str]:
    """What the dashboard's page of ``job`` lists under Options, by name."""
    store = MemoryStore()
    view = View(Beat(store, [job]), {})
    page = str(job_page(view, "/_scheduler", "token", *view.jobs()[0]))
    listed = page.partition("<dl class=options id=options>")[2].partition("</dl>")[0]
    return dict(re.findall(r"<dt>([^<]*)</dt><dd>([^<]*)</dd>", listed))


@pytest.mark.parametrize("name", KEPT)
def test_the_dashboard_job_page_shows_each_option_the_job_keeps(name: str) -> None:
    """Each option ``Job`` keeps is listed on the job's page, and a job declared with the
    sample shows it other than one left at the default (so the page reads the option)."""
    options = declared(name)
    job = declare("opt.job", adapter="listqueue", task="proj.t", handler=handler, **options)
    plain = declare(
        "opt.job",
        adapter="listqueue",
        task="proj.t",
        handler=handler,
        **{key: value for key, value in options.items() if key != name},
    )
    shown, default = _page_options(job), _page_options(plain)
    label = name.replace("_", " ")
    assert list(shown) == [key.replace("_", " ") for key in KEPT]
    assert shown[label] != default[label], (shown[label], default[label])
