import type {
  CommandInfo,
  CreateSandboxRequest,
  ExecEvent,
  ExecRequest,
  ExecResult,
  FileEntry,
  ForkRequest,
  Image,
  InputEvent,
  KillRequest,
  LifecycleEvent,
  NetworkPolicy,
  Sandbox as SandboxInfo,
} from '@warren/api';
import { ROUTES, WarrenError } from '@warren/api';
import { ndjson, type Transport } from './transport.js';
import { Terminal } from './terminal.js';
import { Turns } from './turns.js';
import { endedOr } from './sandbox-ended.js';

export type ExecOptions = Omit<ExecRequest, 'cmd'>;

/** A handle on one sandbox. Any handle made from the same id works the same: state lives on the server. */
export class Sandbox {
  readonly files: SandboxFiles;

  constructor(
    private readonly t: Transport,
    public info: SandboxInfo,
  ) {
    this.files = new SandboxFiles(t, info.id);
  }

  get id(): string {
    return this.info.id;
  }

  /** The path parameters of this sandbox's routes. */
  private at(): { id: string } {
    return { id: this.info.id };
  }

  /** Re-reads the sandbox from the server. */
  async refresh(): Promise<SandboxInfo> {
    this.info = await this.t.json(ROUTES.getSandbox, this.at());
    return this.info;
  }

  /** Replaces the sandbox's network rules; its new connections follow them at once. */
  async setNetwork(policy: NetworkPolicy): Promise<SandboxInfo> {
    this.info = await this.t.json(ROUTES.setNetwork, this.at(), { json: policy });
    return this.info;
  }

  /**
   * Runs a command to completion and returns its output. A command its sandbox's end cut off
   * throws SandboxEndedError (its `end` says why); one that timed out answers `timedOut`.
   */
  async exec(cmd: string | string[], opts: ExecOptions = {}): Promise<ExecResult> {
    try {
      return await this.t.json(ROUTES.exec, this.at(), { json: { cmd, ...opts } });
    } catch (e) {
      throw await endedOr(e, () => this.refresh());
    }
  }

  /**
   * Runs a command and yields its events as they happen (start, stdout, stderr, exit). A command
   * its sandbox's end cut off throws SandboxEndedError after its last output.
   */
  async *execStream(cmd: string | string[], opts: ExecOptions & { signal?: AbortSignal } = {}): AsyncGenerator<ExecEvent> {
    const { signal, ...rest } = opts;
    const res = await this.t.request(ROUTES.exec, this.at(), { json: { cmd, ...rest }, accept: 'application/x-ndjson', signal });
    for await (const ev of ndjson<ExecEvent>(res)) {
      if (ev.type === 'error' && ev.error.code === 'unavailable') throw await endedOr(new WarrenError('unavailable', ev.error.message), () => this.refresh());
      yield ev;
    }
  }

  /** Re-attaches to a command from a byte offset of its output. */
  async *attach(commandId: string, offset = 0, signal?: AbortSignal): AsyncGenerator<ExecEvent> {
    const res = await this.t.request(
      ROUTES.commandOutput,
      { id: this.id, commandId },
      {
        query: { offset },
        accept: 'application/x-ndjson',
        signal,
      },
    );
    yield* ndjson<ExecEvent>(res);
  }

  /** Signals a command and its process tree (SIGTERM unless told). */
  async kill(commandId: string, signal: NonNullable<KillRequest['signal']> = 'SIGTERM'): Promise<void> {
    await this.t.empty(ROUTES.killCommand, { id: this.id, commandId }, { json: { signal } });
  }

  async writeStdin(commandId: string, data: string | Uint8Array, eof = false): Promise<void> {
    await this.t.empty(ROUTES.commandStdin, { id: this.id, commandId }, { body: data, query: eof ? { eof: '1' } : undefined });
  }

  /**
   * Turns this sandbox's writable layer (minus `exclude` paths and the platform's residues) into a
   * new layer over its current ones: the image `name`. The sandbox is frozen meanwhile and runs on.
   */
  async commit(name: string, opts: { exclude?: string[] } = {}): Promise<Image> {
    return this.t.json(ROUTES.commit, this.at(), { json: { name, exclude: opts.exclude } });
  }

