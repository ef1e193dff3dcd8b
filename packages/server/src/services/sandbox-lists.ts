import { WarrenError, type ListSandboxesQuery, type ListSandboxesResponse, type Sandbox } from '@warren/api';
import type { EdgeSandboxState } from '@warren/edge';
import type { Cluster } from '../cluster/cluster.js';
import { within } from '../cluster/within.js';
import type { SandboxRecord, Store } from '../store/store.js';
import { sandboxView, shownState } from './sandbox-view.js';
import type { Caller, SandboxServiceOptions } from './sandboxes.js';

/** Lists of sandboxes: their records from the store, their live state from their nodes (one call per node). */
export class SandboxLists {
  constructor(
    private readonly store: Store,
    private readonly cluster: Cluster,
    private readonly o: Pick<SandboxServiceOptions, 'listTimeoutMs'>,
    /** Rows read from the store at a time when a page is filtered by live state. */
    private readonly scanRows = 1000,
  ) {}

  /**
   * The edges' live state of these sandboxes, one call per node; a node that is down or does
   * not answer leaves its sandboxes as their records say (a list never fails for one node).
   */
  async liveStates(recs: SandboxRecord[], usage = false): Promise<Map<string, EdgeSandboxState>> {
    const byNode = new Map<string, string[]>();
    for (const r of recs) {
      if (r.state !== 'running' && r.state !== 'paused' && r.state !== 'creating') continue;
      const ids = byNode.get(r.node) ?? [];
      ids.push(r.id);
      byNode.set(r.node, ids);
    }
    const out = new Map<string, EdgeSandboxState>();
    await Promise.all(
      [...byNode].map(async ([node, ids]) => {
        try {
          const edge = this.cluster.edge(node);
          for (const st of await within(this.o.listTimeoutMs ?? 3000, `node ${node}`, edge.sandboxes({ ids, usage }), this.cluster.goneSignal(node)))
            out.set(st.id, st);
        } catch (e) {
          if (!(e instanceof WarrenError) || (e.code !== 'unavailable' && e.code !== 'not_found')) throw e;
        }
      }),
    );
    return out;
  }

  async list(caller: Caller, q: ListSandboxesQuery): Promise<ListSandboxesResponse> {
    const limit = q.limit ?? 100;
    const labels = (q.label ?? []).map((l) => {
      const i = l.indexOf('=');
      return [l.slice(0, i), l.slice(i + 1)] as [string, string];
    });
    let after: string | undefined;
    if (q.cursor) {
      after = Buffer.from(q.cursor, 'base64url').toString();
      if (!/^sb_[0-9a-z]+$/.test(after)) throw new WarrenError('invalid_argument', 'bad cursor');
    }
    // Live state comes from the edge, so a state filter on running/paused is applied after
    // reading: the rows are read a chunk at a time until the page is full (or none are left).
    const derived = q.state === 'running' || q.state === 'paused';
    const chunk = derived ? Math.max(limit + 1, this.scanRows) : limit + 1;
    const page: SandboxRecord[] = [];
    let more = false;
    for (;;) {
      const rows = await this.store.listSandboxes({
        tenant: caller.tenant,
        labels,
        lease: q.lease,
        image: q.image,
        state: derived ? undefined : q.state,
        limit: chunk,
        after,
      });
      // Which rows are live, and how (one call per node); then their usage for the page only (another).
      const live = await this.liveStates(rows);
      for (const r of rows) {
        if (q.state && shownState(r, live.get(r.id) ?? null) !== q.state) continue;
        if (page.length === limit) {
          more = true;
          break;
        }
        page.push(r);
      }
      if (more || rows.length < chunk) break;
      after = rows[rows.length - 1]!.id;
    }
    const used = await this.liveStates(page, true);
    const out = page.map((r) => sandboxView(r, used.get(r.id) ?? null));
    const last = out[out.length - 1];
    return { sandboxes: out, nextCursor: more && last ? Buffer.from(last.id).toString('base64url') : null };
  }

  /**
   * A page of the caller's running and paused sandboxes (with these labels) by creation, oldest or
   * newest first, after or before a sandbox id: what E2B's list pages through. Their state as the
   * edge knows it (a sandbox paused for idleness is paused); no usage.
   */
  async listLive(caller: Caller, q: { labels: Array<[string, string]>; order: 'asc' | 'desc'; from?: string; limit: number }): Promise<Sandbox[]> {
    const rows = await this.store.listSandboxes({
      tenant: caller.tenant,
      labels: q.labels,
      states: ['running', 'paused'],
      order: q.order,
      ...(q.from ? (q.order === 'desc' ? { before: q.from } : { after: q.from }) : {}),
      limit: q.limit,
    });
    const live = await this.liveStates(rows);
    return rows.map((r) => sandboxView(r, live.get(r.id) ?? null));
  }
}
