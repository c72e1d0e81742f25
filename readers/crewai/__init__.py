"""CrewAI Flows persisted with ``@persist`` (``SQLiteFlowPersistence``): the ``flow_states`` table.

How the store maps to Lastgood's model (``sample_data/generators/crewai/README.md`` documents
the schema as CrewAI 1.15 writes it):

- run = one ``flow_uuid`` (the flow state's ``id``; a resumed run keeps it, so one run can span
  several kickoffs); namespace ``""``;
- checkpoint = one ``flow_states`` row, id = the row's ``id`` (CrewAI's only ordering), step = its
  0-based place in the run, parent = the run's row before it, created_at = ``timestamp``,
  trigger ``"method"`` (``"restore"`` for the rows Lastgood appends), metadata ``{"method": …}``;
- state = the row's ``state_json`` parsed (the whole state after the method, not a delta);
- head = the run's latest row: what ``SQLiteFlowPersistence.load_state`` (and so
  ``kickoff(inputs={"id": uuid})``) restores.

Events (:mod:`.shape`): a ``pending_feedback`` row is an ``interrupt`` with its question; a run
that stopped before a final method is ``ended_early``; a kickoff that re-ran the flow from its
start (or resumed after a Lastgood restore) is a ``restart``; a Lastgood restore is a ``rewind``.
The database does not say which method ends a flow; the rule used and its limits are in
:mod:`lastgood.readers.crewai.shape`.

Write actions (:mod:`.recovery`): restore appends a row holding the target's ``state_json``
(CrewAI resumes from the latest row), the journal is the table ``lastgood_journal`` in the same
database, both in one transaction.
"""
