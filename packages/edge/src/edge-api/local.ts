import type { ExecEvent } from '@warren/api';
import { createReadStream } from 'node:fs';
import { WarrenError } from '@warren/api';
import type { LayerStore } from '@warren/images';
import type { Command } from '../lifecycle/command.js';
import type { Edge } from '../lifecycle/edge.js';
import type { EdgeSandboxSpec } from '../lifecycle/edge-spec.js';
import type { EdgeEvent } from '../lifecycle/events.js';
import { pushIterable } from '../util/push-iterable.js';
import { loadClock } from '../fn/fn-workers.js';
import { isEdgeLease } from '../lifecycle/leases.js';
import { plainCopy } from '../util/plain-copy.js';
import { MAX_CREATE_MANY, type CommandResult, type CommandStream, type CreateOutcome, type EdgeApi, type EdgeFile, type EdgeLoad } from './edge-api.js';

/** A command's events from byte `offset` on, until its exit or error, as fast as they are read (the command runs on if the reader stops). */
export function commandEvents(cmd: Command, offset: number): AsyncIterable<ExecEvent> {
  return cmd.events(offset);
}

/** A command run to its end, with its whole retained output. */
export async function commandResult(cmd: Command): Promise<CommandResult> {
  const end = await cmd.wait();
  const done =
    end.type === 'exit' || end.type === 'error' ? end : ({ type: 'error', error: { code: 'internal', message: 'command ended without exit' } } as const);
  return { commandId: cmd.id, stdout: cmd.text('stdout'), stderr: cmd.text('stderr'), end: done };
}

/**
 * A copy of a spec, as the network would deliver it: the edge keeps and changes the spec it is
 * given, and that must never reach back into the caller's objects.
 */
const copySpec = (spec: EdgeSandboxSpec): EdgeSandboxSpec => plainCopy(spec);

/** The most leases one leasesSet carries. */
export const MAX_LEASES_SET = 10_000;

/** Why one sandbox of a createMany or a fork was not made, as its outcome. */
const failed = (reason: unknown): CreateOutcome => {
  const e = reason instanceof WarrenError ? reason : new WarrenError('internal', 'sandbox creation failed');
  return { error: { code: e.code, message: e.message, details: e.details } };
};

/** A sandbox that ended between its start and the answer (its init died at once, say). */
const gone = (id: string): never => {
  throw new WarrenError('unavailable', 'the sandbox stopped as soon as it started', { id });
};

/**
 * The edge in this process, behind the EdgeApi (what `warren up` uses by default). `fresh`: the
 * specs come decoded from the wire (serveEdgeApi), new objects nobody else holds, so they are
 * not copied again.
 */
