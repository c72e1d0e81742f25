"""Write a CrewAI Flows ``SQLiteFlowPersistence`` database with real Flow runs.

    .venv-fixtures/crewai/bin/python sample_data/generators/crewai/generate.py \
        --out sample_data/crewai_flows.db

Every row is written by CrewAI itself: ``OrderFlow`` is a ``crewai.flow.Flow``
with a structured (pydantic) state, decorated at class level with
``@persist(SQLiteFlowPersistence(<out>))`` -- the default persistence class,
pointed at our file instead of CrewAI's per-user data directory. After every
``@start``/``@listen``/``@router`` method completes, CrewAI's engine calls
``SQLiteFlowPersistence.save_state`` which INSERTs one ``flow_states`` row
(the whole state as JSON). No LLM is involved: the methods are plain Python.

Runs (flow uuids come from a seeded generator used as the state's ``id``
default, so they are the same on every run):

1. ``completed``: receive_order -> validate_order -> charge_payment ->
   route_order (router: "standard") -> ship_order.  5 rows.
2. ``failed``: charge_payment raises ``PaymentDeclined``; kickoff re-raises.
   2 rows (receive_order, validate_order): the run "ended early".
3. ``resumed``: charge_payment raises a transient ``GatewayTimeout`` (2 rows);
   later a fresh flow instance is started with ``kickoff(inputs={"id": <uuid>})``:
   CrewAI loads the latest row with ``load_state`` and re-runs the flow from
   its ``@start`` method with that state (the methods skip work already
   recorded in ``state.steps_done``), so the run continues to ship_order.
   2 + 5 rows.
4. ``paused``: a large order is routed to ``manager_review``, a
   ``@human_feedback`` method whose provider raises ``HumanFeedbackPending``;
   CrewAI writes one more ``flow_states`` row and a ``pending_feedback`` row
   and ``kickoff`` returns the pending object. 5 rows (the last one written by
   ``save_pending_feedback`` for manager_review) + 1 pending_feedback row.

The state carries a secret-shaped ``payment.gateway_api_key`` (``sk-proj-...``).

Timestamps: CrewAI stamps rows with ``datetime.now(timezone.utc).isoformat()``
and offers no clock hook, so this script replaces the ``datetime`` name inside
``crewai.flow.persistence.sqlite`` (and nothing else) with a subclass whose
``now()`` reads a simulated clock starting 2026-11-03 13:00:00 UTC. The row
format is unchanged (``2026-11-03T13:00:01.500000+00:00``). Pass
``--real-clock`` to skip that and keep wall-clock timestamps.

CrewAI opens the database in ``journal_mode=WAL``; this script builds the file
beside ``--out``, switches it to ``journal_mode=DELETE`` when the runs are
done, and renames it into place, so no ``-wal``/``-shm`` is left.
"""

from __future__ import annotations

import os
import tempfile

# CrewAI writes side files under ~/.local/share (a credentials key, a memory
# folder named after the cwd): give it a throwaway HOME/XDG_DATA_HOME so the
# generator leaves nothing outside --out. Set before crewai is imported.
_SANDBOX_HOME = tempfile.mkdtemp(prefix="crewai-fixture-home-")
os.environ["HOME"] = _SANDBOX_HOME
os.environ["XDG_DATA_HOME"] = os.path.join(_SANDBOX_HOME, ".local", "share")
# No telemetry / tracing.
os.environ.setdefault("OTEL_SDK_DISABLED", "true")
os.environ.setdefault("CREWAI_DISABLE_TELEMETRY", "true")
os.environ.setdefault("CREWAI_DISABLE_TRACKING", "true")
os.environ.setdefault("CREWAI_TRACING_ENABLED", "false")

import argparse
import contextlib
import json
import logging
import random
import shutil
import sqlite3
import sys
import uuid
import warnings
from datetime import datetime, timedelta, timezone
from typing import Any, Optional

from pydantic import BaseModel, Field

import crewai
from crewai.flow.async_feedback import HumanFeedbackPending, PendingFeedbackContext
from crewai.flow.flow import Flow, FlowState, listen, or_, router, start
from crewai.flow.human_feedback import human_feedback
from crewai.flow.persistence import SQLiteFlowPersistence, persist
import crewai.flow.persistence.sqlite as crewai_sqlite

SECRET_API_KEY = "sk-proj-Qm4Tz8cVw1Lr6Ny0Bh3Kd7Xs9Fa2Pj5U"
START = datetime(2026, 11, 3, 13, 0, 0, tzinfo=timezone.utc)


# --------------------------------------------------------------------------
# Simulated clock for the row timestamps, seeded flow ids
# --------------------------------------------------------------------------
class _Clock:
    now = START

    def tick(self, seconds: float) -> datetime:
        self.now = self.now + timedelta(seconds=seconds)
        return self.now


CLOCK = _Clock()


