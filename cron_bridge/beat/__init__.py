"""The beat: one replica's timer loop and what it does with each occurrence that comes due.

``replica`` (``Beat``: lifecycle and the loop), ``timers`` (the job set and its heap),
``planning`` (the misfire policy as a pure function), ``claiming`` (one batch of claims per
wake), ``dispatch`` (the bounded pool of runs in flight), ``inline`` (inline runs),
``enqueue`` (sends to queues), ``outcomes`` (whether the store answers, where the records
go), ``manual`` (runs asked for by the CLI, HTTP or dashboard), ``stored_sync`` (following
the stored schedules), ``clocksync`` (the store's clock).
"""
