import { END_BY, WarrenError } from '@warren/api';
import type { Cluster } from '../cluster/cluster.js';
import { endNow, type SandboxEndRecord, type SandboxRecord, type Store } from '../store/store.js';
import { GroupWrite } from './group-write.js';
import type { Caller, SandboxServiceOptions } from './sandboxes.js';

/**
 * How sandboxes end: a delete, a TTL or idle timeout, a death on the node. The end is recorded
 * first (one write), then what is left on the node is removed: a crash in between leaves a record
 * that no restart takes back (only live states are adopted; what is left of it is removed then).
 */
export class SandboxEnds {
  /** Last activity times of ended sandboxes, written together (a delete waits for nothing). */
  private readonly activity: GroupWrite<{ id: string; at: number }, void>;

  constructor(
    private readonly store: Store,
    private readonly cluster: Cluster,
    private readonly o: Pick<SandboxServiceOptions, 'logger' | 'failpoint'> & {
      freed: () => void;
      /** Told of each end recorded (lifecycle events). */
      ended?: (rec: SandboxRecord, end: SandboxEndRecord) => void;
      /** Told of each sandbox whose end the store holds after a write here (it may have ended before, on another replica). */
      recorded?: (id: string) => void;
    },
  ) {
    this.activity = new GroupWrite<{ id: string; at: number }, void>(async (entries) => {
      await store.setActivity(entries);
      return entries.map(() => ({ status: 'fulfilled', value: undefined }));
    });
  }

  /** Ends the caller's sandbox (its ownership checked in the same write); idempotent for one that already ended. `reason`: deleted, or its lease's end. */
  async delete(caller: Caller, id: string, reason: 'deleted' | 'lease' = 'deleted'): Promise<void> {
    const end = endNow(reason);
    const rec = await this.store.endSandbox(id, { state: 'stopped', error: null, end }, caller.role === 'admin' ? {} : { tenant: caller.tenant });
    if (rec) this.o.recorded?.(id);
    if (rec && (rec.state === 'creating' || rec.state === 'running' || rec.state === 'paused')) this.o.ended?.(rec, end);
    if (!rec) throw new WarrenError('not_found', `sandbox ${id} does not exist`, { id });
    this.o.failpoint?.('delete:stored');
    await this.remove(id, rec);
  }

  /** Called by the edge when a TTL or idle timeout passes. */
  expire(id: string, reason: 'ttl' | 'idle'): Promise<void> {
    this.o.logger.info('sandbox expired', { id, reason });
    return this.ended(id, 'stopped', null, endNow(reason), 'expire failed');
  }

  /** Called by the edge when a sandbox's processes died under it: by the OOM killer at its own limit, or otherwise. */
  died(id: string, why: { reason?: 'exited' | 'oom'; detail?: string } = {}): Promise<void> {
    const detail = why.detail ?? 'its init exited or was killed';
    return this.ended(
      id,
      'failed',
      { code: 'unavailable', message: `the sandbox stopped on its own (${detail})` },
      endNow(why.reason ?? 'exited', detail),
      'cleanup of a dead sandbox failed',
    );
  }

  /**
   * An edge's event ends a sandbox: resolves once the end is recorded; its removal goes on
   * meanwhile (a burst of expiries is removed side by side, not one after another).
   */
  private async ended(id: string, state: 'stopped' | 'failed', error: SandboxRecord['error'], end: SandboxEndRecord, what: string): Promise<void> {
    const warn = (e: unknown): void => this.o.logger.warn(what, { id, error: String(e) });
    const rec = await this.store
      .endSandbox(id, { state, error, end })
      .then((r) => {
        this.o.failpoint?.('delete:stored');
        if (r) this.o.recorded?.(id);
        if (r && (r.state === 'creating' || r.state === 'running' || r.state === 'paused')) this.o.ended?.(r, end);
        return r;
      })
      .catch((e: unknown) => {
        warn(e);
        return undefined;
      });
    void this.remove(id, rec).catch(warn);
  }

  /**
   * Removes what is left of a sandbox whose end is recorded, keeping its last activity time. On
   * a node that is down nothing can be: its reconcile removes it when the node joins again.
   */
  private async remove(id: string, rec: SandboxRecord | undefined): Promise<void> {
    // A sandbox still being made is the create's to remove (it sees the record has ended).
    if (rec && this.cluster.up().some((n) => n.id === rec.node)) {
      const edge = this.cluster.edge(rec.node);
      const [live] = await edge.sandboxes({ ids: [id] });
      if (live) {
        // Its last activity is kept (written with other ends'), while it is destroyed.
        const kept =
          rec.lastActivityAt === live.lastActivityMs
            ? undefined
            : this.activity
                .add({ id, at: live.lastActivityMs })
                .catch((e: unknown) => this.o.logger.warn('the last activity of an ended sandbox was not kept', { id, error: String(e) }));
        await edge.destroy(id);
        await kept;
      }
    }
    // Its room may be what a waiting create needs.
    this.o.freed();
  }
}

/**
 * Ends the sandboxes a node stopped without keeping them (`warren down`): each one still live ends
 * as `shutdown`, and its `ended` event (as EventLog.sandbox makes one) is written before this
 * answers: the process is going, and the event log's writes in the background would be lost with
 * it. Answers how many ended.
 */
export async function recordShutdown(store: Store, ids: string[]): Promise<number> {
  const events = [];
  for (const id of ids) {
    const end = endNow('shutdown');
    const rec = await store.endSandbox(id, { state: 'stopped', error: null, end });
    if (!rec || !(rec.state === 'creating' || rec.state === 'running' || rec.state === 'paused')) continue;
    const told = { reason: end.reason, by: END_BY[end.reason], detail: end.detail, at: new Date(end.at).toISOString() };
    events.push({ tenant: rec.tenant, type: 'ended', data: { sandbox: rec.id, labels: rec.labels, lease: rec.lease ?? null, end: told } });
  }
  if (events.length) await store.events.append(events);
  return events.length;
}
