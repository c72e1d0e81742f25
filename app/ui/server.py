"""Streamlit's server, started in the interpreter of ``lastgood ui`` (see lastgood.serve).

``streamlit run`` is a thin shell over :func:`streamlit.web.bootstrap.run`: it loads the config
options given as flags, then runs the server's event loop in the main thread, where it installs
its SIGTERM/SIGINT/SIGQUIT handlers (they stop the server; :func:`run` then returns). Calling it
here serves the dashboard without a second interpreter importing everything again.
"""

from __future__ import annotations

from pathlib import Path

ENTRY = Path(__file__).resolve().parent.parent / "streamlit_app.py"


def options(host: str, port: int) -> dict[str, object]:
    """The server options ``lastgood ui`` always sets (the flags ``streamlit run`` would take)."""
    return {
        "server.address": host, "server.port": port, "server.headless": True,
        "browser.gatherUsageStats": False, "client.toolbarMode": "viewer",
        "server.fileWatcherType": "none", "server.runOnSave": False,  # installed code: no reloads
    }


def skip_component_scan() -> bool:
    """Skip Streamlit's start-up scan of every installed distribution for v2 component manifests.

    The scan parses each distribution's metadata several times (0.2-0.8 s of CPU before the
    server answers, more in a big environment) to register custom components that Lastgood's
    pages never use; no config option turns it off. Replaced, in this process only, by a scan
    that finds nothing. Returns whether it was replaced (False if Streamlit moved the function:
    the scan then simply runs)."""
    try:
        from streamlit.components.v2 import manifest_scanner
    except ImportError:
        return False
    if not callable(getattr(manifest_scanner, "scan_component_manifests", None)):
        return False
    manifest_scanner.scan_component_manifests = _no_manifests
    return True


def _no_manifests(max_workers: int | None = None) -> list:
    return []


def run(host: str, port: int) -> None:
    """Serve the dashboard until a signal stops the server."""
    from streamlit import config
    from streamlit.web import bootstrap

    flags = options(host, port)
    skip_component_scan()
    config._main_script_path = str(ENTRY)  # as `streamlit run` does: config and secrets beside it
    bootstrap.load_config_options(flag_options=flags)
    bootstrap.run(str(ENTRY), False, [], flags)
