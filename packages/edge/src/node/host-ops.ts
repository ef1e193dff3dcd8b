import { join } from 'node:path';
import type { FsOps } from '@warren/images';
import { HostHelper } from '../host/hostd.js';
import type { Logger } from '../util/logger.js';
import { defaultNativeDir } from './platform-files.js';

/**
 * File operations as root (a warren-hostd of its own) for a control plane without an edge
 * (`warren server`): imports and commits of layers. A hostd that dies is replaced.
 */
export function hostFileOps(o: { nativeDir?: string; logger: Logger }): FsOps & { close(): Promise<void> } {
  return new HostHelper(join(o.nativeDir ?? defaultNativeDir(), 'warren-hostd'), (why) =>
    o.logger.warn('warren-hostd died; a new one took its place', { error: String(why) }),
  );
}
