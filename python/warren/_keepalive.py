"""How long a kept-alive connection may carry another request, from the server's ``Keep-Alive`` header."""

from __future__ import annotations

from typing import Optional

#: Without a ``Keep-Alive: timeout``, a server is taken to keep an idle connection this long (Node's default).
DEFAULT_KEEP_S = 5.0
#: A kept connection is used up to this long before the server's own timeout, never in its last moment
#: (the server closing it while a request is on its way, which nobody can safely send again).
KEEP_MARGIN_S = 1.0


def keep_seconds(header: Optional[str]) -> float:
    """Seconds from an answer's end during which its connection may be used again (0: not again)."""
    timeout = DEFAULT_KEEP_S
    for part in (header or "").split(","):
        k, _, v = part.strip().partition("=")
        if k.strip().lower() == "timeout":
            v = v.strip()
            # Whole seconds, as RFC 9110's examples and Node send it; anything else is not trusted.
            if v.isdigit():
                timeout = float(v)
    return max(0.0, timeout - KEEP_MARGIN_S)
