"""Self-contained HTML reports for incident tickets (``lastgood report``; the pages' "Download
report" buttons call :func:`build_report`)."""

from lastgood.report.build import build_report

__all__ = ["build_report"]
