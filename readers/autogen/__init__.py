"""AutoGen AgentChat state files: folders of ``team.save_state()`` / ``agent.save_state()`` JSON.

Reader name ``autogen`` (:class:`lastgood.readers.autogen.reader.AutoGenReader`):

- ``layout``: which JSON files are states (by shape, not by name) and how they form series (runs);
- ``states``: one saved state — its conversation, lineage keys, events, half turns, messages;
- ``store``: the folder, each file read bounded and parsed once, the journal of restores;
- ``recovery``: restore = the target written as the series' newest file (what an app that loads
  the latest save resumes from), under an intent lock, journaled in ``.lastgood/journal``.
"""
