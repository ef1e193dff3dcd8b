/**
 * How many live sandboxes stand on each layer: what a destroy lets go of and what garbage
 * collection keeps, without a walk over every sandbox of the node (thousands) at each destroy.
 */
export class LayerRefs {
  private readonly counts = new Map<string, number>();

  /** A sandbox standing on `layers` came (a layer it names twice counts once). */
  hold(layers: readonly string[]): void {
    for (const d of new Set(layers)) this.counts.set(d, (this.counts.get(d) ?? 0) + 1);
  }

  /** A sandbox standing on `layers` went: answers those no sandbox stands on now. */
  release(layers: readonly string[]): string[] {
    const idle: string[] = [];
    for (const d of new Set(layers)) {
      const n = (this.counts.get(d) ?? 0) - 1;
      if (n > 0) this.counts.set(d, n);
      else {
        this.counts.delete(d);
        idle.push(d);
      }
    }
    return idle;
  }

  /** The layers some live sandbox stands on. */
  inUse(): Set<string> {
    return new Set(this.counts.keys());
  }
}
