import { useEffect, useMemo, useRef, useState } from 'preact/hooks';
import { call, eachLimit, listSandboxes, sandboxPath, type Sandbox } from './api.js';
import { ago, labelsText, mib, until } from './format.js';
import { go } from './route.js';
import { VirtualRows } from './virtual-rows.js';

type SortKey = 'age' | 'idle' | 'cpu' | 'memory';

const SORTS: Record<SortKey, (a: Sandbox, b: Sandbox) => number> = {
  age: (a, b) => a.createdAt.localeCompare(b.createdAt),
  idle: (a, b) => b.usage.idleSeconds - a.usage.idleSeconds,
  cpu: (a, b) => b.usage.cpuRecent - a.usage.cpuRecent,
  memory: (a, b) => b.usage.memoryBytes - a.usage.memoryBytes,
};

/**
 * What the list is narrowed to: the server filters by label and state, and by image when it came
 * from a link (`exactImage`: the catalogue's "used by"); the page by the rest (an image typed: by part of its name).
 */
interface Filters {
  label: string;
  state: string;
  image: string;
  exactImage: boolean;
  backend: string;
  node: string;
  lease: string;
}

const NONE: Filters = { label: '', state: '', image: '', exactImage: false, backend: '', node: '', lease: '' };

/**
 * Every sandbox the key sees (thousands: the rows drawn are the visible ones), filtered, sorted,
 * each with its expiry and, once ended, its end reason; pause, resume and delete of a selection
 * or of every sandbox with a label.
 */
