"""``lastgood mcp``: the CLI's read verbs (and recovery, as dry-run plans) as MCP tools.

    lastgood mcp sample_data/agents ./checkpoints.sqlite            # stdio (an assistant starts it)
    lastgood mcp ./checkpoints.sqlite --http --port 8765            # streamable HTTP on 127.0.0.1
    lastgood mcp ./checkpoints.sqlite --allow-write                 # + apply_* tools (reason required)

Modules: ``cli`` (the command: arguments, the stores served, the transport), ``server`` (the MCP
server and its tools' signatures), ``calls`` (one function per read tool, over the core calls the
CLI's handlers make), ``recovery`` (``plan_*`` dry runs and the gated ``apply_*``), ``session``
(the stores served, one index connection per call, answers and errors). Built on the official
``mcp`` SDK (``pip install 'lastgood[mcp]'``); docs/mcp.md has the tools and their shapes.
"""
