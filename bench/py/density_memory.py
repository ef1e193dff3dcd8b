"""Creates N busybox sandboxes at once from one asyncio program (AsyncWarren, default resources:
the default memory limit and request) and prints one JSON line: how many were made, the refusals'
messages, the seconds it took and the ids made (the caller deletes them).

Usage: density_memory.py URL KEY N
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "python"))

from warren import AsyncWarren, WarrenError  # noqa: E402


async def main() -> None:
    url, key, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
    async with AsyncWarren(url, key, max_connections=n) as w:
        t0 = time.monotonic()
        made = await asyncio.gather(*(w.sandboxes.create(image="busybox:latest", labels={"bench": "density-memory"}) for _ in range(n)), return_exceptions=True)
        seconds = time.monotonic() - t0
    ids = [s.id for s in made if not isinstance(s, BaseException)]
    refused = [str(e) if isinstance(e, WarrenError) else repr(e) for e in made if isinstance(e, BaseException)]
    print(json.dumps({"created": len(ids), "refused": refused, "seconds": seconds, "ids": ids}))


asyncio.run(main())
