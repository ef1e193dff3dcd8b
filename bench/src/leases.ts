// Warren benchmark: a lease's lapse over many sandboxes on one node. Makes N busybox sandboxes
// under a lease that says pause, stops renewing it, and times from its deadline until the first
// and the last of them is frozen; then the same with a lease that says delete, until the last is
// removed. Prints numbers; asserts nothing. Target: 1,000 sandboxes frozen ≤ 1 s after the lapse.
// Usage: npm run bench:leases [-- --count 1000]
import { execFileSync } from 'node:child_process';
import { mkdtemp, readFile, rm } from 'node:fs/promises';
import { cpus, tmpdir, totalmem } from 'node:os';
import { join } from 'node:path';
import { parseArgs } from 'node:util';
import type { Warren } from '@warren/sdk';
import { startWarrenUp } from './warren-up.js';

const { values } = parseArgs({ options: { count: { type: 'string', default: '1000' } } });
const COUNT = Number(values.count);

/** Makes `count` sandboxes under a new lease, in batches; answers the lease once they all run. */
async function leased(c: Warren, onExpiry: 'pause' | 'delete'): Promise<{ id: string; deadline: number; made: number; createMs: number; ids: string[] }> {
  const lease = await c.leases.create({ ttlSeconds: 600, onExpiry }, { keepAlive: false });
  const t0 = performance.now();
  let made = 0;
  const ids: string[] = [];
  while (made < COUNT) {
    const n = Math.min(250, COUNT - made);
    const r = await c.sandboxes.createMany(n, { image: 'busybox:latest', resources: { cpu: 0.01, memoryMiB: 16 }, lease: lease.id });
    made += r.sandboxes.length;
    ids.push(...r.sandboxes.map((x) => x.id));
    if (r.errors.length) {
      console.log(`  ${r.errors.length} creates failed (${r.errors[0]!.message}); going on with ${made}`);
      break;
    }
  }
  const createMs = performance.now() - t0;
  // Its deadline a few seconds off, then no more renewals.
  const renewed = await lease.renew(3);
  return { id: lease.id, deadline: Date.parse(renewed.expiresAt), made, createMs, ids };
}

/** Each sandbox's cgroup freezer state file (the kernel's word on whether it runs). */
function freezerFiles(ids: string[]): string[] {
  const dir = execFileSync('find', ['/sys/fs/cgroup/freezer', '-maxdepth', '6', '-type', 'd', '-name', ids[0]!]).toString().trim().split('\n')[0]!;
  const parent = dir.slice(0, dir.lastIndexOf('/'));
  return ids.map((id) => `${parent}/${id}/freezer.state`);
}

/** Polls the freezer files until every one says FROZEN (a sandbox gone counts too): the times (ms after the deadline) of the first and the last. */
async function frozen(files: string[], deadline: number): Promise<{ firstMs: number; allMs: number }> {
  let firstMs = Number.NaN;
  const left = new Set(files);
  for (;;) {
    await Promise.all(
      [...left].map(async (f) => {
        const st = await readFile(f, 'utf8').catch(() => 'FROZEN');
        if (st.trim() === 'FROZEN') left.delete(f);
      }),
    );
    const at = Date.now() - deadline;
    if (left.size < files.length && Number.isNaN(firstMs)) firstMs = at;
    if (left.size === 0) return { firstMs, allMs: at };
    if (at > 120_000) throw new Error(`${left.size} not frozen 2 minutes after the lapse`);
    await new Promise((r) => setTimeout(r, 5));
  }
}

/** Polls how many of the lease's sandboxes are in `state`, until all `made` are; the times (ms after the deadline) of the first and the last. */
async function until(c: Warren, lease: string, state: 'paused' | 'stopped', made: number, deadline: number): Promise<{ firstMs: number; allMs: number }> {
  let firstMs = Number.NaN;
  for (;;) {
    let n = 0;
    let cursor: string | undefined;
    do {
      const page = await c.sandboxes.list({ lease, state, limit: 1000, cursor });
      n += page.sandboxes.length;
      cursor = page.nextCursor ?? undefined;
    } while (cursor);
    const at = Date.now() - deadline;
    if (n > 0 && Number.isNaN(firstMs)) firstMs = at;
    if (n >= made) return { firstMs, allMs: at };
    if (at > 120_000) throw new Error(`only ${n} of ${made} ${state} 2 minutes after the lapse`);
    await new Promise((r) => setTimeout(r, 10));
  }
}

async function main(): Promise<void> {
  console.log(`machine: ${cpus().length} cores (${cpus()[0]?.model ?? '?'}), ${(totalmem() / 2 ** 30).toFixed(1)} GiB, node ${process.version}`);
  const dir = await mkdtemp(join(tmpdir(), 'warren-bench-leases-'));
  const node = await startWarrenUp(dir, ['--images', 'busybox:latest', '--memory-floor-mib', '0']);
  try {
    for (const onExpiry of ['pause', 'delete'] as const) {
      const l = await leased(node.client, onExpiry);
      console.log(`lease that says ${onExpiry}: ${l.made} sandboxes made in ${(l.createMs / 1000).toFixed(1)} s`);
      const files = freezerFiles(l.ids);
      const [f, api] = await Promise.all([
        frozen(files, l.deadline),
        until(node.client, l.id, onExpiry === 'pause' ? 'paused' : 'stopped', l.made, l.deadline),
      ]);
      console.log(`  after its deadline: frozen (the kernel's freezer): the first at ${f.firstMs} ms, all ${l.made} at ${f.allMs} ms`);
      console.log(
        `  after its deadline: ${onExpiry === 'pause' ? 'paused' : 'removed'} as the API lists them: the first at ${api.firstMs} ms, all at ${api.allMs} ms`,
      );
      if (onExpiry === 'pause') await node.client.leases.get(l.id).then((x) => x.delete());
    }
  } finally {
    await node.stop();
    await rm(dir, { recursive: true, force: true });
  }
}

await main();
