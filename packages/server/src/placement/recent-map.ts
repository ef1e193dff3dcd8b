/**
 * A map that keeps at most `max` entries and at least the `max / 2` most recently set: entries go
 * into a young generation, which becomes the old one (the old one dropped) once it holds half of `max`. Every
 * call is O(1). (A Map that evicts its first entry one at a time walks over every entry deleted
 * before it, up to the next rehash: ~0.1 ms a set at 100,000 entries.)
 */
export class RecentMap<K, V> {
  private young = new Map<K, V>();
  private old = new Map<K, V>();

  constructor(private readonly max: number) {}

  get size(): number {
    return this.young.size + this.old.size;
  }

  get(k: K): V | undefined {
    return this.young.get(k) ?? this.old.get(k);
  }

  set(k: K, v: V): void {
    this.old.delete(k);
    this.young.set(k, v);
    if (this.young.size >= Math.max(1, this.max / 2)) {
      this.old = this.young;
      this.young = new Map();
    }
  }

  delete(k: K): void {
    this.young.delete(k);
    this.old.delete(k);
  }
}
