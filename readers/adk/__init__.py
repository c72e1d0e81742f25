"""Google ADK's ``DatabaseSessionService``, read as it is: on SQLite (``sqlite.py``) and on PostgreSQL
(``postgres.py``), sharing ``base.py`` (everything but the connection and the SQL). ``model.py`` turns
listed ``events`` rows into checkpoints, events and findings; ``replay.py`` rebuilds a session's state
and live conversation at an event as ADK does (scopes, rewinds); ``messages.py`` makes ADK content
plain messages; ``recovery.py`` rewinds a session as ``Runner.rewind_async`` does, with a journal table
in the same database."""
