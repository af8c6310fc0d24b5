"""Edit the periodic tasks the way the admin does (``Model.save()``, so django-celery-beat's
change marker moves), from a test: ``python -m tests.apps.djproj.rows COMMAND JSON``.

- ``create [spec, ...]``: rows from specs (``kind``: interval, crontab, solar or clocked);
  ``raw`` fields are then written with ``QuerySet.update`` (what the admin would refuse).
- ``update {"name": ..., "every": ..., "enabled": ...}``: change a row and save it.
- ``dump``: every row, as JSON.
"""

from __future__ import annotations

import json
import os
import sys
from datetime import datetime
from typing import Any

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "tests.apps.djproj.settings")

import django  # the settings module first

django.setup()

from django_celery_beat.models import (  # noqa: E402
    ClockedSchedule,
    CrontabSchedule,
    IntervalSchedule,
    PeriodicTask,
    SolarSchedule,
)


def _interval(every: int, period: str) -> IntervalSchedule:
    """The interval row, as django-celery-beat's own from_schedule finds it: beats starting
    together may each have created one (no unique constraint), so the first of them."""
    found = IntervalSchedule.objects.filter(every=every, period=period).order_by("pk").first()
    return found or IntervalSchedule.objects.create(every=every, period=period)


def _schedule(spec: dict[str, Any]) -> dict[str, Any]:
    kind = spec["kind"]
    if kind == "interval":
        interval = _interval(spec["every"], spec.get("period", IntervalSchedule.SECONDS))
        return {"interval": interval}
    if kind == "crontab":
        fields = {
            k: spec.get(k, "*")
            for k in ("minute", "hour", "day_of_week", "day_of_month", "month_of_year")
        }
        crontab, _ = CrontabSchedule.objects.get_or_create(**fields, timezone=spec.get("tz", "UTC"))
        return {"crontab": crontab}
    if kind == "solar":
        solar, _ = SolarSchedule.objects.get_or_create(
            event=spec["event"], latitude=spec["lat"], longitude=spec["lon"]
        )
        return {"solar": solar}
    clocked = ClockedSchedule.objects.create(clocked_time=datetime.fromisoformat(spec["at"]))
    return {"clocked": clocked}


def create(specs: list[dict[str, Any]]) -> dict[str, int]:
    ids = {}
    for spec in specs:
        task = PeriodicTask(
            name=spec["name"],
            task=spec.get("task", "djproj.tick"),
            args=json.dumps(spec.get("args", [])),
            kwargs=json.dumps(spec.get("kwargs", {})),
            queue=spec.get("queue"),
            priority=spec.get("priority"),
            headers=json.dumps(spec.get("headers", {})),
            expire_seconds=spec.get("expire_seconds"),
            one_off=spec.get("one_off", False),
            **_schedule(spec),
        )
        task.save()
        if spec.get("raw"):
            PeriodicTask.objects.filter(pk=task.pk).update(**spec["raw"])
        ids[task.name] = task.pk
    return ids


def update(change: dict[str, Any]) -> dict[str, Any]:
    task = PeriodicTask.objects.get(name=change["name"])
    if "every" in change:
        task.interval = _interval(change["every"], IntervalSchedule.SECONDS)
    if "enabled" in change:
        task.enabled = change["enabled"]
    task.save()
    return {"name": task.name, "date_changed": task.date_changed.isoformat()}


def dump() -> list[dict[str, Any]]:
    return [
        {
            "id": t.pk,
            "name": t.name,
            "enabled": t.enabled,
            "total_run_count": t.total_run_count,
            "last_run_at": t.last_run_at.isoformat() if t.last_run_at else None,
        }
        for t in PeriodicTask.objects.order_by("pk")
    ]


if __name__ == "__main__":
    command = sys.argv[1]
    if command == "dump":
        result: Any = dump()
    else:
        result = {"create": create, "update": update}[command](json.loads(sys.argv[2]))
    sys.stdout.write(json.dumps(result) + "\n")
