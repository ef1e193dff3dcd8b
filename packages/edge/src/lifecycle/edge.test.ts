import { test } from 'node:test';
import assert from 'node:assert/strict';
import { WarrenError } from '@warren/api';
import type { LayerInfo } from '@warren/images';
import type { Backend, BackendCreateSpec, BackendSandbox } from '../backends/backend.js';
import { Edge, type EdgeOptions, type EdgeSandboxSpec } from './edge.js';
import { parseSessionId } from './live.js';
import { isNotRunningHere } from './not-here.js';

/** A strict fake backend: records calls, fails creates on demand, throws on anything unexpected. */
class FakeBackend implements Backend {
  readonly name = 'fake';
  capabilities = { pause: true, commit: true, ports: true, fnWorkers: true, network: true };
  calls: string[] = [];
  failCreate = false;
  dead = new Set<string>();

  async started(id: string): Promise<void> {
    this.calls.push(`started ${id}`);
  }

  async create(spec: BackendCreateSpec): Promise<BackendSandbox> {
    this.calls.push(`create ${spec.id}`);
    if (this.failCreate) throw new WarrenError('internal', 'runtime failed');
    return { id: spec.id, connect: () => Promise.reject(new Error('the fake has no agent')), initPid: null, initStartTime: null };
  }
  async adopt(): Promise<BackendSandbox | null> {
    throw new Error('unexpected adopt');
  }
  async destroy(id: string): Promise<void> {
    this.calls.push(`destroy ${id}`);
  }
  async pause(id: string): Promise<void> {
    this.calls.push(`pause ${id}`);
  }
  async resume(id: string): Promise<void> {
    this.calls.push(`resume ${id}`);
  }
  async reclaim(id: string): Promise<number> {
    this.calls.push(`reclaim ${id}`);
    return 3 * 2 ** 20;
  }
  async stats(): Promise<{ cpuSeconds: number; memoryBytes: number; swapBytes: number }> {
    return { cpuSeconds: 0, memoryBytes: 0, swapBytes: 0 };
  }
  async totals(): Promise<{ cpuSeconds: number; memoryBytes: number; swapBytes: number }> {
    return { cpuSeconds: 0, memoryBytes: 0, swapBytes: 0 };
  }
  async exited(sb: BackendSandbox): Promise<boolean> {
    return this.dead.has(sb.id);
  }
  async forgetLayers(): Promise<void> {}

  async releaseLayers(): Promise<void> {}

  async commit(id: string): Promise<LayerInfo> {
    this.calls.push(`commit ${id}`);
    return { digest: `sha256:${'0'.repeat(64)}`, diffId: `sha256:${'1'.repeat(64)}`, sizeBytes: 0 };
  }

  async list(): Promise<string[]> {
    return [];
  }
  async close(): Promise<void> {}
}

/** Resolves once `pred` holds (looked at every 5 ms); fails after `ms`. */
async function until(pred: () => boolean, ms = 2000): Promise<void> {
  for (const end = Date.now() + ms; !pred(); await new Promise((r) => setTimeout(r, 5))) if (Date.now() > end) assert.fail('timed out waiting');
}

const spec = (id: string, over: Partial<EdgeSandboxSpec> = {}): EdgeSandboxSpec => ({
  id,
  layers: [],
  // Requests as large as limits: the arithmetic below counts whole sandboxes.
  resources: { cpu: 1, memoryMiB: 512, memoryRequestMiB: 512, pids: 64 },
  env: {},
  user: null,
  workdir: null,
  expiresAtMs: null,
  idleTimeoutMs: null,
  lastActivityMs: Date.now(),
  paused: false,
  ...over,
});

/** An edge over the fake backend; `events` gets its events as text (`expired ID why`, `died ID`, `ID paused`). */
function edge(backend: FakeBackend, events: string[] = [], over: Partial<EdgeOptions> = {}): Edge {
  const e = new Edge({
    memoryFloorMiB: 0,
    nodeId: 'n1',
    backends: [backend],
    capacity: { cpu: 2, memoryMiB: 1024, sandboxes: 2, maxCpuPerSandbox: 2, maxMemoryMiBPerSandbox: 1024 },
    ...over,
  });
  e.events.subscribe((ev) =>
    events.push(
      ev.type === 'expired' ? `expired ${ev.id} ${ev.reason}` : ev.type === 'died' ? `died ${ev.id}` : `${ev.id} ${ev.paused ? 'paused' : 'running'}`,
    ),
  );
  return e;
}

