import { createHash } from 'node:crypto';

/** A minimal tar writer for tests: any member, including ones a careful tool would refuse. */
export interface Member {
  path: string;
  type?: 'file' | 'dir' | 'symlink' | 'link' | 'char' | 'block' | 'fifo';
  content?: string | Buffer;
  mode?: number;
  uid?: number;
  gid?: number;
  linkname?: string;
  major?: number;
  minor?: number;
  mtime?: number;
  xattrs?: Record<string, string>;
  /** More PAX records, written as given (hostile values too). */
  pax?: Record<string, string>;
  /** The size its header declares, whatever its body (only a file's body is written). */
  declaredSize?: number;
}

const FLAGS = { file: '0', link: '1', symlink: '2', char: '3', block: '4', dir: '5', fifo: '6' } as const;

function header(name: string, flag: string, size: number, m: Partial<Member>): Buffer {
  const h = Buffer.alloc(512);
  const oct = (v: number, len: number): string => v.toString(8).padStart(len - 1, '0') + '\0';
  h.write(name.slice(0, 100), 0, 'utf8');
  h.write(oct(m.mode ?? (flag === '5' ? 0o755 : 0o644), 8), 100);
  h.write(oct(m.uid ?? 0, 8), 108);
  h.write(oct(m.gid ?? 0, 8), 116);
  h.write(oct(size, 12), 124);
  h.write(oct(m.mtime ?? 1_700_000_000, 12), 136);
  h.write('        ', 148);
  h.write(flag, 156);
  h.write((m.linkname ?? '').slice(0, 100), 157);
  h.write('ustar\0', 257, 'latin1');
  h.write('00', 263);
  h.write(oct(m.major ?? 0, 8), 329);
  h.write(oct(m.minor ?? 0, 8), 337);
  let sum = 0;
  for (const b of h) sum += b;
  h.write(sum.toString(8).padStart(6, '0') + '\0 ', 148);
  return h;
}

function pad(b: Buffer): Buffer {
  const rest = b.length % 512;
  return rest ? Buffer.concat([b, Buffer.alloc(512 - rest)]) : b;
}

function paxRecord(key: string, value: string): string {
  const body = ` ${key}=${value}\n`;
  let len = body.length + 1;
  while (String(len).length + body.length !== len) len = String(len).length + body.length;
  return `${len}${body}`;
}

/** The bytes of a tar holding the members in order, with the two-block end marker. */
export function makeTar(members: Member[], opts: { end?: boolean } = {}): Buffer {
  const parts: Buffer[] = [];
  for (const m of members) {
    const type = m.type ?? 'file';
    const data = type === 'file' ? Buffer.from(m.content ?? '') : Buffer.alloc(0);
    const pax =
      Object.entries(m.xattrs ?? {})
        .map(([k, v]) => paxRecord(`SCHILY.xattr.${k}`, v))
        .join('') +
      Object.entries(m.pax ?? {})
        .map(([k, v]) => paxRecord(k, v))
        .join('');
    const long = m.path.length > 100 ? paxRecord('path', m.path) : '';
    if (pax || long) {
      const body = Buffer.from(pax + long);
      parts.push(header('PaxHeader', 'x', body.length, {}), pad(body));
    }
    parts.push(header(m.path, FLAGS[type], m.declaredSize ?? data.length, m), pad(data));
  }
  if (opts.end !== false) parts.push(Buffer.alloc(1024));
  return Buffer.concat(parts);
}

const sha = (b: Buffer): string => `sha256:${createHash('sha256').update(b).digest('hex')}`;

/** A `docker save` archive of layer tars, with `env` as its config's Env. */
export function dockerSave(layers: Buffer[], env?: string[]): Buffer {
  const config = Buffer.from(
    JSON.stringify({ architecture: 'amd64', os: 'linux', config: env ? { Env: env } : undefined, rootfs: { type: 'layers', diff_ids: layers.map(sha) } }),
  );
  const configName = `${sha(config).slice(7)}.json`;
  const members: Member[] = [{ path: configName, content: config }];
  const paths = layers.map((l, i) => `layer${i}/layer.tar`);
  layers.forEach((l, i) => members.push({ path: `layer${i}/`, type: 'dir' }, { path: paths[i] ?? '', content: l }));
  members.push({ path: 'manifest.json', content: JSON.stringify([{ Config: configName, RepoTags: ['app:1'], Layers: paths }]) });
  return makeTar(members);
}
