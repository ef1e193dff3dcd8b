import type { EdgeSandboxSpec, EdgeSandboxState } from '../lifecycle/edge-spec.js';
import type { EdgeEvent } from '../lifecycle/events.js';
import type { EdgeLease } from '../lifecycle/leases.js';
import type { CreateOutcome, EdgeApi } from './edge-api.js';

/** A kept sample gives way to the next one once it is this old (ms): a clock stepped on the edge's host is followed within it. */
export const CLOCK_SAMPLE_AGE_MS = 30_000;

/**
 * How far an edge's wall clock is ahead of the caller's, as the edge protocol measures it: each
 * answer carries the edge's clock when it answered, taken to be halfway through the call's round
 * trip (so the estimate is right within half the round trip). The sample of the shortest round
 * trip is kept, until it is CLOCK_SAMPLE_AGE_MS old. An offset within that uncertainty is no
 * offset: two processes on one clock never see one.
 */
export class ClockOffset {
  private kept: { offsetMs: number; rttMs: number; atMs: number } | null = null;

  /** A call sent at `sentMs` and answered at `receivedMs` (the caller's clock), the edge's clock reading `edgeMs` in between. */
  sample(sentMs: number, edgeMs: number, receivedMs: number): void {
    const rttMs = Math.max(0, receivedMs - sentMs);
    const raw = edgeMs - (sentMs + receivedMs) / 2;
    const offsetMs = Math.abs(raw) <= rttMs / 2 ? 0 : Math.round(raw);
    const k = this.kept;
    if (!k || rttMs <= k.rttMs || receivedMs - k.atMs > CLOCK_SAMPLE_AGE_MS) this.kept = { offsetMs, rttMs, atMs: receivedMs };
  }

  /** Ms the edge's clock is ahead (negative: behind); null before the first answer. */
  get offsetMs(): number | null {
    return this.kept?.offsetMs ?? null;
  }
}

const at = (ms: number | null, d: number): number | null => (ms === null ? null : ms + d);

/** A lease's deadline moved by `d` ms. */
const shiftLease = (l: EdgeLease, d: number): EdgeLease => (d === 0 ? l : { ...l, expiresAtMs: l.expiresAtMs + d });

/** A spec's wall-clock times moved by `d` ms. */
export const shiftSpec = (s: EdgeSandboxSpec, d: number): EdgeSandboxSpec =>
  d === 0 ? s : { ...s, lastActivityMs: s.lastActivityMs + d, expiresAtMs: at(s.expiresAtMs, d), ...(s.lease ? { lease: shiftLease(s.lease, d) } : {}) };

/** A sandbox state's wall-clock times moved by `d` ms. */
export const shiftState = <T extends EdgeSandboxState>(s: T, d: number): T =>
  d === 0 ? s : { ...s, lastActivityMs: s.lastActivityMs + d, expiresAtMs: at(s.expiresAtMs, d) };

/** An event's wall-clock time (a state's expiry) moved by `d` ms. */
export const shiftEvent = (e: EdgeEvent, d: number): EdgeEvent => (d === 0 || e.type !== 'state' ? e : { ...e, expiresAtMs: at(e.expiresAtMs, d) });

type Shift = { args?: (a: unknown[], d: number) => unknown[]; result?: (r: unknown, d: number) => unknown };

/**
 * The calls that carry wall-clock times (lifetimes, last activity), and how to move them: the
 * arguments by the edge's offset on the way there, the answer back by minus it. An EdgeApi's times
 * are on its caller's clock; the edge runs them on its own (events: shiftEvent).
 */
export const CLOCKED: Partial<Record<keyof EdgeApi, Shift>> = {
  create: {
    args: ([spec, ...rest], d) => [shiftSpec(spec as EdgeSandboxSpec, d), ...rest],
    result: (r, d) => shiftState(r as EdgeSandboxState, d),
  },
  createMany: {
    args: ([specs, ...rest], d) => [(specs as EdgeSandboxSpec[]).map((s) => shiftSpec(s, d)), ...rest],
    result: (r, d) => {
      const m = r as { outcomes: CreateOutcome[] };
      return { ...m, outcomes: m.outcomes.map((o) => ('state' in o ? { state: shiftState(o.state, d) } : o)) };
    },
  },
  fork: {
    args: ([source, base, specs, o], d) => [source, base, (specs as EdgeSandboxSpec[]).map((s) => shiftSpec(s, d)), o],
    result: (r, d) => {
      const m = r as { outcomes: CreateOutcome[] };
      return { ...m, outcomes: m.outcomes.map((o) => ('state' in o ? { state: shiftState(o.state, d) } : o)) };
    },
  },
  claim: {
    args: ([spec, ...rest], d) => [shiftSpec(spec as EdgeSandboxSpec, d), ...rest],
    result: (r, d) => shiftState(r as EdgeSandboxState, d),
  },
  adopt: { args: ([spec], d) => [shiftSpec(spec as EdgeSandboxSpec, d)] },
  setExpiry: { args: ([id, ms], d) => [id, at(ms as number | null, d)] },
  leasesSet: { args: ([ls], d) => [(ls as EdgeLease[]).map((l) => shiftLease(l, d))] },
  sandboxes: { result: (r, d) => (r as EdgeSandboxState[]).map((s) => shiftState(s, d)) },
};