  /**
   * Forks this sandbox into `count` (default 1) new ones with its filesystem state now (a
   * microVM's memory too: its processes run on in each; a container's commands start fresh in
   * each). It may be running or paused and runs on. Children that could not be made are in
   * `errors`, not thrown.
   * @example
   * const { sandboxes } = await sb.fork({ count: 8, labels: { job: 'grpo', step: '12' } });
   */
  async fork(opts: ForkRequest = {}): Promise<{ sandboxes: Sandbox[]; errors: Array<{ code: string; message: string }> }> {
    const r = await this.t.json(ROUTES.forkSandbox, this.at(), { json: opts });
    return { sandboxes: r.sandboxes.map((s) => new Sandbox(this.t, s)), errors: r.errors };
  }

  /**
   * Keeps this sandbox's files now as a snapshot that outlives it (frozen meanwhile; it runs on):
   * `sandboxes.create({ snapshot: name })` starts from it with this sandbox's env, user and workdir.
   */
  async snapshot(name?: string): Promise<Image> {
    return this.t.json(ROUTES.createSnapshot, this.at(), { json: name === undefined ? {} : { name } });
  }

  /** Starts a shell session whose cwd, variables and functions persist between commands. */
  async shell(opts: { cwd?: string; env?: Record<string, string>; user?: string } = {}): Promise<Shell> {
    const { sessionId } = await this.t.json(ROUTES.createSession, this.at(), { json: opts });
    return new Shell(this, sessionId);
  }

  async deleteSession(sessionId: string): Promise<void> {
    await this.t.empty(ROUTES.deleteSession, { id: this.id, sessionId });
  }

  async pause(): Promise<void> {
    await this.t.json(ROUTES.pause, this.at());
  }

  /** Opens a login shell on a new terminal of `cols`×`rows` (default 80×24) in the sandbox. */
  async terminal(size: { cols?: number; rows?: number } = {}): Promise<Terminal> {
    const { socket, head, headers } = await this.t.upgrade(ROUTES.pty, this.at(), { cols: size.cols, rows: size.rows });
    return new Terminal(socket, head, String(headers['x-command-id'] ?? ''));
  }

  /** Gives the terminal of a command started with `pty` a new size. */
  async resize(commandId: string, cols: number, rows: number): Promise<void> {
    await this.t.empty(ROUTES.resizeCommand, { id: this.id, commandId }, { json: { cols, rows } });
  }

  /**
   * The commands the sandbox runs now (not those of its shell sessions), oldest first; with
   * `finished`, the finished ones its node keeps too (the newest 100), each with its exit.
   */
  async commands(opts: { finished?: boolean } = {}): Promise<CommandInfo[]> {
    return (await this.t.json(ROUTES.listCommands, this.at(), { query: { finished: opts.finished ? '1' : undefined } })).commands;
  }

  /** Its lifecycle events as kept, oldest first (at most 1,000: read on with `since`, the last seq). */
  async events(opts: { since?: number } = {}): Promise<LifecycleEvent[]> {
    return (await this.t.json(ROUTES.sandboxEvents, this.at(), { query: { since: opts.since } })).events;
  }

  /** A full VM's screen now, as PNG bytes (backend `vm`). */
  async screen(): Promise<Uint8Array> {
    const res = await this.t.request(ROUTES.screen, this.at());
    return new Uint8Array(await res.arrayBuffer());
  }

  /** Keys, text and mouse events to a full VM's display, in order (backend `vm`). */
  async input(events: InputEvent[]): Promise<void> {
    await this.t.empty(ROUTES.input, this.at(), { json: { events } });
  }

  async resume(): Promise<void> {
    await this.t.json(ROUTES.resume, this.at());
  }

  /** Sets the sandbox to expire `ttlSeconds` from now. */
  async setTimeout(ttlSeconds: number): Promise<SandboxInfo> {
    this.info = await this.t.json(ROUTES.setTimeout, this.at(), { json: { ttlSeconds } });
    return this.info;
  }

