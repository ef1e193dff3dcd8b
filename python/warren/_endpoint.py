"""Where a Warren server is and how to authenticate to it."""

from __future__ import annotations

import os
from typing import Optional
from urllib.parse import urlsplit

DEFAULT_URL = "http://127.0.0.1:7070"


class Endpoint:
    """Where the server is and how to authenticate, from a URL like ``http://host:7070``."""

    @classmethod
    def resolve(cls, url: Optional[str], api_key: Optional[str]) -> "Endpoint":
        """The given URL and key, else ``WARREN_URL`` and ``WARREN_API_KEY``, else the local default."""
        key = api_key if api_key is not None else os.environ.get("WARREN_API_KEY", "")
        return cls(url or os.environ.get("WARREN_URL") or DEFAULT_URL, key)

    def __init__(self, url: str, api_key: str) -> None:
        u = urlsplit(url)
        if u.scheme not in ("http", "https") or not u.hostname:
            raise ValueError(f"a Warren URL is http(s)://host[:port], not {url!r}")
        self.url = url.rstrip("/")
        self.tls = u.scheme == "https"
        self.host = u.hostname
        self.port = u.port or (443 if self.tls else 80)
        self.base = u.path.rstrip("/")
        self.headers = {"authorization": f"Bearer {api_key}", "host": u.netloc, "user-agent": "warren-python/0.1"}
