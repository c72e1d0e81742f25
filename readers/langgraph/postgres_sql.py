"""SQL of the LangGraph Postgres reader: read-only statements mirroring the tables of
``langgraph.checkpoint.postgres.base`` (see :mod:`lastgood.readers.langgraph.postgres`)."""

from __future__ import annotations

TABLES_SQL = """
SELECT to_regclass('checkpoints') IS NOT NULL, to_regclass('checkpoint_blobs') IS NOT NULL,
       to_regclass('checkpoint_writes') IS NOT NULL,
       EXISTS (SELECT 1 FROM pg_attribute WHERE attrelid = to_regclass('checkpoint_writes')
               AND attname = 'task_path' AND NOT attisdropped)
"""
_EVENT_WRITE = """(channel IN ('__error__', '__interrupt__', '__resume__', '__scheduled__')
    OR idx IN (-1, -2, -3, -4))"""
# What a refresh compares: checkpoint count and newest id, and the special writes
# (ordinary writes change nothing the listing shows).
TOKEN_SQL = f"""
SELECT (SELECT count(*) FROM checkpoints), (SELECT max(checkpoint_id COLLATE "C") FROM checkpoints),
       (SELECT count(*) FROM checkpoint_writes WHERE {_EVENT_WRITE})
"""
# Checkpoint ids are time-ordered uuid6: rows "after" a cutoff id were added since
# the scan that saw the cutoff as its newest id ('' = every row).
# (a cutoff of '' lists every row, an empty id included)
_AFTER = """(%(cutoff)s = '' OR c.checkpoint_id COLLATE "C" > %(cutoff)s)"""
ADDED_SQL = f"SELECT count(*) FROM checkpoints c WHERE {_AFTER}"
HEADS_SQL = """
SELECT thread_id, checkpoint_ns, max(checkpoint_id COLLATE "C") FROM checkpoints
GROUP BY thread_id, checkpoint_ns
"""
HEADS_AFTER_SQL = f"""
SELECT thread_id, checkpoint_ns, max(checkpoint_id COLLATE "C") FROM checkpoints
WHERE (thread_id, checkpoint_ns) IN (SELECT c.thread_id, c.checkpoint_ns FROM checkpoints c WHERE {_AFTER})
GROUP BY thread_id, checkpoint_ns
"""
MISSING_PARENTS_SQL = f"""
SELECT c.thread_id, c.checkpoint_ns, c.checkpoint_id, c.parent_checkpoint_id FROM checkpoints c
WHERE {_AFTER} AND c.parent_checkpoint_id IS NOT NULL AND c.parent_checkpoint_id <> ''
AND NOT EXISTS (SELECT 1 FROM checkpoints p WHERE p.thread_id = c.thread_id
    AND p.checkpoint_ns = c.checkpoint_ns AND p.checkpoint_id = c.parent_checkpoint_id)
"""
# The blobs a checkpoint introduced: its updated_channels (v4), else all it references,
# minus the channels whose value is inline in channel_values (primitives have no blob row).
# The checkpoint's parts are extracted once per row (OFFSET 0 keeps the subquery whole).
# (Every jsonb function is guarded by jsonb_typeof: one damaged row must not fail the scan.)
_VERSIONS = """CASE jsonb_typeof(c.checkpoint -> 'channel_versions')
    WHEN 'object' THEN c.checkpoint -> 'channel_versions' ELSE '{}' END"""
_PARTS = f"""(SELECT {_VERSIONS} AS versions, CASE jsonb_typeof(c.checkpoint -> 'channel_values')
        WHEN 'object' THEN c.checkpoint -> 'channel_values' ELSE '{{}}' END AS inline,
    c.checkpoint -> 'updated_channels' AS updated OFFSET 0) AS p"""
_INTRODUCED = """jsonb_array_elements_text(CASE jsonb_typeof(p.updated) WHEN 'array' THEN p.updated
    ELSE to_jsonb(ARRAY(SELECT jsonb_object_keys(p.versions))) END)"""
