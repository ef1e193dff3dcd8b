/** The host uid/gid range that root inside every container sandbox maps to. */
export interface IdMap {
  /** Host id of uid/gid 0 inside. */
  hostStart: number;
  /** Number of ids mapped. */
  size: number;
}

export const DEFAULT_ID_MAP: IdMap = { hostStart: 100000, size: 65536 };

/** Maps an id inside the sandbox to the host id; ids outside the range map to the range's "nobody". */
export function shiftId(id: number, map: IdMap): number {
  if (id < 0 || id >= map.size) return map.hostStart + 65534;
  return map.hostStart + id;
}
