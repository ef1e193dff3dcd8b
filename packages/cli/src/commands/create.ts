import { parseArgs } from 'node:util';
import type { CpuClass } from '@warren/api';
import { WarrenError } from '@warren/sdk';
import { kv, networkFlags } from '../args.js';
import { client } from '../client.js';

/** `warren create IMAGE`: prints the new sandbox id. */
export async function run(rest: string[]): Promise<number> {
  const { values, positionals } = parseArgs({
    args: rest,
    allowPositionals: true,
    options: {
      cpu: { type: 'string' },
      'cpu-class': { type: 'string' },
      memory: { type: 'string' },
      ttl: { type: 'string' },
      label: { type: 'string', multiple: true },
      env: { type: 'string', multiple: true },
      user: { type: 'string' },
      workdir: { type: 'string' },
      layer: { type: 'string', multiple: true },
      egress: { type: 'string' },
      allow: { type: 'string', multiple: true },
      deny: { type: 'string', multiple: true },
      endpoint: { type: 'string', multiple: true },
    },
  });
  const image = positionals[0];
  if (!image) throw new WarrenError('invalid_argument', 'name an image');
  const sb = await (
    await client()
  ).sandboxes.create({
    image,
    layers: values.layer,
    resources: {
      cpu: values.cpu ? Number(values.cpu) : undefined,
      memoryMiB: values.memory ? Number(values.memory) : undefined,
      // The server checks the name (invalid_argument for any other).
      cpuClass: values['cpu-class'] as CpuClass | undefined,
    },
    lifetime: values.ttl ? { ttlSeconds: Number(values.ttl) } : undefined,
    labels: kv(values.label),
    env: kv(values.env),
    user: values.user,
    workdir: values.workdir,
    network: values.egress || values.allow || values.deny || values.endpoint ? networkFlags(values) : undefined,
  });
  console.log(sb.id);
  return 0;
}
