"""The beat: one replica's timer loop and what it does with each occurrence that comes due.

``replica`` (``Beat``: lifecycle and the loop), ``timers`` (the job set), ``planning`` (the misfire policy as
a pure function), ``claiming`` (one batch of claims per wake), ``dispatch`` (inline runs and
enqueues), ``manual`` (runs asked for by the CLI, HTTP or dashboard), ``stored_sync``
(following the stored schedules), ``clocksync`` (the store's clock).
"""
