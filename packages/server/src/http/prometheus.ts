/**
 * Prometheus text from several parts (the control plane's own counters, FnCall's, every node's
 * network counters): each family once, its `# TYPE` line first and all its samples together,
 * families in the order they first appear. Parts may repeat a family (two nodes each name
 * `warren_sandbox_network_bytes_in`) or interleave two (a line of each per node); a strict
 * scraper refuses both.
 */
export function exposition(parts: string[]): string {
  const families = new Map<string, { type: string | null; samples: string[] }>();
  const family = (name: string): { type: string | null; samples: string[] } => {
    let f = families.get(name);
    if (!f) families.set(name, (f = { type: null, samples: [] }));
    return f;
  };
  for (const part of parts)
    for (const line of part.split('\n')) {
      if (!line.trim()) continue;
      const type = /^# TYPE (\S+) (\S+)$/.exec(line);
      if (type) {
        family(type[1]!).type ??= type[2]!;
        continue;
      }
      if (line.startsWith('#')) continue;
      const name = /^[a-zA-Z_:][a-zA-Z0-9_:]*/.exec(line)?.[0];
      if (name) family(name).samples.push(line);
    }
  let out = '';
  for (const [name, f] of families) {
    if (f.type) out += `# TYPE ${name} ${f.type}\n`;
    for (const s of f.samples) out += s + '\n';
  }
  return out;
}
