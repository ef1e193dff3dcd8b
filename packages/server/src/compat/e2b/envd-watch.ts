import { randomBytes } from 'node:crypto';
import { posix } from 'node:path';
import { WarrenError, type FileEntry } from '@warren/api';
import type { RouteDeps } from '../../http/route-types.js';
import { absolute, entryInfo, type Agent, type Call } from './agent.js';
import { ConnectError, ConnectStream } from './connect.js';
import { keepaliveMs } from './envd-process.js';
import { ownersOf, type Owners } from './owners.js';

/** The shortest time between two reads of a watched directory. */
const WATCH_POLL_MS = 250;
/** The deepest a recursive watch reads. */
const WATCH_DEPTH = 16;
/**
 * The most entries a watched tree may have (a read of more ends the watch): every read lists the
 * whole tree again, so this bounds what one watch costs the sandbox's node each time.
 */
export const MAX_WATCH_ENTRIES = 4096;
/** The most watches (streams and watchers) one sandbox may have at once, per control plane. */
export const MAX_WATCHES = 16;
/** The most events a watcher holds for its next GetWatcherEvents (past it the watcher ends). */
const MAX_PENDING = 10_000;
/** A watcher nobody asked for events for this long is removed. */
const WATCHER_IDLE_MS = 10 * 60_000;

/** A file system event as envd sends it. */
interface FsEvent {
  name: string;
  type: string;
  entry?: Record<string, unknown>;
}

/**
 * What changed between two reads of a tree (pure): a new entry is a create (and a write, when
 * it is a file with bytes in it: inotify tells both), one whose size or time changed a write,
 * one whose mode changed a chmod, one gone a remove (a rename: a remove and a create).
 */
export function changes(before: Map<string, FileEntry>, after: Map<string, FileEntry>, withEntry: boolean, owners?: Owners): FsEvent[] {
  const out: FsEvent[] = [];
  const ev = (name: string, type: string, e: FileEntry | undefined): void =>
    void out.push({ name, type, ...(withEntry && e ? { entry: entryInfo(e, owners) } : {}) });
  for (const [name, e] of after) {
    const was = before.get(name);
    if (!was) {
      ev(name, 'EVENT_TYPE_CREATE', e);
      if (e.type === 'file' && e.size > 0) ev(name, 'EVENT_TYPE_WRITE', e);
    } else if (was.mtime !== e.mtime || was.size !== e.size) ev(name, 'EVENT_TYPE_WRITE', e);
    else if (was.mode !== e.mode) ev(name, 'EVENT_TYPE_CHMOD', e);
  }
  for (const [name] of before) if (!after.has(name)) ev(name, 'EVENT_TYPE_REMOVE', undefined);
  return out;
}

/**
 * A directory watched by reading it again (Warren's agent has no file events of its own): each
 * read at least WATCH_POLL_MS and four times its own length after the one before, so a large
 * tree is read less often; a tree past MAX_WATCH_ENTRIES ends the watch. Reading counts as the
 * sandbox's activity, so a watched sandbox is not paused for idleness.
 */
class DirPoll {
  private seen = new Map<string, FileEntry>();
  private lastReadMs = 0;

  constructor(
    private readonly d: RouteDeps,
    private readonly a: Agent,
    readonly dir: string,
    private readonly recursive: boolean,
    private readonly withEntry: boolean,
  ) {}

  /** The first read: not_found for a path that is not there, invalid_argument for one that is no directory. */
  async start(): Promise<void> {
    const root = await this.d.files.stat(this.a.caller, this.a.id, this.dir);
    if (root.type !== 'dir') throw new ConnectError('invalid_argument', `${this.dir} is not a directory`);
    this.seen = await this.read();
  }

  /** How long to wait before the next read. */
  get intervalMs(): number {
    return Math.max(WATCH_POLL_MS, 4 * this.lastReadMs);
  }

  private async read(): Promise<Map<string, FileEntry>> {
    const t0 = Date.now();
    const entries = await this.d.files.list(this.a.caller, this.a.id, this.dir, this.recursive ? WATCH_DEPTH : 1);
    this.lastReadMs = Date.now() - t0;
    if (entries.length > MAX_WATCH_ENTRIES)
      throw new WarrenError('resource_exhausted', `${this.dir} holds more than ${MAX_WATCH_ENTRIES} entries: watch a smaller tree`);
    return new Map(entries.map((e) => [posix.relative(this.dir, e.path), e] as [string, FileEntry]));
  }

  /** The events since the last read. */
  async poll(): Promise<FsEvent[]> {
    const now = await this.read();
    const out = changes(this.seen, now, this.withEntry, this.withEntry ? await ownersOf(this.d, this.a) : undefined);
    this.seen = now;
    return out;
  }
}

interface Watcher {
  sandbox: string;
  tenant: string;
  poll: DirPoll;
  events: FsEvent[];
  error: unknown;
  lastAsked: number;
  timer: NodeJS.Timeout | null;
  /** Frees its place among the sandbox's watches. */
  give: () => void;
}

/** The watches of a control plane: how many each sandbox has, and the watchers by id. */
class Watches {
  readonly counts = new Map<string, number>();
  readonly watchers = new Map<string, Watcher>();

