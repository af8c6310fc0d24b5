"""The run of an occurrence, wherever it happens: on a worker for queue targets, in the beat
for inline ones.

``guard`` (overlap lock, heartbeat, context, timeout, run record), ``lease`` (the lock's
heartbeat), ``recording`` (records kept while the store is down), ``delivery`` (one queue
message on a worker), ``stored`` (one delivery of a stored schedule).
"""
