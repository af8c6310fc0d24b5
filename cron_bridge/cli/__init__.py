"""The ``cron-bridge`` command line: one module per command group, attached to ``main`` here.

``main`` (``cron_bridge.cli.main``) is the group; ``beat``, ``jobs`` (list, run, history),
``control`` (pause, resume), ``schedules`` (schedule ...), ``imports`` (import ...) and
``demo`` each define their commands, and the installed adapters add theirs (``rq-cron``,
``periodiq``, ``import rq-scheduler``) through entry points; ``common`` is what they share
(one-line errors, exit codes, options).
"""

from cron_bridge.cli.beat import beat
from cron_bridge.cli.control import pause, resume
from cron_bridge.cli.demo import demo
from cron_bridge.cli.imports import import_
from cron_bridge.cli.jobs import history, run
from cron_bridge.cli.listing import list_jobs
from cron_bridge.cli.main import main
from cron_bridge.cli.schedules import schedule
from cron_bridge.cli.upcoming import next_runs

_COMMANDS = (beat, list_jobs, next_runs, run, history, pause, resume, schedule, import_, demo)
for _command in _COMMANDS:
    main.add_command(_command)

__all__ = ["main"]