# One primary-key lookup per blob (LATERAL ... LIMIT 1, like LangGraph's prune
# SQL); pg_column_size reads the stored (TOAST) size without fetching the blob.
BLOB_SIZES = f"""coalesce((SELECT sum(s.size) FROM {_PARTS} CROSS JOIN LATERAL {_INTRODUCED} AS u(channel)
    CROSS JOIN LATERAL (SELECT pg_column_size(b.blob) AS size FROM checkpoint_blobs b
        WHERE b.thread_id = c.thread_id AND b.checkpoint_ns = c.checkpoint_ns
        AND b.channel = u.channel AND b.version = p.versions ->> u.channel
        LIMIT 1) AS s
    WHERE NOT p.inline ? u.channel), 0)"""
SCAN_SQL = """
SELECT c.thread_id, c.checkpoint_ns, c.checkpoint_id, NULLIF(c.parent_checkpoint_id, ''),
       convert_to(c.metadata::text, 'UTF8'), (pg_column_size(c.checkpoint) + {blobs})::int8
FROM checkpoints c WHERE """ + _AFTER
EVENTS_SQL = f"""
SELECT thread_id, checkpoint_ns, checkpoint_id, task_id, idx, channel, type, blob
FROM checkpoint_writes WHERE {_EVENT_WRITE}
"""
ROW_SQL = """
SELECT checkpoint, metadata, NULLIF(parent_checkpoint_id, '') FROM checkpoints
WHERE thread_id = %s AND checkpoint_ns = %s AND checkpoint_id = %s
"""
BLOBS_SQL = f"""
SELECT b.channel, b.version, b.type, b.blob FROM checkpoints c
CROSS JOIN LATERAL jsonb_each_text({_VERSIONS}) AS v
JOIN checkpoint_blobs b ON b.thread_id = c.thread_id AND b.checkpoint_ns = c.checkpoint_ns
    AND b.channel = v.key AND b.version = v.value
WHERE c.thread_id = %s AND c.checkpoint_ns = %s AND c.checkpoint_id = %s
"""
WRITES_SQL = """
SELECT task_id, channel, type, blob, {task_path}, idx FROM checkpoint_writes
WHERE thread_id = %s AND checkpoint_ns = %s AND checkpoint_id = %s
"""
# Batched forms for check_checkpoints: keys come in as three parallel text arrays;
# the blob/write payloads are fetched only when the first parameter (read_data) is true.
_KEYS = "unnest(%s::text[], %s::text[], %s::text[]) AS k(thread_id, checkpoint_ns, checkpoint_id)"
CHECK_ROWS_SQL = """
SELECT c.thread_id, c.checkpoint_ns, c.checkpoint_id, jsonb_typeof(c.checkpoint -> 'channel_values'),
       jsonb_typeof(c.checkpoint -> 'channel_versions'), c.checkpoint ->> 'id'
FROM $KEYS JOIN checkpoints c USING (thread_id, checkpoint_ns, checkpoint_id)
""".replace("$KEYS", _KEYS)
CHECK_BLOBS_SQL = """
SELECT c.thread_id, c.checkpoint_ns, c.checkpoint_id, b.channel, b.version, b.type,
       CASE WHEN %s THEN b.blob END
FROM $KEYS JOIN checkpoints c USING (thread_id, checkpoint_ns, checkpoint_id)
CROSS JOIN LATERAL jsonb_each_text($VERSIONS) AS v
JOIN checkpoint_blobs b ON b.thread_id = c.thread_id AND b.checkpoint_ns = c.checkpoint_ns
    AND b.channel = v.key AND b.version = v.value
""".replace("$KEYS", _KEYS).replace("$VERSIONS", _VERSIONS)
CHECK_WRITES_SQL = """
SELECT w.thread_id, w.checkpoint_ns, w.checkpoint_id, w.task_id, w.channel, w.type, w.idx,
       CASE WHEN %s OR w.channel = '__error__' THEN w.blob END
FROM $KEYS JOIN checkpoint_writes w USING (thread_id, checkpoint_ns, checkpoint_id)
""".replace("$KEYS", _KEYS)

