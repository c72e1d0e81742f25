"""The ticket-triage graph used by ``generate.py`` and ``readback.py``.

pydantic-graph's ``FileStatePersistence`` can only decode a run file with the
graph's own node classes and state type (``set_graph_types(graph)``), so both
scripts import them from here.

State: the ``TicketState`` dataclass. Nodes (dataclasses, node fields are
serialized into each snapshot's ``node``):

    Classify -> LookupAccount(account_id) -> DraftReply(feedback) -> Review
    Review -> DraftReply(feedback=...)   (loop: the review asks for a rewrite)
    Review -> End[str]                   (the reply that is sent)

``LookupAccount`` raises ``CrmUnavailable`` for accounts listed in
``CRM_DOWN``; a node that raises leaves its snapshot with ``status: "error"``.

``SIM`` is a simulated clock: nodes "work" by advancing it, and ``generate.py``
points pydantic-graph's clock reads at it so files are deterministic.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from typing import Optional

from pydantic_graph import BaseNode, End, Graph, GraphRunContext


class SimClock:
    """Wall clock (``now``) and monotonic counter (``perf``) that only move
    when told to (``advance``), plus a small tick per read."""

    def __init__(self, start: datetime) -> None:
        self.wall = start
        self.mono = 1000.0

    def advance(self, seconds: float) -> None:
        self.wall += timedelta(seconds=seconds)
        self.mono += seconds

    def now(self) -> datetime:
        self.advance(0.003217)
        return self.wall

    def perf(self) -> float:
        self.advance(0.000411)
        return self.mono


SIM = SimClock(datetime(2026, 11, 3, 16, 0, 0, tzinfo=timezone.utc))
CRM_DOWN: set[str] = set()


class CrmUnavailable(RuntimeError):
    pass


@dataclass
class TicketState:
    ticket_id: str
    customer: str
    messages: list[str]
    crm_api_key: str
    category: Optional[str] = None
    priority: int = 0
    account: Optional[dict] = None
    drafts: list[str] = field(default_factory=list)
    review_notes: list[str] = field(default_factory=list)


@dataclass
class Classify(BaseNode[TicketState, None, str]):
    """Classify the ticket from its messages."""

    async def run(self, ctx: GraphRunContext[TicketState]) -> LookupAccount:
        SIM.advance(1.2)
        text = " ".join(ctx.state.messages).lower()
        ctx.state.category = "billing" if ("refund" in text or "invoice" in text) else "technical"
        ctx.state.priority = 2 if "urgent" in text else 1
        return LookupAccount(account_id=f"acct-{ctx.state.customer.split('@')[0]}")


@dataclass
class LookupAccount(BaseNode[TicketState, None, str]):
    """Fetch the customer's account from the CRM (uses ``crm_api_key``)."""

    account_id: str

    async def run(self, ctx: GraphRunContext[TicketState]) -> DraftReply:
        SIM.advance(3.4)
        if self.account_id in CRM_DOWN:
            raise CrmUnavailable(f"CRM returned 503 for {self.account_id}")
        ctx.state.account = {"id": self.account_id, "plan": "pro", "open_invoices": 1}
        return DraftReply(feedback=None)


@dataclass
class DraftReply(BaseNode[TicketState, None, str]):
    """Draft a reply (a stand-in for an LLM call)."""

    feedback: Optional[str] = None

    async def run(self, ctx: GraphRunContext[TicketState]) -> Review:
        SIM.advance(6.5)
        n = len(ctx.state.drafts) + 1
        tone = " (shorter)" if self.feedback else ""
        ctx.state.drafts.append(
            f"v{n}{tone}: Hi {ctx.state.customer.split('@')[0]}, about your {ctx.state.category} "
            f"question on {ctx.state.account['id'] if ctx.state.account else '?'}: we're on it."
        )
        return Review()


@dataclass
class Review(BaseNode[TicketState, None, str]):
    """Check the draft; ask for one rewrite of long drafts of priority-2 tickets."""

    async def run(self, ctx: GraphRunContext[TicketState]) -> DraftReply | End[str]:
        SIM.advance(2.1)
        if ctx.state.priority >= 2 and len(ctx.state.drafts) < 2:
            ctx.state.review_notes.append("too long for an urgent ticket")
            return DraftReply(feedback="make it shorter")
        ctx.state.review_notes.append("approved")
        return End(ctx.state.drafts[-1])


triage_graph = Graph(nodes=(Classify, LookupAccount, DraftReply, Review), name="triage_graph")
