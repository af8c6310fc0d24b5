"""An ``rq cron`` config stock runs in part: a 6-field (seconds) crontab, a name RQ takes and
cron-bridge's job names do not, and three registrations RQ refuses (``interval=0``, both
``interval`` and ``cron``, a minute of 61), which stock logs and skips. Run by
adapters/rq/tests/test_rq_cron_config.py with ``cron-bridge rq-cron`` and ``cron-bridge list``."""

from rq import cron

from tests.apps.rq_cron_tasks import cleanup, send_report, sync_accounts

cron.register(cleanup, queue_name="default", cron="* * * * * */15")
cron.register(
    send_report,
    queue_name="reports",
    cron="0 2 * * *",
    args=("nightly",),
    name="nightly report (EU)",
)
cron.register(sync_accounts, queue_name="sync", interval=0, args=("eu",), name="no interval")
cron.register(sync_accounts, queue_name="sync", interval=60, cron="* * * * *", name="both")
cron.register(cleanup, queue_name="default", cron="61 * * * *", name="minute 61")
cron.register(sync_accounts, queue_name="sync", interval=86400, args=("us",), name="daily sync")