test('admission: per-sandbox limits, then the node fills up; a failed create gives its share back', async () => {
  const b = new FakeBackend();
  const e = edge(b);
  assert.throws(
    () => e.admit({ cpu: 4, memoryMiB: 1, pids: 1 }),
    (err: WarrenError) => err.code === 'resource_exhausted',
  );
  b.failCreate = true;
  await assert.rejects(e.create(spec('sb_a')), (err: WarrenError) => err.message === 'runtime failed');
  assert.deepEqual(e.usage(), { cpu: 0, memoryMiB: 0, sandboxes: 0, paused: 0 });
  b.failCreate = false;
  await e.create(spec('sb_b'));
  await e.create(spec('sb_c'));
  assert.deepEqual(e.usage(), { cpu: 2, memoryMiB: 1024, sandboxes: 2, paused: 0 });
  await assert.rejects(e.create(spec('sb_d')), (err: WarrenError) => err.code === 'resource_exhausted');
  await e.destroy('sb_b');
  assert.deepEqual(e.usage(), { cpu: 1, memoryMiB: 512, sandboxes: 1, paused: 0 });
  await e.create(spec('sb_d'));
  assert.deepEqual(
    b.calls.filter((c) => c.startsWith('create')),
    ['create sb_a', 'create sb_b', 'create sb_c', 'create sb_d'],
  );
});

test('admission: a node whose sandboxes really use its CPUs refuses creates until they quiet down', async () => {
  const b = new FakeBackend();
  let cpuSeconds = 0;
  b.totals = async () => ({ cpuSeconds, memoryBytes: 0, swapBytes: 0 });
  let now = 1_000_000;
  const e = edge(b, [], {
    now: () => now,
    capacity: { cpu: 128, busyCpu: 1.8, memoryMiB: 64 * 1024, sandboxes: 100, maxCpuPerSandbox: 2, maxMemoryMiBPerSandbox: 1024 },
  });
  // Limits add up far past the node's 2 cores: mostly idle sandboxes all fit.
  for (let i = 0; i < 64; i++) await e.create(spec(`sb_${i}`));
  await e.sampleCpu();
  // Two cores busy for 30 s.
  for (let i = 0; i < 30; i++) {
    now += 1000;
    cpuSeconds += 2;
    await e.sampleCpu();
  }
  assert.throws(
    () => e.admit({ cpu: 1, memoryMiB: 1, pids: 1 }),
    (err: WarrenError) => err.code === 'resource_exhausted' && err.details.resource === 'cpu',
  );
  assert.ok((await e.used()).cpu > 1.8);
  // Quiet again: admitted.
  for (let i = 0; i < 30; i++) {
    now += 1000;
    await e.sampleCpu();
  }
  e.admit({ cpu: 1, memoryMiB: 1, pids: 1 });
});

test('a pause answers once frozen; the page-out goes on behind it and a resume stops it first', async () => {
  const b = new FakeBackend();
  let aborted = false;
  let finish: (bytes: number) => void = () => undefined;
  b.reclaim = (id: string, signal?: AbortSignal) => {
    b.calls.push(`reclaim ${id}`);
    return new Promise<number>((resolve) => {
      finish = resolve;
      signal?.addEventListener('abort', () => {
        aborted = true;
        b.calls.push(`reclaim stopped ${id}`);
        setImmediate(() => resolve(0));
      });
    });
  };
  const e = edge(b, [], { capacity: { cpu: 8, memoryMiB: 4096, sandboxes: 8, maxCpuPerSandbox: 2, maxMemoryMiBPerSandbox: 1024 } });
  await e.create(spec('sb_r'));
  await e.pause('sb_r');
  assert.equal(e.isPaused('sb_r'), true, 'paused before the page-out ends');
  // Until its page-out is done it counts as running; then only what stayed resident.
  assert.deepEqual(e.usage(), { cpu: 1, memoryMiB: 512, sandboxes: 1, paused: 0 });
  finish(2 * 2 ** 20);
  await new Promise((r) => setImmediate(r));
  assert.deepEqual(e.usage(), { cpu: 0, memoryMiB: 2, sandboxes: 1, paused: 1 });
  // Paused again, and resumed while the page-out runs: it is stopped before the thaw.
  await e.resume('sb_r');
  await e.pause('sb_r');
  await e.resume('sb_r');
  assert.equal(aborted, true);
  assert.equal(e.isPaused('sb_r'), false);
  assert.deepEqual(b.calls.slice(-4), ['pause sb_r', 'reclaim sb_r', 'reclaim stopped sb_r', 'resume sb_r']);
});

