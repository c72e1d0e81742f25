"""The ids of integrity checks: one enumeration, used wherever a check is named.

At the bottom of the package (imports nothing from Lastgood), so readers,
the core and the pages all name checks the same way. Values are the stable
strings in findings' ``check`` field (JSON output, the index, SQL filters).
"""

from __future__ import annotations

from enum import StrEnum


class Check(StrEnum):
    """What a finding is about. Add members freely; never rename a value."""

    # catalog and listing
    CATALOG_UNREADABLE = "catalog-unreadable"
    CATALOG_LINE = "catalog-line"
    METADATA_INVALID = "metadata-invalid"
    ROW_INVALID = "row-invalid"
    FORMAT_VERSION = "format-version"
    DUPLICATE_ID = "duplicate-id"
    # structure
    INCOMPLETE = "incomplete"
    BLOB_MISSING = "blob-missing"
    SIZE_MISMATCH = "size-mismatch"
    UNSAFE_PATH = "unsafe-path"
    NOT_A_FILE = "not-a-file"
    UNKNOWN_CODEC = "unknown-codec"
    MISSING = "missing"
    WRITES_MISSING = "writes-missing"
    # lineage
    PARENT_MISSING = "parent-missing"
    PARENT_CYCLE = "parent-cycle"
    CHAIN_BROKEN = "chain-broken"
    # data
    SHA256_MISMATCH = "sha256-mismatch"
    UNDECODABLE = "undecodable"
    TOO_DEEP = "too-deep"
    TOO_LARGE = "too-large"
    ID_MISMATCH = "id-mismatch"
    PICKLE_PAYLOAD = "pickle-payload"
    ENCRYPTED = "encrypted"
    SUSPICIOUS_TYPE = "suspicious-type"
    PENDING_ERROR = "pending-error"
    # content (warnings)
    SCHEMA_DRIFT = "schema-drift"
    SIZE_SPIKE = "size-spike"
    NON_FINITE = "non-finite"
    # operator actions
    QUARANTINED = "quarantined"
    # training checkpoints (torch.save files, Lightning, torch DCP, Orbax)
    CRC_MISMATCH = "crc-mismatch"  # a zip entry's bytes do not match its CRC-32
    ZERO_TENSOR = "zero-tensor"  # a weight matrix holds only zeros
    # training checkpoints (Hugging Face Trainer folders, safetensors folders, DeepSpeed)
    SAFETENSORS_HEADER = "safetensors-header"  # the reference implementation rejects it (its code in the message)
    SHARD_MISSING = "shard-missing"  # a shard a weights index names is not there
    INDEX_MISMATCH = "index-mismatch"  # a weights index, its shard files and their headers disagree
    UNSAFE_PICKLE = "unsafe-pickle"  # a pickle names a global outside the allowlist (never loaded)
    TORCH_FILE = "torch-file"  # a torch.save file is damaged (no zip central directory, a storage missing…)
    LOSS_SPIKE = "loss-spike"  # a logged loss far above the ones before it
    NORM_JUMP = "norm-jump"  # a tensor's norm changed by a large factor since the previous checkpoint
    POINTER_DANGLING = "pointer-dangling"  # a resume pointer (DeepSpeed `latest`) names what is not there
    # OpenAI Agents SDK sessions (SQLiteSession, AdvancedSQLiteSession)
    SESSION_MISSING = "session-missing"  # items of a session that has no agent_sessions row
    SEQUENCE_DUPLICATE = "sequence-duplicate"  # two items of one branch share a sequence_number
    # Google ADK DatabaseSessionService, Agno SqliteDb/PostgresDb (SESSION_MISSING above too)
    OUT_OF_ORDER = "out-of-order"  # an event's timestamp puts it before events written earlier
    STATE_REPLAY = "state-replay"  # a state_delta that is not an object: the state does not replay past it
