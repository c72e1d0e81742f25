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