  /** Takes a place for one more watch of the sandbox, or resource_exhausted. */
  take(sandbox: string): () => void {
    const n = this.counts.get(sandbox) ?? 0;
    if (n >= MAX_WATCHES) throw new WarrenError('resource_exhausted', `sandbox ${sandbox} has ${MAX_WATCHES} watches already: stop one first`);
    this.counts.set(sandbox, n + 1);
    let given = false;
    return () => {
      if (given) return;
      given = true;
      const left = (this.counts.get(sandbox) ?? 1) - 1;
      if (left > 0) this.counts.set(sandbox, left);
      else this.counts.delete(sandbox);
    };
  }
}

const registries = new WeakMap<RouteDeps, Watches>();
const watchesOf = (d: RouteDeps): Watches => {
  let w = registries.get(d);
  if (!w) registries.set(d, (w = new Watches()));
  return w;
};

/** A watch request's poll, started (its first read done). */
async function startPoll(d: RouteDeps, a: Agent, msg: Record<string, unknown>): Promise<DirPoll> {
  const poll = new DirPoll(d, a, absolute(msg.path, a), msg.recursive === true, msg.includeEntry === true);
  await poll.start();
  return poll;
}

/** WatchDir: a stream of the events of a directory, until the client goes or its connect-timeout-ms. */
const watchDir: Call = async (d, a, msg, req, res) => {
  const give = watchesOf(d).take(a.id);
  try {
    const poll = await startPoll(d, a, msg);
    const out = new ConnectStream(res);
    await out.send({ start: {} });
    const timeout = Number(req.headers['connect-timeout-ms'] ?? 0);
    const until = timeout > 0 ? Date.now() + timeout : Infinity;
    const every = keepaliveMs(req);
    let pinged = Date.now();
    let wake: (() => void) | null = null;
    res.once('close', () => wake?.());
    while (!out.closed) {
      await new Promise<void>((resolve) => {
        const t = setTimeout(resolve, poll.intervalMs);
        wake = () => {
          clearTimeout(t);
          resolve();
        };
      });
      if (out.closed) return;
      if (Date.now() > until) return out.end(new ConnectError('deadline_exceeded', 'the watch ran its time'));
      let events: FsEvent[];
      try {
        events = await poll.poll();
      } catch (e) {
        return out.end(e);
      }
      for (const filesystem of events) await out.send({ filesystem });
      if (every && Date.now() - pinged >= every) {
        out.ping({ keepalive: {} });
        pinged = Date.now();
      }
    }
  } finally {
    give();
  }
};

/** Ends a watcher: its place freed, its reads stopped. */
function dropWatcher(w: Watches, id: string): void {
  const x = w.watchers.get(id);
  if (!x) return;
  if (x.timer) clearTimeout(x.timer);
  w.watchers.delete(id);
  x.give();
}

/** The caller's watcher of this sandbox by id, or not_found. */
function watcherOf(w: Watches, a: Agent, msg: Record<string, unknown>): [string, Watcher] {
  const id = typeof msg.watcherId === 'string' ? msg.watcherId : '';
  const x = w.watchers.get(id);
  if (!x || x.sandbox !== a.id || x.tenant !== a.caller.tenant) throw new ConnectError('not_found', `watcher ${id} not found`);
  return [id, x];
}

/** The calls of E2B's watchers, for clients that ask for events instead of holding a stream (E2B's Python SDK). */
export const WATCH: Record<string, Call> = {
  WatchDir: watchDir,
  async CreateWatcher(d, a, msg) {
    const w = watchesOf(d);
    const give = w.take(a.id);
    let poll: DirPoll;
    try {
      poll = await startPoll(d, a, msg);
    } catch (e) {
      give();
      throw e;
    }
    const id = `w_${randomBytes(12).toString('hex')}`;
    const x: Watcher = { sandbox: a.id, tenant: a.caller.tenant, poll, events: [], error: null, lastAsked: Date.now(), timer: null, give };
    w.watchers.set(id, x);
    const later = (ms: number, f: () => void): void => {
      x.timer = setTimeout(f, ms);
      x.timer.unref();
    };
    // An ended watcher waits for its last GetWatcherEvents (the error), or as long as an idle one.
    const fail = (e: unknown): void => {
      x.error = e;
      later(WATCHER_IDLE_MS, () => dropWatcher(w, id));
    };
    const next = (): void =>
      later(poll.intervalMs, () => {
        if (Date.now() - x.lastAsked > WATCHER_IDLE_MS) return dropWatcher(w, id);
        poll.poll().then((events) => {
          x.events.push(...events);
          if (x.events.length <= MAX_PENDING) return next();
          x.events = [];
          fail(new WarrenError('resource_exhausted', `more than ${MAX_PENDING} events were not asked for: the watcher ended`));
        }, fail);
      });
    next();
    return { watcherId: id };
  },
  async GetWatcherEvents(d, a, msg) {
    const w = watchesOf(d);
    const [id, x] = watcherOf(w, a, msg);
    x.lastAsked = Date.now();
    const events = x.events;
    x.events = [];
    if (x.error && !events.length) {
      dropWatcher(w, id);
      throw x.error instanceof Error ? x.error : new WarrenError('internal', 'the watcher failed');
    }
    return { events };
  },
  async RemoveWatcher(d, a, msg) {
    const w = watchesOf(d);
    const [id] = watcherOf(w, a, msg);
    dropWatcher(w, id);
    return {};
  },
};
