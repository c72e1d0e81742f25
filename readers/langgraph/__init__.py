"""LangGraph's checkpoint savers, read as they are: ``SqliteSaver`` (``sqlite.py``) and ``PostgresSaver``
(``postgres.py``) share ``base.py`` (everything but the connection and the SQL), the safe decoder
(``serde.py``: msgpack/JSON without importing anything the data names), DeltaChannel rebuilds
(``delta.py``) and the recovery backends (``recovery.py``: a new checkpoint copied from the target,
a journal table in the same database)."""
