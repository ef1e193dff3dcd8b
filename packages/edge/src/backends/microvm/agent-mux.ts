import { connect, type Socket } from 'node:net';
import { Duplex } from 'node:stream';
import { WarrenError, parseIpv4 } from '@warren/api';
import type { AgentConnect } from '../../init/call.js';
import { ByteQueue } from '../../util/byte-queue.js';

/**
 * The host's end of a microVM's agent mux (the guest's is native/vm/mux.c): one connection to
 * QEMU's socket for the virtio-serial port carries every connection the edge makes to the
 * guest's init. Frames: type (1 byte), stream (4, big-endian), length (4, big-endian), payload.
 * Each side sends DATA on a stream only within the credit the other granted: WINDOW at the open,
 * then CREDIT frames as the reader consumes, so one stream nobody reads holds back itself only.
 */
export const MUX = { OPEN: 1, DATA: 2, EOF: 3, CLOSE: 4, CREDIT: 5, HELLO: 6, EXPORT: 7, RECLAIM: 8 } as const;
export const MUX_HEADER = 9;
export const MUX_WINDOW = 256 * 1024;
export const MUX_MAX_PAYLOAD = 64 * 1024;
/** Streams open at once (the guest's table). */
export const MUX_MAX_STREAMS = 1024;

/** One frame's bytes (pure). */
export function muxFrame(type: number, id: number, payload: Buffer = Buffer.alloc(0)): Buffer {
  const h = Buffer.allocUnsafe(MUX_HEADER + payload.length);
  h[0] = type;
  h.writeUInt32BE(id, 1);
  h.writeUInt32BE(payload.length, 5);
  payload.copy(h, MUX_HEADER);
  return h;
}

/** Bytes of randomness a HELLO hands the guest's kernel. */
export const MUX_SEED = 32;

/**
 * A guest's link as a HELLO gives it (eth0): its IPv4 address, prefix length and default
 * gateway, and the /etc/resolv.conf the guest writes when the address is new to it.
 */
export interface MuxLink {
  address: string;
  prefix: number;
  gateway: string;
  resolvConf: Buffer;
}

/** Bytes of a HELLO's link field. */
export const MUX_LINK = 9;

/**
 * A HELLO's payload (pure): the host's first frame on each connection tells the guest who and
 * when it now is, since a guest cloned from a snapshot or restored from a save has another's or
 * an old clock, hostname, address and kernel random state (native/vm/vm.h): the wall clock in ns
 * (8 bytes, big-endian), MUX_SEED bytes of randomness, its link (address, prefix length, gateway;
 * zeros: none), its resolv.conf (2 bytes of length, then the bytes), the hostname.
 */
export function muxHello(nowNs: bigint, seed: Buffer, hostname: string, link: MuxLink | null = null): Buffer {
  if (seed.length !== MUX_SEED) throw new Error(`a HELLO's seed is ${MUX_SEED} bytes`);
  const name = Buffer.from(hostname);
  if (name.length > 64) throw new Error(`hostname too long: ${hostname}`);
  const conf = link?.resolvConf ?? Buffer.alloc(0);
  if (conf.length > 4096) throw new Error(`a resolv.conf of ${conf.length} bytes`);
  const b = Buffer.alloc(8 + MUX_SEED + MUX_LINK + 2 + conf.length + name.length);
  b.writeBigUInt64BE(nowNs, 0);
  seed.copy(b, 8);
  if (link) {
    if (!Number.isInteger(link.prefix) || link.prefix < 0 || link.prefix > 32) throw new Error(`bad prefix length ${link.prefix}`);
    ipv4Bytes(link.address).copy(b, 8 + MUX_SEED);
    b[8 + MUX_SEED + 4] = link.prefix;
    ipv4Bytes(link.gateway).copy(b, 8 + MUX_SEED + 5);
  }
  b.writeUInt16BE(conf.length, 8 + MUX_SEED + MUX_LINK);
  conf.copy(b, 8 + MUX_SEED + MUX_LINK + 2);
  name.copy(b, 8 + MUX_SEED + MUX_LINK + 2 + conf.length);
  return b;
}

function ipv4Bytes(a: string): Buffer {
  const n = parseIpv4(a);
  if (n === null) throw new Error(`not an IPv4 address: ${a}`);
  const b = Buffer.alloc(4);
  b.writeUInt32BE(n >>> 0);
  return b;
}

/**
 * Splits bytes into frames, keeping a partial one for the next chunk (pure). The chunks are kept
 * as they come and a frame joined once (ByteQueue): a guest that feeds a frame a byte at a time
 * costs no more than one that sends it whole.
 */
export class MuxDecoder {
  private readonly held = new ByteQueue();
  private head: { type: number; id: number; len: number } | null = null;

