import { join } from 'node:path';
import { RemoteBlobs } from '@warren/images';
import type { Logger } from '../util/logger.js';
import type { EdgeNodeOptions } from './node-options.js';

/** A reader of layers the node lacks from a blob store (see EdgeNodeOptions.blobStore). */
export function remoteBlobs(o: { dataDir: string; nativeDir: string; logger: Logger }, b: NonNullable<EdgeNodeOptions['blobStore']>): RemoteBlobs {
  return new RemoteBlobs({
    url: b.url,
    key: b.key,
    credentials: b.username !== undefined ? { username: b.username, password: b.password ?? '' } : undefined,
    binary: join(o.nativeDir, 'warren-blobfs'),
    sourcesDir: join(o.dataDir, 'layers', 'blobs'),
    mountDir: join(o.dataDir, 'mnt', 'remote'),
    cacheDir: join(o.dataDir, 'cache', 'blobs'),
    cacheMaxBytes: b.cacheMaxBytes ?? 20 * 2 ** 30,
    runDir: join(o.dataDir, 'cache'),
    log: (m) => o.logger.info(m),
  });
}
