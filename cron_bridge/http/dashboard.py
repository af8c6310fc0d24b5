"""The scheduler panel: server-rendered HTML, no build step, readable on a phone.

Every page is built from the beat's jobs and what the store says. The overview: counts of
the jobs failing, paused, late and running (each a filter), a search over job names, and each
job with its schedule, next run, last run anywhere in the cluster and its last occurrences;
the live replicas from their heartbeats. A job's page: its options and next runs, its
occurrences one row each (every attempt with its outcome, duration and lag, the replicas that
stood aside counted, the traceback behind a click), filtered by state and paged, and a "run
now" button that goes through the normal trigger and says in words what it did. Without
JavaScript it is plain HTML; with it, the page reloads itself every few seconds while nobody
is typing or reading a traceback.

The pages are ``overview`` and ``job_page``, built on ``views`` (what they share), ``strips``
(the pictures) and ``occurrences`` (a job's rows), in the frame of ``layout``, of values
escaped by ``html``.
"""

from cron_bridge.http.job_page import job_page, run_now_words
from cron_bridge.http.layout import login_page, not_found_page
from cron_bridge.http.overview import overview_page
from cron_bridge.http.views import STRIP_OCCURRENCES, View

__all__ = [
    "STRIP_OCCURRENCES",
    "View",
    "job_page",
    "login_page",
    "not_found_page",
    "overview_page",
    "run_now_words",
]