class _SimDatetime(datetime):
    """``datetime`` whose ``now()`` reads the simulated clock (+1.5 s per read)."""

    @classmethod
    def now(cls, tz=None):  # noqa: D401 - same signature as datetime.now
        t = CLOCK.tick(1.5 + 0.000137)  # odd microseconds, like a real clock
        return t if tz is not None else t.replace(tzinfo=None)


_IDS = random.Random(2026110302)


def seeded_uuid() -> str:
    return str(uuid.UUID(int=_IDS.getrandbits(128), version=4))


# --------------------------------------------------------------------------
# Structured state
# --------------------------------------------------------------------------
class LineItem(BaseModel):
    sku: str
    qty: int
    unit_price: float


class PaymentInfo(BaseModel):
    provider: str = "stripe"
    gateway_api_key: str = ""
    charge_id: Optional[str] = None
    attempts: int = 0


class OrderState(FlowState):
    # FlowState declares ``id: str`` (uuid4 default); override the default only.
    id: str = Field(default_factory=seeded_uuid)
    order_id: str = ""
    customer: str = ""
    items: list[LineItem] = Field(default_factory=list)
    payment: PaymentInfo = Field(default_factory=PaymentInfo)
    total: float = 0.0
    stage: str = "new"
    shipping: Optional[str] = None
    tracking_number: Optional[str] = None
    steps_done: list[str] = Field(default_factory=list)
    log: list[str] = Field(default_factory=list)
    # script knobs, part of the state like any input
    fail_charge: Optional[str] = None  # "declined": the card is always declined


# The payment gateway is "down" for run 3's first attempt, up for its resume.
GATEWAY = {"down": False}


class PaymentDeclined(RuntimeError):
    pass


class GatewayTimeout(RuntimeError):
    pass


class TicketQueueProvider:
    """``@human_feedback`` provider that files a review ticket and pauses the
    flow (raises ``HumanFeedbackPending``): the async-feedback pattern."""

    def request_feedback(self, context: PendingFeedbackContext, flow: Flow) -> str:
        raise HumanFeedbackPending(
            context=context,
            callback_info={"queue": "manager-approvals", "ticket": "APPROVAL-7731"},
        )


def make_flow_class(persistence: SQLiteFlowPersistence):
    """Build the flow class bound to ``persistence`` (``@persist`` stamps its
    backend at decoration time, so the class is made after --out is known)."""

    @persist(persistence)
    class OrderFlow(Flow[OrderState]):
        """Order fulfilment: five persisted steps, a router, one HITL step."""

        def _done(self, step: str) -> bool:
            return step in self.state.steps_done

        def _mark(self, step: str, note: str) -> None:
            self.state.steps_done.append(step)
            self.state.log.append(f"{step}: {note}")

        @start()
        def receive_order(self):
            if self._done("receive_order"):  # resumed run: already done
                self.state.log.append("receive_order: skipped (resumed)")
                return self.state.order_id
            self.state.stage = "received"
            self._mark("receive_order", f"order {self.state.order_id} from {self.state.customer}")
            return self.state.order_id

        @listen(receive_order)
        def validate_order(self, order_id):
            if self._done("validate_order"):
                self.state.log.append("validate_order: skipped (resumed)")
                return self.state.total
            if not self.state.items:
                raise ValueError(f"order {order_id} has no items")
            self.state.total = round(sum(i.qty * i.unit_price for i in self.state.items), 2)
            self.state.stage = "validated"
            self._mark("validate_order", f"{len(self.state.items)} items, total {self.state.total:.2f}")
            return self.state.total

        @listen(validate_order)
        def charge_payment(self, total):
            if self._done("charge_payment"):
                return self.state.payment.charge_id
            self.state.payment.attempts += 1
            if self.state.fail_charge == "declined":
                self.state.stage = "payment_failed"
                raise PaymentDeclined(f"card declined for order {self.state.order_id} ({total:.2f})")
            if GATEWAY["down"]:
                self.state.stage = "payment_retry"
                raise GatewayTimeout("payment gateway timed out after 30s")
            self.state.payment.charge_id = f"ch_{self.state.order_id.lower()}_{self.state.payment.attempts}"
            self.state.stage = "charged"
            self._mark("charge_payment", f"charged {total:.2f} as {self.state.payment.charge_id}")
            return self.state.payment.charge_id

        @router(charge_payment)
        def route_order(self):
            if self.state.total >= 1000:
                return "needs_review"
            return "standard"

        @listen("needs_review")
        @human_feedback(
            message="Large order: approve shipping?",
            provider=TicketQueueProvider(),
            metadata={"team": "fulfilment"},
        )
        def manager_review(self):
            self.state.stage = "awaiting_review"
            return {"order_id": self.state.order_id, "total": self.state.total}

        @listen(or_("standard", manager_review))
        def ship_order(self):
            self.state.shipping = "standard"
            self.state.tracking_number = f"1Z{self.state.order_id[-4:]}0000{len(self.state.steps_done)}"
            self.state.stage = "shipped"
            self._mark("ship_order", f"tracking {self.state.tracking_number}")
            return self.state.tracking_number

    return OrderFlow


