"""Creates jobs with the real rq-scheduler, as projects do at run time, in the Redis at
``argv[1]``; prints their ids (and the first run of the interval ones) as JSON. Run by
tests/e2e/test_rq_scheduler_import.py with the floor venv's interpreter, which has
rq-scheduler (its ``crontab`` module cannot live beside django-celery-beat's).

With ``twin`` as ``argv[2]``: the jobs of the twin test instead, due in 3 s, calling
tests/apps/rq_scheduler_tasks.py, and the score rq-scheduler gave a ``0 2 * * *`` cron job."""

from __future__ import annotations

import json
import sys
import warnings
from datetime import UTC, datetime, timedelta

from redis import Redis
from rq_scheduler import Scheduler

from tests.apps.rq_cron_tasks import cleanup, send_report, sync_accounts
from tests.apps.rq_scheduler_tasks import nap, tell

warnings.simplefilter("ignore", FutureWarning)  # rq-scheduler's call into crontab warns
scheduler = Scheduler(connection=Redis.from_url(sys.argv[1]))
if sys.argv[2:] == ["twin"]:
    due = datetime.now(UTC).replace(tzinfo=None) + timedelta(seconds=3)  # naive UTC, as it takes
    twin = {
        "slow": scheduler.enqueue_at(due, nap, "slow", 12, timeout=5),
        "kept": scheduler.schedule(due, tell, args=["kept"], interval=3600, meta={"owner": "ops"}),
        "ttl": scheduler.enqueue_at(due, tell, "ttl", job_ttl=600),
        "once": scheduler.schedule(due, tell, args=["once"], interval=4, repeat=0),
        "nightly": scheduler.cron("0 2 * * *", func=tell, args=["nightly"]),
    }
    ids = {label: job.id for label, job in twin.items()}
    nightly = scheduler.connection.zscore("rq:scheduler:scheduled_jobs", ids["nightly"])
    sys.stdout.write(json.dumps({**ids, "nightly_at": nightly}))
    sys.exit(0)
every_at = datetime.now(UTC).replace(microsecond=0) + timedelta(seconds=97)
made = {
    "cron": scheduler.cron(
        "*/10 * * * *",
        func=send_report,
        args=["daily"],
        kwargs={"to": "team@example.com"},
        queue_name="reports",
        id="nightly-report",
    ),
    "local": scheduler.cron("30 6 * * 1-5", func=cleanup, use_local_timezone=True),
    "every": scheduler.schedule(every_at, sync_accounts, args=["eu"], interval=120),
    "counted": scheduler.schedule(every_at, sync_accounts, args=["us"], interval=60, repeat=3),
    "once": scheduler.enqueue_in(timedelta(hours=1), cleanup),
    "opaque": scheduler.cron("0 * * * *", func=sync_accounts, args=[datetime(2026, 1, 1)]),
    "meta": scheduler.cron("0 0 * * *", func=cleanup, meta={"owner": "ops"}),
    "unagreed": scheduler.schedule(every_at, print, args=["x"], interval=60),
}
sys.stdout.write(
    json.dumps({"every_at": every_at.timestamp(), **{k: j.id for k, j in made.items()}})
)
