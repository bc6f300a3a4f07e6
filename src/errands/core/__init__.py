"""The core: what a job is, with no I/O.

Job definitions and options, the payload format, the retry policy, cron, limits, settings,
errors, hooks and the rows the store hands back.  Nothing here opens a connection, starts a
thread or imports another part of errands; every other layer builds on it.  Where the core must
call the app or the store (a handle asking for its job's state), it names them through the
Protocols in :mod:`errands.core.host`.
"""