test('pause is idempotent and a concurrent resume thaws once', async () => {
  const b = new FakeBackend();
  const e = edge(b);
  await e.create(spec('sb_p'));
  await e.pause('sb_p');
  await e.pause('sb_p');
  await Promise.all([e.resume('sb_p'), e.resume('sb_p')]);
  assert.deepEqual(
    b.calls.filter((c) => !['create sb_p', 'started sb_p'].includes(c)),
    ['pause sb_p', 'reclaim sb_p', 'resume sb_p'],
  );
  assert.equal(e.isPaused('sb_p'), false);
});

test('a paused sandbox counts what stays resident and no CPU: the node admits more', async () => {
  const b = new FakeBackend();
  const e = edge(b, [], { capacity: { cpu: 2, memoryMiB: 1100, sandboxes: 8, maxCpuPerSandbox: 2, maxMemoryMiBPerSandbox: 1024 } });
  await e.create(spec('sb_1'));
  await e.create(spec('sb_2'));
  await assert.rejects(e.create(spec('sb_3')), (err: WarrenError) => err.code === 'resource_exhausted');
  await e.pause('sb_1');
  assert.deepEqual(e.usage(), { cpu: 1, memoryMiB: 512 + 3, sandboxes: 2, paused: 1 });
  assert.deepEqual(e.requested(), { cpu: 2, memoryMiB: 1024 });
  await e.create(spec('sb_3'));
  // Resuming takes its whole request back: the node is over, and admits nothing more.
  await e.resume('sb_1');
  await assert.rejects(e.create(spec('sb_4')), (err: WarrenError) => err.code === 'resource_exhausted');
});

test('a paused sandbox deleted, or whose resume fails, is counted as it is: nothing of it stays in the relief', async () => {
  const b = new FakeBackend();
  let finish: (bytes: number) => void = () => undefined;
  b.reclaim = (id: string, signal?: AbortSignal) =>
    new Promise<number>((resolve) => {
      b.calls.push(`reclaim ${id}`);
      finish = resolve;
      signal?.addEventListener('abort', () => setImmediate(() => resolve(0)));
    });
  const e = edge(b, [], { capacity: { cpu: 8, memoryMiB: 4096, sandboxes: 8, maxCpuPerSandbox: 2, maxMemoryMiBPerSandbox: 1024 } });
  const idle = { cpu: 0, memoryMiB: 0, sandboxes: 0, paused: 0 };
  // Deleted while its page-out runs, then once it is done.
  await e.create(spec('sb_1'));
  await e.pause('sb_1');
  await e.destroy('sb_1');
  assert.deepEqual(e.usage(), idle);
  await e.create(spec('sb_2'));
  await e.pause('sb_2');
  finish(2 ** 20);
  await until(() => e.usage().paused === 1);
  assert.deepEqual(e.usage(), { cpu: 0, memoryMiB: 1, sandboxes: 1, paused: 1 });
  await e.destroy('sb_2');
  assert.deepEqual(e.usage(), idle);
  // A resume that fails leaves it paused and counted; one that works takes it all back.
  await e.create(spec('sb_3'));
  await e.pause('sb_3');
  finish(0);
  await until(() => e.usage().paused === 1);
  b.resume = () => Promise.reject(new Error('thaw failed'));
  await assert.rejects(e.resume('sb_3'), /thaw failed/);
  assert.deepEqual(e.usage(), { cpu: 0, memoryMiB: 0, sandboxes: 1, paused: 1 });
  b.resume = async () => undefined;
  await e.resume('sb_3');
  assert.deepEqual(e.usage(), { cpu: 1, memoryMiB: 512, sandboxes: 1, paused: 0 });
  await e.destroy('sb_3');
  assert.deepEqual(e.usage(), idle);
});

