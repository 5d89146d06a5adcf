"""The pieces every operator page shares: the HTML document with its style sheet, escaping,
and how times, durations and progress are written."""

from __future__ import annotations

import html
import time

from ldpem.common.wire import RunSummary

__all__ = ["REFRESH_SECONDS", "clock", "duration", "escape", "page", "progress"]

#: Seconds between reloads of a page whose run is still open.
REFRESH_SECONDS = 5

_STYLE = """
body{font-family:system-ui,sans-serif;max-width:64em;margin:1.5em auto;padding:0 1em;color:#222}
table{border-collapse:collapse;margin:.5em 0}
td,th{padding:.25em .7em;text-align:left;border-bottom:1px solid #e4e4e4;vertical-align:top}
th{background:#f4f4f4}
.num{text-align:right;font-variant-numeric:tabular-nums}
.status-running{color:#0a5}.status-finished{color:#04a}.status-failed{color:#b00}
.status-cancelled{color:#777}
.late{background:#fde2c8}.missing{background:#f8c9c9}.waiting{color:#777}
.health{border-left:5px solid #0a5;padding:.3em 1em;background:#f3fbf6}
.health.degraded{border-color:#d60;background:#fff6ee}
.health.failed{border-color:#b00;background:#fdeeee}
.health.cancelled{border-color:#777;background:#f4f4f4}
.health-healthy{color:#0a5}.health-degraded{color:#d60}.health-failed{color:#b00}
.health-cancelled{color:#777}
.note{color:#555;font-size:.9em}
.bar{display:inline-block;width:8em;height:.8em;background:#eee;vertical-align:middle}
.bar span{display:block;height:100%;background:#0072B2}
svg.chart{max-width:100%;height:auto;display:block;margin:.5em 0}
"""


def page(title: str, body: str, *, refresh: bool) -> str:
    """A complete HTML document; ``refresh`` reloads it every REFRESH_SECONDS seconds."""
    meta = f'<meta http-equiv="refresh" content="{REFRESH_SECONDS}">' if refresh else ""
    return (
        f"<!doctype html><html lang='en'><head><meta charset='utf-8'>{meta}"
        "<meta name='viewport' content='width=device-width, initial-scale=1'>"
        f"<title>{html.escape(title)}</title><style>{_STYLE}</style></head>"
        f"<body><h1>{html.escape(title)}</h1>{body}</body></html>"
    )


def escape(value: object) -> str:
    return html.escape(str(value), quote=True)


def clock(timestamp: float | None) -> str:
    if timestamp is None:
        return "—"
    return time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(timestamp)) + "Z"


def duration(seconds: float) -> str:
    if seconds < 0:
        seconds = 0.0
    if seconds < 1:
        return f"{seconds * 1000:.0f} ms"
    if seconds < 120:
        return f"{seconds:.1f} s"
    if seconds < 7200:
        return f"{seconds / 60:.1f} min"
    if seconds < 2 * 86400:
        return f"{seconds / 3600:.1f} h"
    return f"{seconds / 86400:.1f} d"


def progress(run: RunSummary) -> str:
    share = 0.0 if run.rounds == 0 else min(1.0, run.round / run.rounds)
    return (
        f'<span class="bar" title="{run.round} of {run.rounds} rounds">'
        f'<span style="width:{share * 100:.0f}%"></span></span> {run.round}/{run.rounds}'
    )
