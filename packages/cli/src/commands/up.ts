import { parseArgs } from 'node:util';
import { readFile } from 'node:fs/promises';
import { parseFnPool, parseHosts, positiveInt } from '../args.js';
import { DEFAULT_DATA_DIR, DEFAULT_IMAGE_CACHE } from '../client.js';
import { up } from '../up.js';
import type { DefaultImageName } from '@warren/images';

/** `warren up`: runs a node (the server loads only here). */
export async function run(rest: string[]): Promise<number> {
  const { values } = parseArgs({
    args: rest,
    options: {
      port: { type: 'string', default: '7070' },
      host: { type: 'string', default: '127.0.0.1' },
      'data-dir': { type: 'string', default: DEFAULT_DATA_DIR },
      'image-cache': { type: 'string', default: DEFAULT_IMAGE_CACHE },
      'keep-sandboxes': { type: 'boolean', default: false },
      images: { type: 'string' },
      runtime: { type: 'string', default: 'native' },
      'blob-url': { type: 'string' },
      'blob-cache-gib': { type: 'string', default: '20' },
      'no-network': { type: 'boolean', default: false },
      'egress-hosts': { type: 'string' },
      'sandbox-subnet': { type: 'string' },
      'dns-rate': { type: 'string' },
      'zram-swap-mib': { type: 'string' },
      'no-zram-swap': { type: 'boolean', default: false },
      'cpu-overcommit': { type: 'string' },
      'cpu-busy': { type: 'string' },
      'memory-overcommit': { type: 'string' },
      'memory-floor-mib': { type: 'string' },
      'fn-pool': { type: 'string', multiple: true },
      'sandbox-disk-gib': { type: 'string' },
      'no-disk-quotas': { type: 'boolean', default: false },
      'disk-reserve-mib': { type: 'string' },
      'fn-max-workers': { type: 'string' },
      'fn-queue-limit': { type: 'string' },
      'pull-registries': { type: 'string' },
    },
  });
  if (values.runtime !== 'native' && values.runtime !== 'runc') throw new Error('--runtime is native or runc');
  await up({
    port: Number(values.port),
    host: values.host,
    dataDir: values['data-dir'],
    imageCacheDir: values['image-cache'],
    keepSandboxes: values['keep-sandboxes'],
    images: values.images ? (values.images.split(',') as DefaultImageName[]) : undefined,
    adminKey: process.env.WARREN_API_KEY,
    runtime: values.runtime,
    blobStore: values['blob-url']
      ? {
          url: values['blob-url'],
          key: process.env.WARREN_BLOB_KEY,
          username: process.env.WARREN_BLOB_USER,
          password: process.env.WARREN_BLOB_PASSWORD,
          cacheMaxBytes: Number(values['blob-cache-gib']) * 2 ** 30,
        }
      : undefined,
    swap: values['no-zram-swap'] ? false : values['zram-swap-mib'] ? { zramMiB: Number(values['zram-swap-mib']) } : undefined,
    overcommit: {
      cpu: values['cpu-overcommit'] ? Number(values['cpu-overcommit']) : undefined,
      busy: values['cpu-busy'] ? Number(values['cpu-busy']) : undefined,
      memory: values['memory-overcommit'] ? Number(values['memory-overcommit']) : undefined,
    },
    memoryFloorMiB: values['memory-floor-mib'] ? Number(values['memory-floor-mib']) : undefined,
    pullRegistries: values['pull-registries'] ? values['pull-registries'].split(',').filter(Boolean) : undefined,
    dataDiskReserveMiB: values['disk-reserve-mib'] ? positiveInt(values['disk-reserve-mib'], '--disk-reserve-mib') : undefined,
    disk: values['no-disk-quotas'] ? false : { sizeGiB: values['sandbox-disk-gib'] ? Number(values['sandbox-disk-gib']) : undefined },
    fn: {
      pools: (values['fn-pool'] ?? []).map(parseFnPool),
      maxWorkersPerImage: values['fn-max-workers'] ? Number(values['fn-max-workers']) : undefined,
      queueLimit: values['fn-queue-limit'] ? Number(values['fn-queue-limit']) : undefined,
    },
    network: values['no-network']
      ? false
      : {
          hosts: values['egress-hosts'] ? parseHosts(await readFile(values['egress-hosts'], 'utf8')) : undefined,
          subnet: values['sandbox-subnet'],
          dnsQueriesPerSecond: values['dns-rate'] ? positiveInt(values['dns-rate'], '--dns-rate') : undefined,
        },
  });
  return -1; // keeps running
}
