"""An ``rq cron`` config as RQ users write them: the functions imported from the project, and
``rq.cron.register`` with intervals and crontabs, args, kwargs, every job option, meta, a named
registration, one function registered twice, and an hourly registration under a name that is
not a valid job name (stock sends it at its start, then every hour). Run by stock ``rq cron`` and by
``cron-bridge rq-cron`` in tests/e2e/test_rq_cron.py."""

from rq import cron

from tests.apps.rq_cron_tasks import cleanup, send_report, sync_accounts

cron.register(cleanup, queue_name="default", interval=3)
cron.register(
    send_report,
    queue_name="reports",
    cron="* * * * *",
    args=("minutely",),
    kwargs={"to": "team@example.com"},
    job_timeout=120,
    result_ttl=600,
    ttl=300,
    failure_ttl=3600,
    meta={"owner": "ops", "tags": ["billing", "daily"]},
    name="minutely-report",
)
cron.register(sync_accounts, queue_name="sync", interval=4, args=("eu",), kwargs={"batch": 50})
cron.register(sync_accounts, queue_name="sync", interval=4, args=("us",), result_ttl=60)
cron.register(
    send_report, queue_name="reports", interval=3600, args=("hourly",), name="hourly report (EU)"
)
