"""Retention: what a store is costing, and keeping it in check (restic-style prune, archived and undoable).

    from lastgood import retention
    report = retention.storage_report(catalog, store)                   # the Storage page's numbers
    plan = retention.plan_prune(catalog, store, retention.Policy(last=10))   # a dry run: nothing written
    result = retention.apply_prune(catalog, store, plan, reason="keep the last 10", operator="ana")
    retention.apply_undo_prune(catalog, store, retention.plan_undo_prune(catalog, store, result.action_id),
                               reason="need them back", operator="ana")

Modules: ``policy`` (restic's rules and durations), ``plan`` (keep or forget each checkpoint, and
why), ``apply`` (archive, delete, journal; undo), ``pins`` (pins and the saved policy, journal
entries), ``storage`` (bytes per store/agent/run/table/channel, growth, projection, stale runs). A
format takes part through the reader's ``retention`` capability (lastgood.readers.base.Prunable).
"""

from lastgood.retention.apply import (PruneResult, UndoPrunePlan, apply_prune, apply_undo_prune, is_prune,
                                      plan_undo_prune)
from lastgood.retention.pins import pin, pins, save_policy, saved_policy
from lastgood.retention.plan import PrunePlan, can_prune, plan_prune, retention_backend
from lastgood.retention.policy import Duration, Policy, parse_count, policy_from_options
from lastgood.retention.storage import StorageReport, storage_report

__all__ = ["Duration", "Policy", "PrunePlan", "PruneResult", "StorageReport", "UndoPrunePlan", "apply_prune",
           "apply_undo_prune", "can_prune", "is_prune", "parse_count", "pin", "pins", "plan_prune",
           "plan_undo_prune", "policy_from_options", "retention_backend", "save_policy", "saved_policy",
           "storage_report"]
