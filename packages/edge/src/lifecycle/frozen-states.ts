import { WarrenError } from '@warren/api';
import type { LayerInfo } from '@warren/images';
import { forkBaseOf, forkLayer, type Backend, type BackendCapabilities } from '../backends/backend.js';
import { COMMIT_RESIDUES } from '../init/platform.js';
import type { Freezes } from './pause.js';
import type { LayerRefs } from './layer-refs.js';
import type { Live } from './live.js';

/** What freezing a sandbox's state needs of its Edge. */
export interface FrozenStatesParts {
  backends: readonly Backend[];
  refs: LayerRefs;
  freezes: Freezes;
  get(id: string): Live;
  live(id: string): boolean;
  able(id: string, what: keyof BackendCapabilities, verb: string): Live;
  /** For fault-injection tests: called at named steps (`commit:frozen`). */
  failpoint?: (step: string) => void;
}

/**
 * What a sandbox's state becomes, frozen for a moment: a commit's layer, or a fork base of the
 * node (Backend.freeze) that its forks stand on, removed once none does, and turned into image
 * layers for what must stand without it (a commit of a fork, a fork's children on other nodes).
 */
export class FrozenStates {
  constructor(private readonly o: FrozenStatesParts) {}

  /**
   * The sandbox's changes as a new layer (pinned in the node's layer store until the caller names
   * it): its writable layer, frozen meanwhile, without `exclude` and the platform's own residues;
   * `under`: the layers it goes on, each fork base made an image layer, so the image stands on
   * layers alone and may be run anywhere.
   */
  async commit(id: string, opts: { exclude?: string[] } = {}): Promise<LayerInfo & { under: string[] }> {
    const l = this.o.able(id, 'commit', 'be committed');
    const exclude = [...COMMIT_RESIDUES.paths, ...(opts.exclude ?? []).map((p) => p.replace(/^\/+/, '').replace(/\/+$/, ''))].filter(Boolean);
    const info = await this.o.freezes.run(
      id,
      () => this.o.get(id),
      () => this.o.live(id),
      () => {
        this.o.failpoint?.('commit:frozen');
        return l.backend.commit(id, { exclude, excludeRegex: COMMIT_RESIDUES.regex });
      },
    );
    return { ...info, under: await this.alone(l.backend.name, l.spec.layers) };
  }

  /**
   * What sandbox `id` holds now becomes fork base `baseId`, the sandbox frozen meanwhile (a
   * paused one stays paused); answers the layers a fork of it stands on, and its backend.
   */
  async freeze(id: string, baseId: string): Promise<{ layers: string[]; backend: string }> {
    const l = this.o.able(id, 'fork', 'be forked');
    await this.o.freezes.run(
      id,
      () => this.o.get(id),
      () => this.o.live(id),
      () => l.backend.freeze!(id, baseId),
    );
    return { layers: [...l.spec.layers, forkLayer(baseId)], backend: l.backend.name };
  }

  /** Removes a fork base no sandbox stands on (a fork none of whose children was made). */
  async drop(baseId: string, backend: string): Promise<void> {
    const entry = forkLayer(baseId);
    if (this.o.refs.inUse().has(entry)) return;
    await this.backend(backend).releaseLayers([entry]);
  }

  /**
   * `layers` with each fork base's entry made an image layer of the node's store (once per base,
   * pinned for the caller): layers that stand without the node's bases.
   */
  async alone(backend: string, layers: string[]): Promise<string[]> {
    const b = this.backend(backend);
    // Held meanwhile: the bases are not removed while they are read (their last fork ending).
    this.o.refs.hold(layers);
    try {
      const out: string[] = [];
      for (const entry of layers) {
        const base = forkBaseOf(entry);
        if (!base) out.push(entry);
        else if (!b.baseLayer) throw new WarrenError('invalid_argument', `a fork base of a ${b.name} sandbox cannot be made a layer`, { base });
        else out.push((await b.baseLayer(base, { exclude: [], excludeRegex: COMMIT_RESIDUES.regex })).digest);
      }
      return out;
    } finally {
      const idle = this.o.refs.release(layers).filter((e) => forkBaseOf(e) !== null);
      if (idle.length) await b.releaseLayers(idle).catch(() => undefined);
    }
  }

  /** Removes the fork bases no live sandbox stands on (their forks ended while the edge was down). */
  async leftovers(): Promise<void> {
    const inUse = this.o.refs.inUse();
    for (const b of this.o.backends) {
      const idle = ((await b.bases?.()) ?? []).map(forkLayer).filter((e) => !inUse.has(e));
      if (idle.length) await b.releaseLayers(idle).catch(() => undefined);
    }
  }

  private backend(name: string): Backend {
    const b = this.o.backends.find((x) => x.name === name);
    if (!b) throw new WarrenError('invalid_argument', `this node runs no ${name} backend`, { backend: name });
    return b;
  }
}