export function Sandboxes(p: { image?: string }) {
  const start: Filters = p.image ? { ...NONE, image: p.image, exactImage: true } : NONE;
  const [all, setAll] = useState<Sandbox[] | null>(null);
  const [filters, setFilters] = useState<Filters>(start);
  const [applied, setApplied] = useState<Filters>(start);
  const [sort, setSort] = useState<SortKey>('age');
  const [selected, setSelected] = useState<Set<string>>(new Set());
  const [status, setStatus] = useState<{ error: boolean; text: string } | null>(null);
  /** The latest load: an older one still paging (a filter changed meanwhile) shows nothing more. */
  const generation = useRef(0);
  const load = async (f: Filters): Promise<void> => {
    const g = ++generation.current;
    const show = (rows: Sandbox[]): void => {
      if (g === generation.current) setAll(rows);
    };
    try {
      show(await listSandboxes({ state: f.state || undefined, label: f.label || undefined, image: f.exactImage ? f.image : undefined }, undefined, show));
    } catch (e) {
      if (g === generation.current) setStatus({ error: true, text: (e as Error).message });
    }
  };
  useEffect(() => void load(applied), [applied]);
  const rows = useMemo(() => {
    const has = (v: string, want: string): boolean => !want || v.includes(want);
    return (all ?? [])
      .filter((s) => has(s.image, applied.image) && has(s.backend, applied.backend) && has(s.node, applied.node) && has(s.lease ?? '', applied.lease))
      .sort(SORTS[sort]);
  }, [all, applied, sort]);
  const bulk = async (verb: 'pause' | 'resume' | 'delete'): Promise<void> => {
    const ids = [...selected];
    setStatus({ error: false, text: `${verb}: ${ids.length} sandboxes…` });
    const errors = await eachLimit(ids, 8, (id) => (verb === 'delete' ? call('DELETE', sandboxPath(id)) : call('POST', `${sandboxPath(id)}/${verb}`)));
    setStatus({
      error: errors.length > 0,
      text: `${verb}: ${ids.length - errors.length} of ${ids.length} done${errors.length ? `; ${errors[0]!.item}: ${errors[0]!.error}` : ''}`,
    });
    setSelected(new Set());
    await load(applied);
  };
  const byLabel = async (verb: 'pause' | 'resume' | 'delete'): Promise<void> => {
    const [k, ...v] = applied.label.split('=');
    if (!k || !v.length) return;
    if (verb === 'delete' && !confirm(`Delete every sandbox labelled ${applied.label}?`)) return;
    try {
      const r = await call<{ count: number }>('POST', `/v1/batch/${verb}`, { labels: { [k]: v.join('=') } });
      setStatus({ error: false, text: `${verb}: ${r.count} sandboxes labelled ${applied.label}` });
    } catch (e) {
      setStatus({ error: true, text: (e as Error).message });
    }
    await load(applied);
  };
  const field = (name: Exclude<keyof Filters, 'exactImage'>, placeholder: string) => (
    <input
      name={name}
      placeholder={placeholder}
      value={filters[name]}
      // An image typed is matched by part of its name (by the page), not the link's exact one.
      onInput={(e) => setFilters({ ...filters, [name]: e.currentTarget.value, ...(name === 'image' ? { exactImage: false } : {}) })}
    />
  );
  return (
    <section class="sandboxes">
      <h2>Sandboxes {all && <span class="count">{rows.length === all.length ? all.length : `${rows.length} of ${all.length}`}</span>}</h2>
      <form
        class="filters"
        onSubmit={(e) => {
          e.preventDefault();
          setSelected(new Set());
          setApplied({ ...filters });
        }}
      >
        {field('label', 'label k=v')}
        <select name="state" value={filters.state} onChange={(e) => setFilters({ ...filters, state: e.currentTarget.value })}>
          <option value="">any state</option>
          {['creating', 'running', 'paused', 'stopped', 'failed'].map((s) => (
            <option value={s}>{s}</option>
          ))}
        </select>
        {field('image', 'image')}
        {field('backend', 'backend')}
        {field('node', 'node')}
        {field('lease', 'lease')}
        <button type="submit">Filter</button>
        <label>
          sort by{' '}
          <select name="sort" value={sort} onChange={(e) => setSort(e.currentTarget.value as SortKey)}>
            <option value="age">age</option>
            <option value="idle">idle time</option>
            <option value="cpu">CPU</option>
            <option value="memory">memory</option>
          </select>
        </label>
      </form>
      <div class="actions">
        <span>{selected.size} selected</span>
        <button disabled={!selected.size} onClick={() => void bulk('pause')}>
          Pause
        </button>
        <button disabled={!selected.size} onClick={() => void bulk('resume')}>
          Resume
        </button>
        <button disabled={!selected.size} class="danger" onClick={() => void bulk('delete')}>
          Delete
        </button>
        {applied.label.includes('=') && (
          <span class="by-label">
            every <code>{applied.label}</code>:<button onClick={() => void byLabel('pause')}>Pause</button>
            <button onClick={() => void byLabel('resume')}>Resume</button>
            <button class="danger" name="delete-by-label" onClick={() => void byLabel('delete')}>
              Delete
            </button>
          </span>
        )}
        <button class="quiet" onClick={() => void load(applied)}>
          Refresh
        </button>
      </div>
      {status && (
        <p class={status.error ? 'error' : 'status'} role="status">
          {status.text}
        </p>
      )}
      {all === null ? (
        <p>Loading…</p>
      ) : (
        <div class="table">
          <div class="row head">
            <span>
              <input
                type="checkbox"
                aria-label="select all"
                checked={rows.length > 0 && selected.size === rows.length}
                onChange={(e) => setSelected(e.currentTarget.checked ? new Set(rows.map((r) => r.id)) : new Set())}
              />
            </span>
            <span>Sandbox</span>
            <span>State</span>
            <span>Image</span>
            <span>Node</span>
            <span>Labels</span>
            <span>Created</span>
            <span>Idle</span>
            <span>CPU</span>
            <span>Memory</span>
            <span>Expires / ended</span>
          </div>
          <VirtualRows
            count={rows.length}
            rowHeight={30}
            render={(i) => {
              const s = rows[i]!;
              return (
                <div class="row" data-id={s.id} key={s.id}>
                  <span>
                    <input
                      type="checkbox"
                      aria-label={`select ${s.id}`}
                      checked={selected.has(s.id)}
                      onChange={(e) => {
                        const next = new Set(selected);
                        if (e.currentTarget.checked) next.add(s.id);
                        else next.delete(s.id);
                        setSelected(next);
                      }}
                    />
                  </span>
                  <span>
                    <a href={`#/sandboxes/${encodeURIComponent(s.id)}`} onClick={(e) => (e.preventDefault(), go('sandboxes', s.id))}>
                      {s.id}
                    </a>
                  </span>
                  <span class={`state ${s.state}`}>{s.state}</span>
                  <span>{s.image}</span>
                  <span>{s.node}</span>
                  <span class="labels">{labelsText(s.labels)}</span>
                  <span>{ago(s.createdAt)}</span>
                  <span>{s.usage.idleSeconds} s</span>
                  <span>{s.usage.cpuRecent.toFixed(2)}</span>
                  <span>{mib(s.usage.memoryBytes)}</span>
                  <span class="end">{s.end ? `${s.end.reason} (${s.end.by})` : until(s.expiresAt)}</span>
                </div>
              );
            }}
          />
        </div>
      )}
    </section>
  );
}
