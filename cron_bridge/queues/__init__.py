"""The seam with the queue libraries: what an adapter is and how the core finds it.

``adapter`` (``Adapter``, the base class every adapter subclasses, and what the core hands it:
``TaskRef``, ``Dispatch``), ``installed`` (the entry point group ``cron_bridge.adapters``:
``installed_adapters``, ``get_adapter``, ``find_adapter``, ``register``), ``sending`` (what the
adapters share for sending: ``DropInSender``, ``SendThreads``), ``celery_beat`` (the names
``celery beat -S`` resolves, forwarded to the Celery adapter). Adapter distributions import
these through ``cron_bridge.adapters``, never from here.
"""
