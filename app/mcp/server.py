"""The MCP server: the read tools, the ``plan_*`` dry runs, and ``apply_*`` only with ``--allow-write``.

Built on the official SDK's ``MCPServer``. Each tool is a function of ``lastgood.mcp.calls`` or
``lastgood.mcp.recovery`` whose first parameter is the call; its other parameters (and their
annotations) are the tool's JSON schema. A call runs in a worker thread (the core is synchronous),
reports progress to a client that asked for it, and answers with the CLI's JSON text; a list that
was paged adds a second text block ``{"page": {offset, limit, returned, total, next_offset}}``.
Errors are tool errors (``isError``) of one line: the LastgoodError's message, a bad argument's
name and what is wrong with it, never a traceback or the argument's value.
"""

from __future__ import annotations

import inspect
import threading
import typing
from collections.abc import Callable
from typing import Any

import anyio
import anyio.from_thread
import anyio.to_thread
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError, UnexpectedToolError
from mcp.types import CallToolResult, TextContent, ToolAnnotations
from pydantic import ValidationError

from lastgood.mcp import calls, recovery
from lastgood.mcp.session import Answer, CallFailed, Served, ServerConfig, Throttle, failure, json_text, one_line

INSTRUCTIONS = """Lastgood reads checkpoint stores (LangGraph SQLite/Postgres, native Lastgood stores, …) and
answers with the same JSON as the `lastgood` CLI (docs/cli.md). Start with list_stores, then runs (health
and last good checkpoint of each run) and list_checkpoints; show/diff/steps/track/diverge/bisect investigate;
verify and findings report damage. Secrets are redacted. Recovery is planned with plan_* (dry runs that
write nothing); apply_* exists only when the server was started with --allow-write and needs a reason."""
READ = ToolAnnotations(read_only_hint=True, idempotent_hint=True, open_world_hint=False)
WRITE = ToolAnnotations(read_only_hint=False, destructive_hint=True, idempotent_hint=False, open_world_hint=False)
OPERATOR_CHARS = 100


class LastgoodMCP(MCPServer):
    """``MCPServer`` whose tool errors are one line: unknown arguments and invalid values named, the
    LastgoodError's message as the CLI prints it, an unexpected failure as "a bug" (its traceback
    stays out of the answer)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.arguments: dict[str, set[str]] = {}

    async def call_tool(self, name: str, arguments: dict[str, Any], context: Any = None) -> Any:
        known = self.arguments.get(name)
        if known is not None:
            _refuse_unknown(name, set(arguments or {}) - known, known)
        try:
            return await super().call_tool(name, arguments, context)
        except UnexpectedToolError:
            raise ToolError("unexpected error (a bug, please report it)") from None
        except ToolError as exc:
            raise ToolError(_message(exc)) from None


def _refuse_unknown(tool: str, unknown: set[str], known: set[str]) -> None:
    import difflib

    for word in sorted(unknown):
        close = difflib.get_close_matches(word, sorted(known), n=1, cutoff=0.6)
        hint = f"; did you mean {close[0]!r}?" if close else f" (it takes: {', '.join(sorted(known)) or 'none'})"
        raise ToolError(f"{tool}: unknown argument {one_line(word)!r}{hint}")


def _message(exc: ToolError) -> str:
    cause = exc.__cause__
    if isinstance(cause, CallFailed):
        return str(cause)
    if isinstance(cause, ValidationError):  # field names and what is wrong, never the value given
        problems = [f"{'.'.join(str(p) for p in e['loc']) or 'arguments'}: {e['msg']}" for e in cause.errors()]
        return one_line("invalid arguments: " + "; ".join(problems))
    return one_line(str(exc))


# ---- tools ----------------------------------------------------------------------------------------


def build_server(config: ServerConfig) -> LastgoodMCP:
    """The server with every read tool and plan, and the apply tools when writes are allowed."""
    server = LastgoodMCP("lastgood", instructions=INSTRUCTIONS, version=_version(), log_level="WARNING")
    served = Served(config)
    for fn in (*calls.READ_TOOLS, *recovery.PLAN_TOOLS):
        add_tool(server, served, fn, READ)
    if config.allow_write:
        for fn in recovery.APPLY_TOOLS:
            add_tool(server, served, fn, WRITE)
    return server


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("lastgood")
    except PackageNotFoundError:
        return ""


def add_tool(server: LastgoodMCP, served: Served, fn: Callable[..., Answer], hints: ToolAnnotations) -> None:
    """Serve ``fn(call, **arguments)`` as the tool ``fn.__name__`` (its schema from its other parameters)."""
    types = typing.get_type_hints(fn, include_extras=True)
    params = [p.replace(annotation=types[p.name]) for p in list(inspect.signature(fn).parameters.values())[1:]]

    async def tool(ctx: Context, **arguments: Any) -> CallToolResult:
        return await run_call(served, fn, ctx, arguments)

    context = inspect.Parameter("ctx", inspect.Parameter.KEYWORD_ONLY, annotation=Context)
    tool.__signature__ = inspect.Signature([*params, context], return_annotation=CallToolResult)  # type: ignore[attr-defined]
    tool.__annotations__ = {**{p.name: p.annotation for p in params}, "ctx": Context,
                            "return": CallToolResult}
    tool.__name__ = tool.__qualname__ = fn.__name__
    server.add_tool(tool, name=fn.__name__, description=inspect.cleandoc(fn.__doc__ or ""), annotations=hints,
                    structured_output=False)
    server.arguments[fn.__name__] = {p.name for p in params}


async def run_call(served: Served, fn: Callable[..., Answer], ctx: Context, arguments: dict[str, Any]
                   ) -> CallToolResult:
    """``fn`` in a worker thread under the server's lock; cancelling the request stops a verify after
    its chunk in progress (the others finish, their answer unsent)."""
    cancel = threading.Event()
    progress = Throttle(lambda done, total, label: _progress(ctx, done, total, label))
    operator = client_operator(ctx)

    def work() -> CallToolResult:
        try:
            with served.call(progress, cancel, operator) as call:
                answer = fn(call, **arguments)
            return result_of(answer)
        except Exception as exc:  # noqa: BLE001 - every failure is a one-line tool error
            raise failure(exc) from None

    try:
        return await anyio.to_thread.run_sync(work, abandon_on_cancel=True)
    except anyio.get_cancelled_exc_class():
        cancel.set()
        raise


def result_of(answer: Answer) -> CallToolResult:
    blocks = [TextContent(type="text", text=json_text(answer.value))]
    if answer.page is not None:
        blocks.append(TextContent(type="text", text=json_text({"page": answer.page})))
    return CallToolResult(content=blocks)


def _progress(ctx: Context, done: float, total: float | None, label: str) -> None:
    """From the worker thread: a progress notification (a no-op when the client asked for none)."""
    try:
        anyio.from_thread.run(ctx.report_progress, done, total, label)
    except Exception:  # noqa: BLE001 - the request ended or the client left: progress is best effort
        pass


def client_operator(ctx: Context) -> str:
    """``mcp:<client name>`` from the client's initialize request (``mcp:unknown`` without one)."""
    try:
        params = ctx.request_context.session.client_params
        name = params.client_info.name if params is not None else ""
    except Exception:  # noqa: BLE001 - no request context: no client name
        name = ""
    name = one_line(name).strip()[:OPERATOR_CHARS]
    return f"mcp:{name or 'unknown'}"