  push(chunk: Buffer): Array<{ type: number; id: number; payload: Buffer }> {
    this.held.push(chunk);
    const out: Array<{ type: number; id: number; payload: Buffer }> = [];
    for (;;) {
      if (!this.head) {
        if (this.held.length < MUX_HEADER) break;
        // Read in place: a guest that sends a byte per frame makes this the hot path.
        const q = this.held;
        const u32 = (i: number): number => ((q.at(i) << 24) | (q.at(i + 1) << 16) | (q.at(i + 2) << 8) | q.at(i + 3)) >>> 0;
        const len = u32(5);
        if (len > MUX_MAX_PAYLOAD) throw new WarrenError('internal', `the microVM's agent sent a frame of ${len} bytes`);
        this.head = { type: q.at(0), id: u32(1), len };
        q.skip(MUX_HEADER);
      }
      if (this.held.length < this.head.len) break;
      out.push({ type: this.head.type, id: this.head.id, payload: this.held.take(this.head.len) });
      this.head = null;
    }
    return out;
  }
}

/** One stream as a Duplex: what the InitCall over it reads and writes. */
class MuxStream extends Duplex {
  /** Bytes the guest lets us send. */
  credit = MUX_WINDOW;
  /** Bytes handed to our consumer and not yet granted back to the guest. */
  private consumed = 0;
  /** Bytes the guest may still send (what we granted and it has not used). */
  private allowed = MUX_WINDOW;
  /**
   * What the guest sent and the consumer has not asked for yet, joined (ByteQueue): a guest that
   * sends a byte per frame costs a byte per byte here, not an object each.
   */
  private readonly inbox = new ByteQueue();
  /** The consumer asked for more (_read) and got nothing yet. */
  private wanted = false;
  private inputEnded = false;
  private endPushed = false;
  private waiting: { chunk: Buffer; done: (e?: Error | null) => void } | null = null;

  constructor(
    readonly id: number,
    private readonly mux: AgentMux,
  ) {
    super({ allowHalfOpen: true });
  }

  /**
   * Bytes from the guest; false when they are past the credit it was granted (a guest that
   * breaks the protocol: the stream is ended rather than buffered without bound).
   */
  deliver(payload: Buffer): boolean {
    if (this.inputEnded) return true;
    if (payload.length > this.allowed) return false;
    this.allowed -= payload.length;
    this.inbox.push(payload);
    if (this.wanted) this.handOn();
    return true;
  }

  /** The guest sent its last byte (EOF or CLOSE): the consumer's end comes after what is held. */
  endInput(): void {
    this.inputEnded = true;
    if (this.wanted || this.inbox.length === 0) this.handOn();
  }

  /** Gives the consumer what is held (one chunk), and the end once all is given. */
  private handOn(): void {
    this.wanted = false;
    const n = this.inbox.length;
    if (n) {
      this.consumed += n;
      this.push(this.inbox.take(n));
    }
    if (this.inputEnded && !this.endPushed) {
      this.endPushed = true;
      this.push(null);
    }
  }

  override _read(): void {
    if (this.consumed > 0) {
      const grant = Buffer.allocUnsafe(4);
      grant.writeUInt32BE(this.consumed);
      this.allowed += this.consumed;
      this.consumed = 0;
      this.mux.send(MUX.CREDIT, this.id, grant);
    }
    if (this.inbox.length || this.inputEnded) this.handOn();
    else this.wanted = true;
  }

  override _write(chunk: Buffer, _enc: BufferEncoding, done: (e?: Error | null) => void): void {
    this.waiting = { chunk, done };
    this.flush();
  }

  /** Sends what credit allows of the waiting chunk (again when credit comes). */
  flush(): void {
    const w = this.waiting;
    if (!w) return;
    while (w.chunk.length && this.credit > 0) {
      const n = Math.min(w.chunk.length, this.credit, MUX_MAX_PAYLOAD);
      this.mux.send(MUX.DATA, this.id, w.chunk.subarray(0, n));
      this.credit -= n;
      w.chunk = w.chunk.subarray(n);
    }
    if (!w.chunk.length) {
      this.waiting = null;
      w.done();
    }
  }

  override _final(done: (e?: Error | null) => void): void {
    this.mux.send(MUX.EOF, this.id);
    done();
  }

  override _destroy(e: Error | null, done: (e?: Error | null) => void): void {
    this.mux.closed(this, true);
    const w = this.waiting;
    this.waiting = null;
    w?.done(e ?? new Error('stream closed'));
    done(e);
  }
}

/**
 * The edge's connection to one microVM's agent port: `connect` answers a new stream to the
 * guest's init (an AgentConnect, as a container's Unix socket gives).
 */
