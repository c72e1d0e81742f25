"""A LangGraph checkpointer on Lastgood's native store: agents checkpoint straight into any fsspec URL.

    from lastgood.langgraph import LastgoodSaver

    saver = LastgoodSaver("s3://bucket/agents")         # any fsspec URL: a folder, memory://, gs://…
    graph = builder.compile(checkpointer=saver)

The public name of ``lastgood.readers.native.langgraph_saver`` (the native format's writer for LangGraph,
beside ``NativeWriter``); use and semantics: docs/langgraph-saver.md.
"""

from lastgood.readers.native.langgraph_saver import AsyncLastgoodSaver, LastgoodSaver

__all__ = ["AsyncLastgoodSaver", "LastgoodSaver"]
