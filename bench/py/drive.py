"""What one Python process drives with AsyncWarren: sandboxes created per second, then `true`
commands per second on a warm shell session in each of them. Prints one JSON line.

Usage: drive.py URL KEY SANDBOXES COMMANDS CONCURRENCY
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "python"))

from warren import AsyncWarren  # noqa: E402

SMALL = {"cpu": 0.01, "memoryMiB": 16}


async def bounded(n: int, limit: int, fn):  # type: ignore[no-untyped-def]
    sem = asyncio.Semaphore(limit)

    async def one(i: int):  # type: ignore[no-untyped-def]
        async with sem:
            return await fn(i)

    return await asyncio.gather(*(one(i) for i in range(n)))


async def main() -> None:
    url, key, n, commands, conc = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])
    async with AsyncWarren(url, key, max_connections=conc) as w:
        t0, c0 = time.monotonic(), time.process_time()
        sbs = await bounded(n, conc, lambda i: w.sandboxes.create(image="busybox:latest", resources=SMALL, labels={"bench": "py"}))
        create_s, create_cpu = time.monotonic() - t0, time.process_time() - c0
        shells = await bounded(n, conc, lambda i: sbs[i].shell())
        t0, c0 = time.monotonic(), time.process_time()
        # A session runs one command at a time: each task drives one session's share in turn.
        per = max(1, commands // n)

        async def drive(i: int) -> None:
            for _ in range(per):
                await shells[i].exec("true")

        await bounded(n, conc, drive)
        commands = per * n
        exec_s, exec_cpu = time.monotonic() - t0, time.process_time() - c0
        await bounded(n, conc, lambda i: sbs[i].delete())
    print(
        json.dumps(
            {
                "sandboxes": n,
                "createsPerS": n / create_s,
                "commands": commands,
                "commandsPerS": commands / exec_s,
                # What the client itself spends: calls per second of its own CPU.
                "createsPerCpuS": n / create_cpu,
                "commandsPerCpuS": commands / exec_cpu,
            }
        ),
        flush=True,
    )


asyncio.run(main())
