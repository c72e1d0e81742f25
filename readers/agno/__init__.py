"""Agno's session stores, read as they are: ``SqliteDb`` (``sqlite.py``) and ``PostgresDb`` (``postgres.py``,
tables in their ``db_schema``, ``ai`` by default), sharing ``base.py`` (everything but the connection and the
SQL). ``model.py`` turns ``agno_runs`` rows (and runs still in an Agno 2.x ``runs`` column) into checkpoints,
events and findings; ``recovery.py`` restores a session as Agno's own rewind does (later runs out of
``agno_runs`` into an archive table, ``session_state`` put back), with a journal table in the same database."""