export class AgentMux {
  private socket: Socket | null = null;
  private opening: Promise<Socket> | null = null;
  private readonly streams = new Map<number, MuxStream>();
  private nextId = 1;

  /** `hello`: the payload of the HELLO each new connection starts with (see muxHello). */
  constructor(
    private readonly socketPath: string,
    private readonly hello: () => Buffer,
  ) {}

  readonly connect: AgentConnect = () => this.stream(MUX.OPEN);

  /**
   * A stream of the guest's writable layer as a layer tar (EXPORT, native/vm/vm.h): its file
   * system frozen while it is read, ended by the tar's end marker (none: the guest failed).
   */
  exportLayer(): Promise<Duplex> {
    return this.stream(MUX.EXPORT);
  }

  /**
   * Asks the guest to give its caches back (RECLAIM, native/vm/vm.h: dirty pages written, page
   * and slab caches dropped, the freed pages zero) before the host pages it out; true once it
   * answered, false when it did not within `timeoutMs` (a guest is trusted with nothing: the
   * page-out goes ahead either way).
   */
  async reclaim(timeoutMs: number): Promise<boolean> {
    const s = await this.stream(MUX.RECLAIM);
    s.on('error', () => undefined);
    s.resume();
    let timer: NodeJS.Timeout | undefined;
    try {
      return await new Promise<boolean>((resolve) => {
        timer = setTimeout(() => resolve(false), timeoutMs);
        // Its CLOSE ends the stream's input; a guest gone destroys it without.
        s.once('end', () => resolve(true));
        s.once('close', () => resolve(false));
      });
    } finally {
      clearTimeout(timer);
      s.destroy();
    }
  }

  private async stream(open: number): Promise<Duplex> {
    const socket = await this.open();
    if (this.streams.size >= MUX_MAX_STREAMS) throw new WarrenError('resource_exhausted', `a microVM's agent has ${MUX_MAX_STREAMS} connections open`);
    const id = this.nextId;
    this.nextId = this.nextId >= 0x7fffffff ? 1 : this.nextId + 1;
    const s = new MuxStream(id, this);
    this.streams.set(id, s);
    socket.write(muxFrame(open, id));
    return s;
  }

  send(type: number, id: number, payload?: Buffer): void {
    this.socket?.write(muxFrame(type, id, payload));
  }

  /** A stream is done: forget it (and tell the guest when it ended here). */
  closed(s: MuxStream, tell: boolean): void {
    if (this.streams.get(s.id) !== s) return;
    this.streams.delete(s.id);
    if (tell) this.send(MUX.CLOSE, s.id);
  }

  /**
   * Ends every stream and the connection (the guest ends its side of them at the next
   * connection's HELLO: also one saved or restored meanwhile).
   */
  close(): void {
    const socket = this.socket;
    this.socket = null;
    this.opening = null;
    for (const s of [...this.streams.values()]) s.destroy(new WarrenError('unavailable', 'the microVM is gone'));
    socket?.destroy();
  }

  private open(): Promise<Socket> {
    if (this.socket) return Promise.resolve(this.socket);
    this.opening ??= new Promise<Socket>((resolve, reject) => {
      const socket = connect(this.socketPath);
      const decoder = new MuxDecoder();
      socket.once('error', (e) => {
        if (this.socket !== socket) {
          this.opening = null;
          reject(new WarrenError('unavailable', "the microVM's agent is not reachable", {}, { cause: e }));
        }
      });
      socket.once('connect', () => {
        socket.write(muxFrame(MUX.HELLO, 0, this.hello()));
        this.socket = socket;
        socket.on('error', () => undefined);
        resolve(socket);
      });
      socket.on('data', (chunk: Buffer) => {
        let frames;
        try {
          frames = decoder.push(chunk);
        } catch {
          if (this.socket === socket) this.close();
          return;
        }
        for (const f of frames) this.onFrame(f.type, f.id, f.payload);
      });
      socket.once('close', () => {
        if (this.socket === socket) this.close();
      });
    });
    return this.opening;
  }

  private onFrame(type: number, id: number, payload: Buffer): void {
    const s = this.streams.get(id);
    if (!s) return;
    if (type === MUX.DATA) {
      if (!s.readableEnded && !s.deliver(payload))
        s.destroy(new WarrenError('unavailable', "the microVM's agent sent more than it was allowed on a connection"));
    } else if (type === MUX.EOF) s.endInput();
    else if (type === MUX.CREDIT && payload.length === 4) {
      s.credit += payload.readUInt32BE(0);
      s.flush();
    } else if (type === MUX.CLOSE) {
      // The guest is done with it: what it sent is read first, then the stream goes.
      this.closed(s, false);
      s.endInput();
      if (s.readableEnded) s.destroy();
      else s.once('end', () => s.destroy());
    }
  }
}
