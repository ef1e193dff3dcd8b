#!/usr/bin/env python3
"""A preemption-safe RL rollout driver over Warren's asyncio client.

N episodes, each in a sandbox of its own: the task is written into it, a policy (here a stand-in
for the model) edits the code, the task's tests run, and their outcome is the reward. Rewards are
appended to a JSONL file, one line per finished episode.

Killed at any point (kill -9 included) and started again with the same arguments, it finishes
every episode exactly once and runs no step twice:
- a sandbox is created with the request id ``{batch}-ep{i}``: a create after a restart returns
  the sandbox the first one made;
- every command runs with a request id too: after a restart the same exec re-attaches to the
  command the first try started (from its first byte), instead of starting it again;
- at start it reads its results file and, by the batch's label, deletes the sandboxes of
  episodes that finished but were not deleted before the driver died.

Usage: WARREN_URL=... WARREN_API_KEY=... rollout.py --batch b1 --episodes 8 --parallel 4 --out rewards.jsonl
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
from typing import Dict, Set

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "python"))

from warren import AsyncSandbox, AsyncWarren  # noqa: E402

TASK = "make add(a, b) return the sum of a and b; tests: python3 -m unittest test_task.py\n"
BUGGY = "def add(a, b):\n    return a - b\n"
TESTS = """import time, unittest
from task import add

class T(unittest.TestCase):
    def test_add(self):
        for k in range(4):
            print("checking", k, flush=True)
            time.sleep(0.15)
            self.assertEqual(add(k, 2), k + 2)
"""


def policy(episode: int) -> str:
    """The stand-in for a model's edit: right on even episodes, wrong on odd ones."""
    return "def add(a, b):\n    return a + b\n" if episode % 2 == 0 else "def add(a, b):\n    return a * b\n"


def log(**kv: object) -> None:
    print(json.dumps(kv), flush=True)


async def run_step(sb: AsyncSandbox, key: str, cmd: str) -> "tuple[int, str]":
    """Runs ``cmd`` once, whatever restarts come between: the request id names the command."""
    out = []
    code = None
    async for ev in sb.exec_stream(cmd, request_id=key, timeout_ms=120_000):
        if ev.type == "start":
            log(step=key, started=ev.command_id)
        elif ev.type in ("stdout", "stderr"):
            out.append(ev.data or "")
        elif ev.type == "exit":
            code = ev.exit_code
    return (code if code is not None else -1), "".join(out)


async def episode(w: AsyncWarren, batch: str, i: int, out_path: str, lock: asyncio.Lock) -> None:
    eid = f"{batch}-ep{i}"
    sb = await w.sandboxes.create(
        image="debian-python:latest",
        request_id=eid,
        labels={"batch": batch, "episode": str(i)},
        workdir="/workspace",
        files={"/workspace/TASK.md": TASK, "/workspace/task.py": BUGGY, "/workspace/test_task.py": TESTS},
        resources={"cpu": 0.5, "memoryMiB": 256},
    )
    # The policy's edit: the same content on every try, so writing it twice changes nothing.
    await sb.files.write("/workspace/task.py", policy(i))
    code, output = await run_step(sb, f"{eid}-test", "cd /workspace && echo ran >> runs.log && python3 -m unittest test_task.py 2>&1")
    runs = int((await sb.files.read("/workspace/runs.log")).decode().count("ran"))
    result = {"episode": i, "sandbox": sb.id, "reward": 1.0 if code == 0 else 0.0, "runs": runs, "tail": output.strip().splitlines()[-1:]}
    async with lock:
        with open(out_path, "a") as f:
            f.write(json.dumps(result) + "\n")
            f.flush()
            os.fsync(f.fileno())
    log(finished=i, reward=result["reward"])
    await sb.delete()


def finished(out_path: str) -> Dict[int, dict]:
    done: Dict[int, dict] = {}
    try:
        with open(out_path) as f:
            for line in f:
                # A line cut off by a kill mid-write is not a result.
                try:
                    r = json.loads(line)
                except ValueError:
                    continue
                done[r["episode"]] = r
    except FileNotFoundError:
        pass
    return done


async def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--batch", default="batch")
    ap.add_argument("--episodes", type=int, default=8)
    ap.add_argument("--parallel", type=int, default=4)
    ap.add_argument("--out", default="rewards.jsonl")
    a = ap.parse_args()
    done = finished(a.out)
    async with AsyncWarren() as w:
        # Sandboxes of episodes that finished before a kill, not yet deleted: found by label.
        leftover = [s for s in await w.sandboxes.list(labels={"batch": a.batch}) if s.info.state != "stopped"]
        for s in leftover:
            if int(s.info.labels.get("episode", "-1")) in done:
                await s.delete()
        lock = asyncio.Lock()
        todo = [i for i in range(a.episodes) if i not in done]
        slots = asyncio.Semaphore(a.parallel)

        async def one(i: int) -> None:
            async with slots:
                await episode(w, a.batch, i, a.out, lock)

        await asyncio.gather(*(one(i) for i in todo))
    results = finished(a.out)
    seen: Set[int] = set(results)
    log(batch=a.batch, finished=len(seen), reward=sum(r["reward"] for r in results.values()))


if __name__ == "__main__":
    asyncio.run(main())
