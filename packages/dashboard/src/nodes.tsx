import { useEffect, useState } from 'preact/hooks';
import type { MetricsHistoryResponse } from '@warren/api';
import type { Charts as ChartsView } from './charts.js';
import { ApiError, call, type Node } from './api.js';
import { ago } from './format.js';

/** The nodes: state, backends, capacity, what is committed and really used, sandboxes by backend; drain and ready (admin). */
export function Nodes() {
  const [nodes, setNodes] = useState<Node[] | null>(null);
  const [history, setHistory] = useState<MetricsHistoryResponse | null>(null);
  const [Charts, setCharts] = useState<typeof ChartsView | null>(null);
  useEffect(() => {
    import('./charts.js').then(
      (m) => setCharts(() => m.Charts),
      () => undefined,
    );
  }, []);
  const [error, setError] = useState<string | null>(null);
  const load = async (): Promise<void> => {
    try {
      setNodes((await call<{ nodes: Node[] }>('GET', '/v1/nodes')).nodes);
      setHistory(await call<MetricsHistoryResponse>('GET', '/v1/metrics/history'));
      setError(null);
    } catch (e) {
      setError(e instanceof ApiError && e.code === 'permission_denied' ? 'Nodes are shown to an admin key only.' : (e as Error).message);
    }
  };
  useEffect(() => {
    void load();
    const t = setInterval(() => void load(), 5000);
    return () => clearInterval(t);
  }, []);
  const act = async (id: string, what: 'drain' | 'ready'): Promise<void> => {
    try {
      await call('POST', `/v1/nodes/${encodeURIComponent(id)}/${what}`);
      await load();
    } catch (e) {
      setError((e as Error).message);
    }
  };
  return (
    <section>
      <h2>Nodes</h2>
      {error && (
        <p class="error" role="alert">
          {error}
        </p>
      )}
      {history && Charts && (
        <section class="history">
          <h3>The last hour (this replica's samples, every {history.intervalSeconds} s)</h3>
          {history.points.length < 2 ? <p class="sub">Not enough samples yet.</p> : <Charts points={history.points} />}
        </section>
      )}
      {nodes && (
        <table class="nodes">
          <thead>
            <tr>
              <th>Node</th>
              <th>State</th>
              <th>Backends</th>
              <th>Sandboxes</th>
              <th>CPU committed / used / capacity</th>
              <th>Memory committed / used / capacity</th>
              <th>FnCall workers</th>
              <th>Heartbeat</th>
              <th />
            </tr>
          </thead>
          <tbody>
            {nodes.map((n) => (
              <tr key={n.id} data-node={n.id}>
                <td>
                  {n.id}
                  <div class="sub">{n.address}</div>
                </td>
                <td>{n.state}</td>
                <td>{n.backends.join(', ')}</td>
                <td>
                  {n.sandboxes} ({n.paused} paused)
                  <div class="sub">
                    {Object.entries(n.byBackend)
                      .map(([b, c]) => `${b} ${c.sandboxes}/${c.paused}`)
                      .join(' · ')}
                  </div>
                </td>
                <td>
                  {n.committed.cpu} / {n.used.cpu} / {n.capacity.cpu}
                </td>
                <td>
                  {n.committed.memoryMiB} / {n.used.memoryMiB} / {n.capacity.memoryMiB} MiB
                  {n.used.swapMiB > 0 && <div class="sub">{n.used.swapMiB} MiB in swap</div>}
                </td>
                <td>
                  {n.fn.workers} ({n.fn.busy} busy, {n.fn.queued} queued)
                </td>
                <td>{ago(n.lastHeartbeatAt)}</td>
                <td>
                  {n.state === 'draining' ? (
                    <button onClick={() => void act(n.id, 'ready')}>Ready</button>
                  ) : (
                    <button onClick={() => void act(n.id, 'drain')}>Drain</button>
                  )}
                </td>
              </tr>
            ))}
          </tbody>
        </table>
      )}
    </section>
  );
}