test('time paused does not count against the TTL unless asked; the owner hears of every change', async () => {
  const b = new FakeBackend();
  const changes: string[] = [];
  const e = edge(b, changes);
  const t0 = Date.now() + 60_000;
  await e.create(spec('sb_a', { expiresAtMs: t0 }));
  await e.create(spec('sb_b', { expiresAtMs: t0, ttlCountsPaused: true }));
  await Promise.all([e.pause('sb_a'), e.pause('sb_b')]);
  await new Promise((r) => setTimeout(r, 60));
  await Promise.all([e.resume('sb_a'), e.resume('sb_b')]);
  const moved = (e.expiry('sb_a') ?? 0) - t0;
  assert.ok(moved >= 50 && moved < 1000, String(moved));
  assert.equal(e.expiry('sb_b'), t0);
  assert.deepEqual(changes.sort(), ['sb_a paused', 'sb_a running', 'sb_b paused', 'sb_b running']);
});

test('the sweep pauses sandboxes idle past pauseAfterIdle, and the longest-idle first under memory pressure', async () => {
  const b = new FakeBackend();
  const e = edge(b, [], { capacity: { cpu: 8, memoryMiB: 8192, sandboxes: 8, maxCpuPerSandbox: 2, maxMemoryMiBPerSandbox: 1024 } });
  await e.create(spec('sb_auto', { pauseAfterIdleMs: 5, lastActivityMs: Date.now() - 10 }));
  await e.create(spec('sb_busy', { pauseAfterIdleMs: 60_000 }));
  e.start();
  try {
    await new Promise((r) => setTimeout(r, 1300));
  } finally {
    await e.close({ keep: true });
  }
  assert.equal(e.isPaused('sb_auto'), true);
  assert.equal(e.isPaused('sb_busy'), false);
  // Memory runs out (what the node reads as available falls under its floor, and pausing frees
  // none): every idle sandbox is paused, the longest idle first, each said to be for memory.
  const b2 = new FakeBackend();
  const events: string[] = [];
  let availableMiB = 2048;
  const e2 = edge(b2, events, {
    memoryFloorMiB: 1024,
    memoryAvailableMiB: () => Promise.resolve(availableMiB),
    capacity: { cpu: 8, memoryMiB: 8192, sandboxes: 8, maxCpuPerSandbox: 2, maxMemoryMiBPerSandbox: 1024 },
  });
  e2.events.subscribe((ev) => ev.type === 'state' && ev.paused && events.push(`${ev.id} for ${ev.reason}`));
  await e2.create(spec('sb_new', { lastActivityMs: Date.now() - 1000 }));
  await e2.create(spec('sb_old', { lastActivityMs: Date.now() - 5000 }));
  // A MiB short of the floor plus sb_3's request, and pausing frees none: refused naming memory.
  availableMiB = 1024 + 511;
  const started = [...b2.calls];
  await assert.rejects(e2.create(spec('sb_3')), (err: WarrenError) => err.code === 'resource_exhausted' && err.details.resource === 'memory');
  assert.deepEqual(
    b2.calls.filter((c) => !started.includes(c)),
    ['pause sb_old', 'reclaim sb_old', 'pause sb_new', 'reclaim sb_new'],
    'idle ones paused first, and the create made nothing',
  );
  assert.deepEqual(e2.usage().sandboxes, 2);
  assert.deepEqual(
    events.filter((x) => x.includes(' for ')),
    ['sb_old for memory', 'sb_new for memory'],
  );
  await e2.resume('sb_old');
  await e2.resume('sb_new');
  // The sweep does the same on its own once memory falls under the floor.
  availableMiB = 100;
  e2.start();
  try {
    const deadline = Date.now() + 5000;
    while (b2.calls.filter((c) => c === 'pause sb_new').length < 2 && Date.now() < deadline) await new Promise((r) => setTimeout(r, 10));
  } finally {
    await e2.close({ keep: true });
  }
  assert.deepEqual(
    b2.calls.filter((c) => c.startsWith('pause')),
    ['pause sb_old', 'pause sb_new', 'pause sb_old', 'pause sb_new'],
  );
});

test('the sweep reports TTL and idle expiry and dead sandboxes', async () => {
  const b = new FakeBackend();
  const events: string[] = [];
  const e = edge(b, events);
  await e.create(spec('sb_ttl', { expiresAtMs: Date.now() - 1 }));
  await e.create(spec('sb_idle', { idleTimeoutMs: 1, lastActivityMs: Date.now() - 10 }));
  b.dead.add('sb_idle');
  e.start();
  try {
    await new Promise((r) => setTimeout(r, 2300));
  } finally {
    await e.close({ keep: true });
  }
  assert.ok(events.includes('expired sb_ttl ttl'), events.join(','));
  assert.ok(events.includes('expired sb_idle idle'), events.join(','));
  assert.ok(events.includes('died sb_idle'), events.join(','));
});

