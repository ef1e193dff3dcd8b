import { WarrenError } from '@warren/sdk';

/** Flag values to what the API and the server take (pure). */

/** A network policy from --egress, --allow, --deny and --endpoint (names of the operator's endpoints). */
export function networkFlags(v: { egress?: string; allow?: string[]; deny?: string[]; endpoint?: string[] }): {
  egress: 'deny' | 'allow';
  allow: string[];
  deny: string[];
  endpoints?: string[];
} {
  if (v.egress !== undefined && v.egress !== 'deny' && v.egress !== 'allow') throw new WarrenError('invalid_argument', '--egress is deny or allow');
  return { egress: v.egress ?? 'deny', allow: v.allow ?? [], deny: v.deny ?? [], ...(v.endpoint?.length ? { endpoints: v.endpoint } : {}) };
}

/** A whole number of at least 1, or an error naming the flag. */
export function positiveInt(v: string, flag: string): number {
  const n = Number(v);
  if (!Number.isInteger(n) || n < 1) throw new Error(`${flag} takes a whole number of at least 1`);
  return n;
}

/** hosts(5) lines: an address, then names; # comments. */
export function parseHosts(text: string): Record<string, string> {
  const out: Record<string, string> = {};
  for (const line of text.split('\n')) {
    const [addr, ...names] = line.replace(/#.*/, '').trim().split(/\s+/);
    if (!addr) continue;
    for (const n of names) out[n.toLowerCase()] = addr;
  }
  return out;
}

/** Registry credentials from WARREN_REGISTRY_USER and WARREN_REGISTRY_PASSWORD, if set. */
export function registryAuth(): { username: string; password: string } | undefined {
  const username = process.env.WARREN_REGISTRY_USER;
  return username ? { username, password: process.env.WARREN_REGISTRY_PASSWORD ?? '' } : undefined;
}

/** IMAGE[:LANGUAGE]=N, the image's own tag included (debian-python:latest:python=4). */
export function parseFnPool(spec: string): { image: string; language?: 'python' | 'bash' | 'node'; size: number } {
  const m = /^(.+?)(?::(python|bash|node))?=(\d+)$/.exec(spec);
  if (!m) throw new WarrenError('invalid_argument', `--fn-pool wants IMAGE[:LANGUAGE]=N, got "${spec}"`);
  return { image: m[1]!, language: m[2] as 'python' | 'bash' | 'node' | undefined, size: Number(m[3]) };
}

export function kv(list: string[] | undefined): Record<string, string> {
  const out: Record<string, string> = {};
  for (const item of list ?? []) {
    const i = item.indexOf('=');
    if (i < 1) throw new WarrenError('invalid_argument', `expected KEY=VALUE, got "${item}"`);
    out[item.slice(0, i)] = item.slice(i + 1);
  }
  return out;
}
