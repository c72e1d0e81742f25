"""OpenAI Agents SDK session stores: ``SQLiteSession`` and ``AdvancedSQLiteSession`` databases.

Reader name ``openai-agents`` (:class:`lastgood.readers.openai_agents.reader.OpenAIAgentsReader`):

- ``schema``: which tables make a store (sniffed by columns), branch ↔ namespace (``main`` = ``""``);
- ``items``: Responses-API items — kinds (triggers), tool errors, conversation messages;
- ``listing`` / ``archived``: the listing (one SQL pass, one walk), events, per-item findings;
- ``history``: a checkpoint's items (the SDK's own order; archived chains);
- ``rewind`` / ``recovery``: restore = the SDK's ``pop_item`` rewind with an archive, the journal.
"""