export function localEdgeApi(edge: Edge, o: { fresh?: boolean; layers?: LayerStore } = {}): EdgeApi {
  const copy = o.fresh ? (spec: EdgeSandboxSpec): EdgeSandboxSpec => spec : copySpec;
  /** The node's load now (`used`: what its sandboxes really use, read from their cgroups). */
  const load = async (used: boolean): Promise<EdgeLoad> => {
    const u = edge.usage();
    return {
      at: loadClock(),
      committed: { cpu: u.cpu, memoryMiB: u.memoryMiB },
      requested: edge.requested(),
      used: used ? await edge.used() : null,
      sandboxes: u.sandboxes,
      paused: u.paused,
      byBackend: edge.byBackend(),
      fn: edge.fn.load(),
      pools: edge.pools.load(),
    };
  };
  /** Each admitted before the next (Edge.create admits before its first await), made side by side. */
  const makeAll = async (specs: EdgeSandboxSpec[], files?: EdgeFile[]): Promise<CreateOutcome[]> => {
    const made = await Promise.allSettled(
      specs.map(async (spec) => {
        await edge.create(copy(spec), files);
        return (await edge.states({ ids: [spec.id] }))[0] ?? gone(spec.id);
      }),
    );
    return made.map((r): CreateOutcome => (r.status === 'fulfilled' ? { state: r.value } : failed(r.reason)));
  };
  return {
    info: async () => ({
      nodeId: edge.nodeId,
      boot: edge.boot,
      capacity: edge.capacity(),
      networking: edge.networks.enabled,
      endpoints: edge.networks.endpointNames(),
      maxFileBytes: edge.maxFileBytes,
      backends: edge.backends(),
    }),
    load: (opts = {}) => load(opts.used ?? false),
    admit: async (r) => edge.admit(r),
    create: async (spec, files) => {
      await edge.create(copy(spec), files);
      const st = (await edge.states({ ids: [spec.id] }))[0] ?? gone(spec.id);
      return Object.assign({}, st, { load: await load(false) });
    },
    createMany: async (specs, files) => {
      if (!Array.isArray(specs) || specs.length > MAX_CREATE_MANY)
        throw new WarrenError('invalid_argument', `createMany takes at most ${MAX_CREATE_MANY} sandboxes`);
      return { outcomes: await makeAll(specs, files), load: await load(false) };
    },
    fork: async (sourceId, baseId, specs, o = {}) => {
      if (!Array.isArray(specs) || specs.length === 0 || specs.length > MAX_CREATE_MANY)
        throw new WarrenError('invalid_argument', `a fork makes 1 to ${MAX_CREATE_MANY} sandboxes`);
      // A node with room for none of them, and nowhere else for them to go, pays for no copy:
      // each is refused as createMany refuses it.
      if (!o.alone) {
        try {
          edge.admit(specs[0]!.resources);
        } catch (e) {
          return { outcomes: specs.map(() => failed(e)), load: await load(false) };
        }
      }
      const base = await edge.frozen.freeze(sourceId, baseId);
      const wrong = specs.find((s) => (s.backend ?? base.backend) !== base.backend || s.layers.join('\n') !== base.layers.join('\n'));
      const outcomes = wrong
        ? specs.map((): CreateOutcome => ({ error: { code: 'invalid_argument', message: 'a fork stands on its source’s layers and backend', details: {} } }))
        : await makeAll(specs);
      // Children the node had no room for may stand elsewhere on the base made a layer: made now,
      // before a base no child here stands on goes.
      const full = outcomes.some((x) => 'error' in x && x.error.code === 'resource_exhausted');
      const alone = o.alone && full ? await edge.frozen.alone(base.backend, base.layers).catch(() => undefined) : undefined;
      if (!outcomes.some((x) => 'state' in x)) await edge.frozen.drop(baseId, base.backend);
      return { outcomes, load: await load(false), ...(alone ? { alone } : {}) };
    },
    readLayer: async (digest, part) => {
      const file = o.layers?.localFile(digest, part);
      if (!file) throw new WarrenError('not_found', `layer ${digest} is not on this node's disk`, { digest });
      return createReadStream(file, { highWaterMark: 1 << 20 });
    },
    claim: async (spec, files) => {
      await edge.claim(copy(spec), files);
      return (await edge.states({ ids: [spec.id] }))[0] ?? gone(spec.id);
    },
    adopt: (spec) => edge.adopt(copy(spec)),
    destroy: (id) => edge.destroy(id),
    sandboxes: (q) => edge.states(q),
    setExpiry: async (id, ms) => edge.setExpiry(id, ms),
    pause: (id) => edge.pause(id),
    resume: (id) => edge.resume(id),
    setNetwork: (id, p) => edge.networks.setPolicy(id, p),
    openPort: (id, port) => edge.openPort(id, port),
    commit: (id, opts) => edge.commit(id, opts),
    screen: async (id) => oneChunk(await edge.screen(id)),
    input: (id, events) => edge.input(id, events),
    removeLeftovers: () => edge.removeLeftovers(),

    exec: async (id, req, commandId): Promise<CommandStream> => {
      const cmd = await edge.exec(id, req, commandId);
      return { commandId: cmd.id, pid: cmd.pid, events: commandEvents(cmd, 0) };
    },
    run: async (id, req, commandId) => commandResult(await edge.exec(id, req, commandId)),
    start: async (id, req, commandId) => (await edge.exec(id, req, commandId)).id,
    result: async (id, commandId) => commandResult(edge.command(id, commandId)),
    follow: async (id, commandId, offset) => {
      const cmd = edge.command(id, commandId);
      return { commandId, pid: cmd.pid, events: commandEvents(cmd, offset) };
    },
    hasCommand: async (id, commandId) => edge.hasCommand(id, commandId),
    signal: async (id, commandId, sig) => edge.command(id, commandId).signal(sig),
    resize: async (id, commandId, size) => edge.command(id, commandId).resize(size),
    commands: async (id, o) => edge.commandList(id, o?.finished === true),
    stdin: async (id, commandId, data, eof) => {
      // Answers once the sandbox has taken the bytes (Command.writeStdin): a caller cannot outrun it.
      const cmd = edge.command(id, commandId);
      if (data.length) await cmd.writeStdin(data);
      if (eof) await cmd.closeStdin();
    },
    createSession: (id, p) => edge.createSession(id, p),
    deleteSession: (id, s) => edge.deleteSession(id, s),
    fnCall: (id, spec) => edge.fnCall(id, spec),
    fnRun: async (c) => edge.fn.run(c),
    fnWarm: async (g, size, language) => edge.fn.keepWarm(g, size, language),
    poolsSet: async (pools) => edge.pools.set(pools),
    poolTake: async (id) => edge.pools.take(id),
    leasesSet: async (leases) => {
      if (!Array.isArray(leases) || leases.length > MAX_LEASES_SET || !leases.every(isEdgeLease))
        throw new WarrenError('invalid_argument', `leasesSet takes at most ${MAX_LEASES_SET} leases, each {id, generation, expiresAtMs, onExpiry, ended?}`);
      for (const l of leases) edge.leases.learn(l);
      edge.leases.check();
    },

    readFile: (id, path) => edge.files.read(id, path),
    writeFile: (id, path, body, mode) => edge.files.write(id, path, body as AsyncIterable<Buffer>, mode),
    statPath: (id, path) => edge.files.stat(id, path),
    listDir: (id, path, depth) => edge.files.list(id, path, depth),
    setAttrs: (id, path, prefix, attrs) => edge.files.setAttrs(id, path, prefix, attrs),
    removePath: (id, path, recursive) => edge.files.remove(id, path, recursive),
    makeDir: (id, path) => edge.files.mkdir(id, path),
    movePath: (id, from, to) => edge.files.move(id, from, to),
    putArchive: (id, dir, body) => edge.files.putArchive(id, dir, body as AsyncIterable<Buffer>),
    getArchive: (id, dir) => edge.files.getArchive(id, dir),

    layersInUse: async () => [...edge.layersInUse()],
    forgetLayers: (digests) => edge.forgetLayers(digests),
    networkMetrics: () => edge.networks.metrics(),
    sweep: async () => {
      await edge.sweepNow();
      return { lastEventSeq: edge.events.last };
    },
    events: (after) => {
      // "From now on" means from this call, not from the first read.
      const from = after ?? edge.events.last;
      return pushIterable<EdgeEvent>((push) => edge.events.subscribe(push, from));
    },
    close: (opts) => edge.close(opts),
  };
}

/** Bytes already whole, as a body. */
async function* oneChunk(b: Buffer): AsyncGenerator<Buffer> {
  yield b;
}