# Structure depth, set-based: every key in one array parameter, one query per kind of check
# (rows gone or malformed; blobs with an unknown codec; writes with an unknown codec or
# an ``__error__``), whatever the number of checkpoints. Only problems come back.
STRUCTURE_ROWS_SQL = """
SELECT k.thread_id, k.checkpoint_ns, k.checkpoint_id, c.checkpoint_id IS NOT NULL,
       jsonb_typeof(c.checkpoint -> 'channel_values'), jsonb_typeof(c.checkpoint -> 'channel_versions'),
       c.checkpoint ->> 'id'
FROM $KEYS LEFT JOIN checkpoints c USING (thread_id, checkpoint_ns, checkpoint_id)
WHERE c.checkpoint_id IS NULL
   OR coalesce(jsonb_typeof(c.checkpoint -> 'channel_values'), 'object') <> 'object'
   OR coalesce(jsonb_typeof(c.checkpoint -> 'channel_versions'), 'object') <> 'object'
   OR coalesce(c.checkpoint ->> 'id', k.checkpoint_id) <> k.checkpoint_id
""".replace("$KEYS", _KEYS)
UNKNOWN_BLOB_CODECS_SQL = """
SELECT EXISTS (SELECT 1 FROM checkpoint_blobs WHERE type IS NOT NULL AND type NOT IN ($KNOWN))
"""
# blobs with an unknown codec, of the checkpoints $FROM names (the keys given, or every row)
_BLOBS_SQL = """
SELECT c.thread_id, c.checkpoint_ns, c.checkpoint_id, b.channel, b.version, b.type, NULL
FROM $FROM
CROSS JOIN LATERAL jsonb_each_text($VERSIONS) AS v
JOIN checkpoint_blobs b ON b.thread_id = c.thread_id AND b.checkpoint_ns = c.checkpoint_ns
    AND b.channel = v.key AND b.version = v.value
WHERE b.type IS NOT NULL AND b.type NOT IN ($KNOWN)
""".replace("$VERSIONS", _VERSIONS)
STRUCTURE_BLOBS_SQL = _BLOBS_SQL.replace(
    "$FROM", f"{_KEYS} JOIN checkpoints c USING (thread_id, checkpoint_ns, checkpoint_id)")
STRUCTURE_WRITES_SQL = """
SELECT w.thread_id, w.checkpoint_ns, w.checkpoint_id, w.task_id, w.channel, w.type, w.idx,
       CASE WHEN w.channel = '__error__' THEN w.blob END
FROM $KEYS JOIN checkpoint_writes w USING (thread_id, checkpoint_ns, checkpoint_id)
WHERE w.channel = '__error__' OR (w.type IS NOT NULL AND w.type NOT IN ($KNOWN))
""".replace("$KEYS", _KEYS)

# The same checks for every row a full listing saw, asked once in the listing's own
# snapshot: no key arrays, and the rows are there by construction.
STORE_ROWS_SQL = """
SELECT c.thread_id, c.checkpoint_ns, c.checkpoint_id, true,
       jsonb_typeof(c.checkpoint -> 'channel_values'), jsonb_typeof(c.checkpoint -> 'channel_versions'),
       c.checkpoint ->> 'id'
FROM checkpoints c
WHERE coalesce(jsonb_typeof(c.checkpoint -> 'channel_values'), 'object') <> 'object'
   OR coalesce(jsonb_typeof(c.checkpoint -> 'channel_versions'), 'object') <> 'object'
   OR coalesce(c.checkpoint ->> 'id', c.checkpoint_id) <> c.checkpoint_id
"""
STORE_BLOBS_SQL = _BLOBS_SQL.replace("$FROM", "checkpoints c")
STORE_WRITES_SQL = """
SELECT w.thread_id, w.checkpoint_ns, w.checkpoint_id, w.task_id, w.channel, w.type, w.idx,
       CASE WHEN w.channel = '__error__' THEN w.blob END
FROM checkpoint_writes w
WHERE (w.channel = '__error__' OR (w.type IS NOT NULL AND w.type NOT IN ($KNOWN)))
  AND EXISTS (SELECT 1 FROM checkpoints c WHERE c.thread_id = w.thread_id
              AND c.checkpoint_ns = w.checkpoint_ns AND c.checkpoint_id = w.checkpoint_id)
"""
