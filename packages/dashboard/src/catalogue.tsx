import type { ComponentChild } from 'preact';
import { useEffect, useState } from 'preact/hooks';
import type { Layer, Pool } from '@warren/api';
import { ApiError, call, type ListedImage } from './api.js';
import { ago } from './format.js';

const size = (bytes: number): string => (bytes >= 2 ** 30 ? `${(bytes / 2 ** 30).toFixed(2)} GiB` : `${(bytes / 2 ** 20).toFixed(1)} MiB`);

/**
 * One table of the catalogue: its rows, each with a delete whose refusal is shown as the server
 * says it; one refused because sandboxes use it (conflict) can be sent again, forced.
 */
function Table<T>(p: {
  title: string;
  rows: T[] | null;
  head: string[];
  cells: (r: T) => ComponentChild[];
  name: (r: T) => string;
  remove: ((r: T, force: boolean) => Promise<unknown>) | null;
  reload: () => Promise<void>;
}) {
  const [error, setError] = useState<{ text: string; force: (() => void) | null } | null>(null);
  const remove = (r: T, force: boolean): void => {
    setError(null);
    p.remove!(r, force).then(
      () => p.reload(),
      (e: unknown) =>
        setError({
          text: `${p.name(r)}: ${(e as Error).message}`,
          force: !force && e instanceof ApiError && e.code === 'conflict' ? () => remove(r, true) : null,
        }),
    );
  };
  return (
    <section class="catalogue" data-table={p.title}>
      <h3>{p.title}</h3>
      {error && (
        <p class="error" role="alert">
          {error.text}{' '}
          {error.force && (
            <button class="danger" name="force" onClick={error.force}>
              Delete anyway
            </button>
          )}
        </p>
      )}
      {p.rows === null ? (
        <p class="sub">Loading…</p>
      ) : p.rows.length === 0 ? (
        <p class="sub">none</p>
      ) : (
        <table class="listing">
          <thead>
            <tr>
              {p.head.map((h) => (
                <th>{h}</th>
              ))}
              <th />
            </tr>
          </thead>
          <tbody>
            {p.rows.map((r) => (
              <tr key={p.name(r)} data-name={p.name(r)}>
                {p.cells(r).map((c) => (
                  <td>{c}</td>
                ))}
                <td>
                  {p.remove && (
                    <button class="danger" onClick={() => confirm(`Delete ${p.name(r)}?`) && remove(r, false)}>
                      Delete
                    </button>
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

/** How many live sandboxes were made from an image: a link to the list of them. */
const usedBy = (r: ListedImage): ComponentChild =>
  r.usedBy ? (
    <a class="used-by" href={`#/sandboxes?image=${encodeURIComponent(r.name)}`}>
      {r.usedBy}
    </a>
  ) : (
    '0'
  );

/** Images, snapshots, named layers and warm pools the key sees: sizes, whose, who uses them, delete. */
export function Catalogue() {
  const [images, setImages] = useState<ListedImage[] | null>(null);
  const [snapshots, setSnapshots] = useState<ListedImage[] | null>(null);
  const [layers, setLayers] = useState<Layer[] | null>(null);
  const [pools, setPools] = useState<Pool[] | null>(null);
  const [error, setError] = useState<string | null>(null);
  const load = async (): Promise<void> => {
    try {
      const [i, s, l, p] = await Promise.all([
        call<{ images: ListedImage[] }>('GET', '/v1/images'),
        call<{ snapshots: ListedImage[] }>('GET', '/v1/snapshots'),
        call<{ layers: Layer[] }>('GET', '/v1/layers'),
        call<{ pools: Pool[] }>('GET', '/v1/pools'),
      ]);
      setImages(i.images.filter((x) => !x.snapshot));
      setSnapshots(s.snapshots);
      setLayers(l.layers);
      setPools(p.pools);
    } catch (e) {
      setError((e as Error).message);
    }
  };
  useEffect(() => void load(), []);
  const enc = encodeURIComponent;
  const force = (f: boolean): string => (f ? '?force=1' : '');
  return (
    <section>
      <h2>Images, snapshots, layers and pools</h2>
      {error && <p class="error">{error}</p>}
      <Table
        title="Images"
        rows={images}
        head={['Name', 'Layers', 'Size', 'Whose', 'Made', 'Used by']}
        name={(r) => r.name}
        cells={(r) => [r.name, r.layers.length, size(r.sizeBytes), r.builtIn ? 'built in' : (r.tenant ?? 'every tenant'), ago(r.createdAt), usedBy(r)]}
        remove={(r, f) => call('DELETE', `/v1/images/${enc(r.name)}${force(f)}`)}
        reload={load}
      />
      <Table
        title="Snapshots"
        rows={snapshots}
        head={['Name', 'Of', 'Backend', 'Size', 'Made', 'Used by']}
        name={(r) => r.name}
        cells={(r) => [r.name, r.snapshot?.source ?? '', r.snapshot?.backend ?? '', size(r.sizeBytes), ago(r.createdAt), usedBy(r)]}
        remove={(r, f) => call('DELETE', `/v1/snapshots/${enc(r.name)}${force(f)}`)}
        reload={load}
      />
      <Table
        title="Layers"
        rows={layers}
        head={['Name', 'Digest', 'Size', 'Whose', 'Made']}
        name={(r) => r.name}
        cells={(r) => [r.name, <code>{r.digest.slice(0, 19)}</code>, size(r.sizeBytes), r.tenant ?? 'every tenant', ago(r.createdAt)]}
        remove={(r) => call('DELETE', `/v1/layers/${enc(r.name)}`)}
        reload={load}
      />
      <Table
        title="Pools"
        rows={pools}
        head={['Pool', 'Image', 'Ready / size', 'Claims', 'Last error']}
        name={(r) => r.id}
        cells={(r) => [r.id, r.image, `${r.ready} / ${r.size}`, `${r.claims} (${r.claimsPerSecond}/s)`, r.lastError ?? '']}
        remove={(r) => call('DELETE', `/v1/pools/${enc(r.id)}`)}
        reload={load}
      />
    </section>
  );
}