test('a backend that tells of ends is never asked whether its sandboxes exited; a paused sandbox is not looked at either', async () => {
  // The strict fake: every `exited` call is recorded; only the unwatched running one may be asked.
  class WatchingBackend extends FakeBackend {
    asked: string[] = [];
    onExit = new Map<string, () => void>();
    override async exited(sb: BackendSandbox): Promise<boolean> {
      this.asked.push(sb.id);
      return this.dead.has(sb.id);
    }
    async watchExit(sb: BackendSandbox, onExit: () => void): Promise<boolean> {
      if (sb.id === 'sb_unwatched' || sb.id === 'sb_paused') return false;
      this.onExit.set(sb.id, onExit);
      return true;
    }
  }
  const b = new WatchingBackend();
  const events: string[] = [];
  const e = edge(b, events, { capacity: { cpu: 4, memoryMiB: 2048, sandboxes: 4, maxCpuPerSandbox: 2, maxMemoryMiBPerSandbox: 1024 }, sweepMs: 5 });
  for (const id of ['sb_watched', 'sb_unwatched', 'sb_paused']) await e.create(spec(id));
  await e.pause('sb_paused');
  e.start();
  try {
    b.onExit.get('sb_watched')?.();
    await until(() => events.includes('died sb_watched'));
    b.dead.add('sb_unwatched');
    await until(() => events.includes('died sb_unwatched'));
  } finally {
    await e.close({ keep: true });
  }
  assert.deepEqual(new Set(b.asked), new Set(['sb_unwatched']));
  // Told once, its end is told again at every check while the sandbox is still here: a control
  // plane that could not record it (its database away) hears it again, as it did of the old poll.
  assert.ok(events.filter((x) => x === 'died sb_watched').length >= 2, events.join(','));
});

test('a close waits for the creates under way and removes them with the rest; a create after it is refused', async () => {
  const b = new FakeBackend();
  let release!: () => void;
  const gate = new Promise<void>((r) => (release = r));
  const create = b.create.bind(b);
  b.create = async (s: BackendCreateSpec): Promise<BackendSandbox> => {
    await gate;
    return create(s);
  };
  const e = edge(b);
  const made = e.create(spec('sb_late'));
  const closed = e.close({ keep: false });
  await assert.rejects(e.create(spec('sb_after')), (err: WarrenError) => err.code === 'unavailable');
  release();
  await made;
  await closed;
  assert.deepEqual(
    b.calls.filter((c) => c.endsWith('sb_late')),
    ['create sb_late', 'started sb_late', 'destroy sb_late'],
  );
});

test('session ids carry the init session number and nothing else passes', () => {
  assert.equal(parseSessionId('ss_12_0123456789ab'), '12');
  for (const bad of ['ss_12', 'ss_x_0123456789ab', 'ss_1_0123456789abc', '../ss_1_0123456789ab']) {
    assert.throws(
      () => parseSessionId(bad),
      (err: WarrenError) => err.code === 'not_found',
    );
  }
});

test('a sandbox asking for more disk than one may have on the node is refused before anything starts', async () => {
  const b = new FakeBackend();
  const e = edge(b, [], { capacity: { cpu: 8, memoryMiB: 8192, sandboxes: 8, maxCpuPerSandbox: 2, maxMemoryMiBPerSandbox: 1024, maxDiskMiBPerSandbox: 1000 } });
  const big = { ...spec('sb_big'), resources: { ...spec('sb_big').resources, diskMiB: 1001 } };
  await assert.rejects(e.create(big), (err: WarrenError) => err.code === 'resource_exhausted' && /1000 MiB of disk/.test(err.message));
  assert.deepEqual(b.calls, []);
  await e.create({ ...big, resources: { ...big.resources, diskMiB: 1000 } });
  assert.equal(e.usage().sandboxes, 1);
});

test("the backend hears that a sandbox is set up only after the edge's own writes into it", async () => {
  const b = new FakeBackend();
  const e = edge(b);
  await e.create(spec('sb_s'));
  assert.deepEqual(b.calls, ['create sb_s', 'started sb_s']);
  b.failCreate = true;
  await assert.rejects(e.create(spec('sb_t')));
  assert.ok(!b.calls.includes('started sb_t'));
});

