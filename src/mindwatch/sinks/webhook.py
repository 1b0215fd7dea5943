"""A webhook URL: checked at construction, shown without its secret, POSTed to with the
standard library (``urllib.request``: no new dependency).

Chat services put the credential in the URL (Slack's path, Feishu's hook id, DingTalk's
``access_token`` query), so anything written about a webhook (the ``run`` record, messages)
shows only its scheme and host.
"""
from __future__ import annotations

import json
import urllib.request
from typing import Any
from urllib.parse import urlsplit

SCHEMES = ("http", "https")
TIMEOUT_S = 5.0          # per POST: connect and each read


def check_webhook(name: str, url: Any) -> None:
    """``url`` must be None or an ``http(s)://`` URL with a host."""
    if url is None:
        return
    if not isinstance(url, str):
        raise TypeError(f"{name} must be an http:// or https:// URL (a str) or None; got "
                        f"{type(url).__name__}")
    try:
        parts = urlsplit(url)
        host = parts.hostname
        parts.port                      # noqa: B018 (a bad port raises here)
    except ValueError as exc:
        raise ValueError(f"{name} is not a valid URL ({exc}); got {redacted_url(url)!r}") \
            from None
    if parts.scheme.lower() not in SCHEMES or not host or any(c.isspace() for c in url):
        raise ValueError(f"{name} must be an http:// or https:// URL with a host; got "
                         f"{redacted_url(url)!r}")


def redacted_url(url: str | None) -> str | None:
    """``https://hooks.slack.com/...``: scheme and host only; the URL itself when it has no
    path, query or credentials to hide."""
    if url is None:
        return None
    try:
        parts = urlsplit(url)
        netloc = parts.hostname or ""
        if parts.port is not None:
            netloc += f":{parts.port}"
    except ValueError:
        return "(not a URL)"
    if not parts.scheme or not netloc:
        return "(not a URL)"
    hidden = parts.path.strip("/") or parts.query or parts.fragment or parts.username
    return f"{parts.scheme}://{netloc}" + ("/..." if hidden else "")


def post_json(url: str, body: Any, timeout: float = TIMEOUT_S) -> int:
    """POST ``body`` as JSON; returns the HTTP status. Raises ``OSError`` (``URLError``,
    ``HTTPError`` for 4xx/5xx, ``TimeoutError``) when the service does not take it."""
    data = json.dumps(body, ensure_ascii=False, allow_nan=False).encode("utf-8")
    request = urllib.request.Request(url, data=data, method="POST", headers={
        "Content-Type": "application/json; charset=utf-8", "User-Agent": "mindwatch"})
    with urllib.request.urlopen(request, timeout=timeout) as response:
        response.read(65536)            # the service's answer; the connection then closes
        return int(response.status)

