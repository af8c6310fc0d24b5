"""Runtime control and what the store says: pauses, stored schedules, history and the audit.

``pause`` (pause and resume, the change log), ``schedules`` (stored schedules and their change
feed), ``audit`` (an occurrence's story, a window's proof), ``aside`` (the replicas that stood
aside for an occurrence: the ledgers they write, read back), ``catalog`` (the jobs published
for dashboards of other processes).
"""
