"""pydantic-graph ``FileStatePersistence``: a folder of run files, one JSON array of snapshots each.

How the store maps to Lastgood's model (``sample_data/generators/pydantic_graph/README.md``
documents the format as pydantic-graph 1.107 writes it):

- store = a local folder; run = one ``*.json`` file whose content is a snapshot array (the file
  name without ``.json`` is the run id: the file holds none); namespace ``""``;
- checkpoint = one snapshot, id = its ``id`` (``<node_id>:<uuid hex>``, ``end:<uuid hex>``), step =
  its place in the file (file order is execution order), parent = the snapshot before it;
- state = the graph state *before* that node ran, its fields at the top, plus the node to run under
  ``"__node__"`` (an end snapshot: the run's result under ``"__end__"``); trigger = the node class
  (``node_id``), ``"end"``, or ``"restore"`` for a snapshot Lastgood appended;
- created_at = when the snapshot was made: the previous node's ``start_ts + duration`` (the first
  snapshot: its ``start_ts``; an end snapshot: its ``ts``; one Lastgood appended: its journal time);
- head = what ``iter_from_persistence`` resumes: the first ``created`` snapshot (``load_next``),
  else the last snapshot.

Events: a snapshot with status ``error`` is an ``error`` (pydantic-graph keeps no exception); a run
whose resume point is a ``created`` snapshot, or whose last is ``pending``, is an ``interrupt``; one
that stopped while a node ``running`` or after a ``success`` with nothing next ``ended_early``.

Write actions (:mod:`.recovery`): the run file rewritten atomically so ``iter_from_persistence``
resumes at the target, the previous file archived under ``.lastgood/archive/``, the journal as
files under ``.lastgood/journal/`` (the native store's layout and atomicity).
"""
