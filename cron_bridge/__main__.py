"""``python -m cron_bridge`` is the ``cron-bridge`` command."""

from cron_bridge.cli import main

main()
