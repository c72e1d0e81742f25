"""Orbax CheckpointManager folders: :mod:`.structure` (a step folder's JSON files and structure
checks; OCDBT array values are not decoded without tensorstore), :mod:`.reader` (the ``orbax``
reader) and :mod:`.recovery` (later step folders moved aside so ``latest_step()`` is the target)."""
