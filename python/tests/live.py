"""What the live tests share: the server they run against (WARREN_URL, WARREN_API_KEY, as the
README's test command sets them from a real Warren it started)."""

from __future__ import annotations

import os
import sys
import unittest
import uuid

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

URL = os.environ.get("WARREN_URL")
KEY = os.environ.get("WARREN_API_KEY")


def needs_server(cls: type) -> type:
    return unittest.skipUnless(URL and KEY, "WARREN_URL and WARREN_API_KEY name no server")(cls)


def label() -> str:
    """A label value of this run alone: the tests' batch calls touch only their own sandboxes."""
    return "py-" + uuid.uuid4().hex[:10]
