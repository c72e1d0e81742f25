"""Recovery: plan, then apply — restore, rollback, quarantine/release, undo (see ``plan``).

    from lastgood import recovery
    plan = recovery.plan_restore(catalog, store, "1ef…")       # a dry run: nothing is written
    result = recovery.apply_plan(catalog, store, plan, reason="bad tool output", operator="ana")
"""

from lastgood.recovery.apply import ActionResult, apply_plan, refresh_index
from lastgood.recovery.effects import side_effects
from lastgood.recovery.plan import (REFUSED_WITHOUT_FORCE, Plan, backend, can_write, journal_chain, plan_quarantine,
                                    plan_restore, plan_restore_last_good, plan_rollback, plan_undo, read_only_reason,
                                    undone_actions)
from lastgood.recovery.report import journal_report

__all__ = ["REFUSED_WITHOUT_FORCE", "ActionResult", "Plan", "apply_plan", "backend", "can_write", "journal_chain",
           "journal_report", "plan_quarantine", "plan_restore", "plan_restore_last_good", "plan_rollback",
           "plan_undo", "read_only_reason", "refresh_index", "side_effects", "undone_actions"]
