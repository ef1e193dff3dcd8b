import { WarrenError, type ErrorCode } from '@warren/api';

const BY_ERRNO: Record<number, [ErrorCode, string]> = {
  1: ['permission_denied', 'operation not permitted'],
  2: ['not_found', 'no such file or directory'],
  3: ['not_found', 'no such process or session'],
  7: ['payload_too_large', 'too many entries'],
  // A fork or clone that fails for want of room: the sandbox is at its pids limit (or its memory
  // limit). The sandbox's own limit, not a fault in Warren: the caller may retry once it frees some.
  11: ['resource_exhausted', 'the sandbox is at its process limit'],
  12: ['resource_exhausted', 'the sandbox is out of memory'],
  13: ['permission_denied', 'permission denied'],
  16: ['conflict', 'busy'],
  17: ['conflict', 'already exists'],
  20: ['invalid_argument', 'not a directory'],
  21: ['invalid_argument', 'is a directory'],
  22: ['invalid_argument', 'invalid argument'],
  23: ['resource_exhausted', 'too many open files in the sandbox'],
  24: ['resource_exhausted', 'too many open files in the sandbox'],
  28: ['resource_exhausted', 'no space left'],
  30: ['permission_denied', 'read-only file system'],
  36: ['invalid_argument', 'name too long'],
  39: ['conflict', 'directory not empty'],
  40: ['invalid_argument', 'too many levels of symbolic links'],
  122: ['resource_exhausted', 'disk quota exceeded'],
};

/** Maps an errno reported by warren-init to a Warren error that names the path, never a host path. */
export function errnoError(errno: number, message: string, details: Record<string, unknown> = {}): WarrenError {
  const [code, fallback] = BY_ERRNO[errno] ?? ['internal', 'operation failed'];
  return new WarrenError(code, message || fallback, { ...details, errno });
}
