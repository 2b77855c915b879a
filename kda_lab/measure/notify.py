"""Optional run notifications: one JSON line POSTed to ``KDA_WEBHOOK_URL``.

``notify(event, summary)`` is called at the end of ``kda check`` / ``kda bench`` / export. When
``KDA_WEBHOOK_URL`` is unset or empty it does nothing. Otherwise it POSTs one line of JSON::

    {"event": "bench", "text": "kda bench: task=... geomean=1.23", "summary": {...}}

``text`` makes the payload readable as-is by Slack/Mattermost-style incoming webhooks; ``summary`` is the
caller's dict (values that JSON cannot encode are sent as strings). A notification is never allowed to fail
a run: any error (unreachable host, timeout, HTTP error status, bad URL) is reported as one warning line on
stderr and the call returns normally. Standard library only (urllib), 5 s timeout.
"""

from __future__ import annotations

import json
import os
import sys
import urllib.request
from typing import Any

ENV_VAR = "KDA_WEBHOOK_URL"
TIMEOUT_S = 5.0


def _one_line(event: str, summary: dict[str, Any]) -> str:
    parts = []
    for k, v in summary.items():
        if isinstance(v, float):
            v = f"{v:.4g}"
        parts.append(f"{k}={v}")
    return f"kda {event}: " + " ".join(parts) if parts else f"kda {event}"


def payload(event: str, summary: dict[str, Any]) -> bytes:
    """The exact bytes sent: one line of JSON (no newline inside), UTF-8."""
    body = {"event": event, "text": _one_line(event, summary), "summary": summary}
    return json.dumps(body, default=str, separators=(",", ":"), ensure_ascii=False).encode()


def notify(event: str, summary: dict[str, Any]) -> None:
    """POST a one-line JSON summary of ``event`` to ``$KDA_WEBHOOK_URL``; never raises."""
    url = os.environ.get(ENV_VAR, "").strip()
    if not url:
        return
    try:
        if not url.startswith(("http://", "https://")):
            raise ValueError(f"{ENV_VAR} must be an http(s) URL, got {url!r}")
        req = urllib.request.Request(url, data=payload(event, summary), method="POST",
                                     headers={"Content-Type": "application/json", "User-Agent": "kda-lab"})
        with urllib.request.urlopen(req, timeout=TIMEOUT_S) as resp:
            resp.read()
    except Exception as e:  # noqa: BLE001 - a notification must never fail the run
        reason = getattr(e, "reason", None) or e
        print(f"kda: warning: webhook notification for {event!r} failed ({reason}); the run itself is unaffected",
              file=sys.stderr)
