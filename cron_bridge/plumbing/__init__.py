"""What every part uses and no part owns: reading what comes in (``inbound``), sanitising what
goes out (``outbound``, ``redaction``), secrets, store keys and lock owners (``keys``),
replica ids (``identity``), running async handlers (``aio``). Imports nothing of the parts above
it."""