def _inputs(order_id: str, customer: str, items: list[tuple[str, int, float]],
            fail_charge: Optional[str] = None) -> dict[str, Any]:
    return {
        "order_id": order_id,
        "customer": customer,
        "items": [{"sku": s, "qty": q, "unit_price": p} for s, q, p in items],
        "payment": {"provider": "stripe", "gateway_api_key": SECRET_API_KEY},
        "fail_charge": fail_charge,
    }


def build(db_path: str) -> dict[str, Any]:
    persistence = SQLiteFlowPersistence(db_path)
    OrderFlow = make_flow_class(persistence)
    runs: list[dict[str, Any]] = []

    def kickoff(flow, inputs, expect: Optional[type] = None):
        try:
            result = flow.kickoff(inputs=inputs)
        except Exception as exc:  # noqa: BLE001
            if expect is None or not isinstance(exc, expect):
                raise
            print(f"  (expected) {type(exc).__name__}: {exc}", file=sys.stderr)
            return exc
        if expect is not None:
            raise AssertionError(f"expected {expect.__name__}")
        return result

    # 1. completed
    CLOCK.tick(60)
    f = OrderFlow()
    kickoff(f, _inputs("ORD-1001", "alice@example.com", [("MUG-01", 2, 12.5), ("TEE-L", 1, 24.0)]))
    runs.append({"kind": "completed", "flow_uuid": f.state.id, "final_stage": f.state.stage})

    # 2. failed in the middle (charge_payment raises)
    CLOCK.tick(900)
    f = OrderFlow()
    kickoff(f, _inputs("ORD-1002", "bob@example.com", [("LAMP-3", 1, 89.0)], fail_charge="declined"),
            expect=PaymentDeclined)
    runs.append({"kind": "failed", "flow_uuid": f.state.id, "failed_method": "charge_payment"})

    # 3. fails transiently, then resumed from persistence by id
    CLOCK.tick(900)
    f = OrderFlow()
    resumed_id = f.state.id
    GATEWAY["down"] = True
    kickoff(f, _inputs("ORD-1003", "carol@example.com", [("DESK-9", 1, 310.0), ("CHAIR-2", 1, 145.0)]),
            expect=GatewayTimeout)
    GATEWAY["down"] = False
    CLOCK.tick(1800)  # operator retries half an hour later, in a new process
    f2 = OrderFlow()
    kickoff(f2, {"id": resumed_id})
    assert f2.state.id == resumed_id and f2.state.stage == "shipped", f2.state
    runs.append({"kind": "failed then resumed with kickoff(inputs={'id': ...})",
                 "flow_uuid": resumed_id, "final_stage": f2.state.stage})

    # 4. paused for async human feedback -> pending_feedback row
    CLOCK.tick(900)
    f = OrderFlow()
    res = kickoff(f, _inputs("ORD-1004", "dave@example.com", [("SOFA-XL", 1, 1499.0)]))
    assert isinstance(res, HumanFeedbackPending), res
    runs.append({"kind": "paused: HumanFeedbackPending (pending_feedback row)",
                 "flow_uuid": f.state.id, "paused_method": res.context.method_name})
    return {"crewai_version": crewai.__version__, "runs": runs}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", required=True, help="where to write the SQLite store")
    ap.add_argument("--real-clock", action="store_true", help="keep CrewAI's wall-clock timestamps")
    args = ap.parse_args()
    logging.basicConfig(level=logging.CRITICAL)
    warnings.simplefilter("ignore")
    if not args.real_clock:
        crewai_sqlite.datetime = _SimDatetime  # only the row timestamps
    out = os.path.abspath(args.out)
    tmp = out + ".tmp"
    for p in (tmp, tmp + "-wal", tmp + "-shm", tmp + "-journal"):
        if os.path.exists(p):
            os.remove(p)
    # CrewAI's console formatter prints flow panels on stdout: keep stdout
    # for the JSON summary.
    with contextlib.redirect_stdout(sys.stderr):
        summary = build(tmp)
    con = sqlite3.connect(tmp)
    mode = con.execute("PRAGMA journal_mode=DELETE").fetchone()[0]
    con.execute("VACUUM")
    con.close()
    assert mode == "delete", mode
    for p in (tmp + "-wal", tmp + "-shm", tmp + "-journal"):
        assert not os.path.exists(p), p
    os.replace(tmp, out)
    shutil.rmtree(_SANDBOX_HOME, ignore_errors=True)
    print(json.dumps(summary, indent=2))


if __name__ == "__main__":
    main()