  /** Stops and removes the sandbox (idempotent). */
  async delete(): Promise<void> {
    await this.t.empty(ROUTES.deleteSandbox, this.at());
  }
}

/**
 * A persistent shell inside a sandbox. Its commands run one at a time in the order they were
 * called (`Promise.all` of many on one shell runs them in the order given): each is sent once the
 * one before it has its place on the server, which queues them. `timeoutMs` counts from a
 * command's start, not from its wait for its turn.
 */
export class Shell {
  private readonly turns = new Turns();

  constructor(
    private readonly sb: Sandbox,
    readonly id: string,
  ) {}

  async exec(cmd: string | string[], opts: Omit<ExecOptions, 'session' | 'stdin' | 'user'> = {}): Promise<ExecResult> {
    const turn = this.turns.take();
    try {
      await turn.ready;
      return await this.sb.exec(cmd, { ...opts, session: this.id });
    } finally {
      turn.done();
    }
  }

  /** Runs a command and yields its events; its place in the order is taken when the stream is first read. */
  async *execStream(cmd: string | string[], opts: Omit<ExecOptions, 'session' | 'stdin' | 'user'> = {}): AsyncGenerator<ExecEvent> {
    const turn = this.turns.take();
    try {
      await turn.ready;
      for await (const ev of this.sb.execStream(cmd, { ...opts, session: this.id })) {
        // The first event says the server has it: the next command may go.
        turn.done();
        yield ev;
      }
    } finally {
      turn.done();
    }
  }

  close(): Promise<void> {
    return this.sb.deleteSession(this.id);
  }
}

/** File operations; every path is inside the sandbox and nothing resolves outside it. */
export class SandboxFiles {
  constructor(
    private readonly t: Transport,
    private readonly id: string,
  ) {}

  /** The path parameters of this sandbox's routes. */
  private at(): { id: string } {
    return { id: this.id };
  }

  async read(path: string): Promise<Uint8Array> {
    return this.t.bytes(ROUTES.readFile, this.at(), { query: { path } });
  }

  async readText(path: string): Promise<string> {
    return new TextDecoder().decode(await this.read(path));
  }

  /** Writes a file, creating its parents. `mode` is numeric, e.g. 0o755. */
  async write(path: string, data: string | Uint8Array, opts: { mode?: number } = {}): Promise<void> {
    await this.t.empty(ROUTES.writeFile, this.at(), {
      query: { path, mode: opts.mode === undefined ? undefined : opts.mode.toString(8).padStart(4, '0') },
      body: data,
    });
  }

  async list(path: string, depth = 1): Promise<FileEntry[]> {
    return (await this.t.json(ROUTES.listFiles, this.at(), { query: { path, depth } })).entries;
  }

  async stat(path: string): Promise<FileEntry> {
    return this.t.json(ROUTES.statFile, this.at(), { query: { path } });
  }

  /** Whether a path exists (a not_found is false; other errors throw). */
  async exists(path: string): Promise<boolean> {
    try {
      await this.stat(path);
      return true;
    } catch (e) {
      if (e instanceof WarrenError && e.code === 'not_found') return false;
      throw e;
    }
  }

  async remove(path: string, opts: { recursive?: boolean } = {}): Promise<void> {
    await this.t.empty(ROUTES.deleteFile, this.at(), { query: { path, recursive: opts.recursive ? '1' : undefined } });
  }

  async mkdir(path: string): Promise<void> {
    await this.t.empty(ROUTES.mkdir, this.at(), { json: { path } });
  }

  async move(from: string, to: string): Promise<void> {
    await this.t.empty(ROUTES.move, this.at(), { json: { from, to } });
  }

  /** Extracts a tar archive into a directory. */
  async putArchive(dir: string, tar: Uint8Array): Promise<void> {
    await this.t.empty(ROUTES.putArchive, this.at(), { query: { path: dir }, body: tar });
  }

  /** A tar archive of a directory. */
  async getArchive(dir: string): Promise<Uint8Array> {
    const res = await this.t.request(ROUTES.getArchive, this.at(), { query: { path: dir } });
    return new Uint8Array(await res.arrayBuffer());
  }
}

export type CreateOptions = CreateSandboxRequest;