test('a create picks its backend by name; a name the node lacks, or an operation its backend cannot do, is refused and costs nothing', async () => {
  const first = new FakeBackend();
  const second = new FakeBackend();
  Object.assign(second, { name: 'small', capabilities: { pause: false, commit: false, ports: false, fnWorkers: false, network: false } });
  const e = edge(first, [], { backends: [first, second] });
  await assert.rejects(
    e.create(spec('sb_x', { backend: 'vm' })),
    (err: WarrenError) => err.code === 'invalid_argument' && /backend "vm" is not available/.test(err.message),
  );
  await assert.rejects(e.create(spec('sb_f', { backend: 'small', fn: true })), (err: WarrenError) => err.code === 'invalid_argument');
  assert.deepEqual(e.usage(), { cpu: 0, memoryMiB: 0, sandboxes: 0, paused: 0 });
  await e.create(spec('sb_a'));
  await e.create(spec('sb_b', { backend: 'small' }));
  assert.deepEqual([first.calls.filter((c) => c.startsWith('create')), second.calls.filter((c) => c.startsWith('create'))], [['create sb_a'], ['create sb_b']]);
  await assert.rejects(e.pause('sb_b'), (err: WarrenError) => err.code === 'invalid_argument' && /cannot be paused/.test(err.message));
  await assert.rejects(e.commit('sb_b'), (err: WarrenError) => err.code === 'invalid_argument');
  assert.deepEqual(
    second.calls.filter((c) => c.startsWith('pause') || c.startsWith('commit')),
    [],
  );
  await e.pause('sb_a');
  assert.deepEqual(
    e.backends().map((b) => b.name),
    ['fake', 'small'],
  );
  await e.destroy('sb_b');
  assert.ok(second.calls.includes('destroy sb_b') && !first.calls.includes('destroy sb_b'));
});

test('a resume waits for a commit (or fork) that is reading the sandbox’s files: nothing of it runs meanwhile; a pause during it keeps it frozen after', async () => {
  const b = new FakeBackend();
  let open: () => void = () => undefined;
  const gate = new Promise<void>((r) => (open = r));
  b.commit = async (id: string): Promise<LayerInfo> => {
    b.calls.push(`commit ${id}`);
    await gate;
    b.calls.push(`committed ${id}`);
    return { digest: `sha256:${'0'.repeat(64)}`, diffId: '', sizeBytes: 0 };
  };
  const e = edge(b);
  await e.create(spec('sb_a'));
  await e.pause('sb_a');
  const committing = e.commit('sb_a');
  const resuming = e.resume('sb_a');
  await new Promise((r) => setImmediate(r));
  assert.ok(!b.calls.includes('resume sb_a'), b.calls.join());
  open();
  await Promise.all([committing, resuming]);
  const at = (c: string): number => b.calls.indexOf(c);
  assert.ok(at('committed sb_a') < at('resume sb_a'), b.calls.join());
  // A running one frozen for a commit, paused meanwhile: the commit's end does not thaw it.
  b.calls.length = 0;
  let open2: () => void = () => undefined;
  const gate2 = new Promise<void>((r) => (open2 = r));
  b.commit = async (): Promise<LayerInfo> => {
    await gate2;
    return { digest: `sha256:${'0'.repeat(64)}`, diffId: '', sizeBytes: 0 };
  };
  const again = e.commit('sb_a');
  await new Promise((r) => setImmediate(r));
  await e.pause('sb_a');
  open2();
  await again;
  assert.deepEqual(
    b.calls.filter((c) => c.startsWith('resume')),
    [],
  );
  assert.equal(e.isPaused('sb_a'), true);
});

test('a sandbox the edge does not run is refused as notRunningHere by every sandbox call, a command lookup too (the control plane then asks its store)', async () => {
  const b = new FakeBackend();
  const e = edge(b);
  try {
    await e.create(spec('sb_1'));
    assert.equal(e.hasCommand('sb_1', 'cmd_none'), false);
    await e.destroy('sb_1');
    assert.throws(() => e.hasCommand('sb_1', 'cmd_none'), isNotRunningHere);
    await assert.rejects(e.exec('sb_1', { cmd: ['true'] }), isNotRunningHere);
    await assert.rejects(e.pause('sb_1'), isNotRunningHere);
  } finally {
    await e.close({ keep: true });
  }
});
