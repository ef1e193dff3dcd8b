import type { NetworkUsage } from '@warren/api';

/** Names kept per map; beyond it, counts go to "(other)" so that random names cannot grow memory. */
const MAX_NAMES = 100;

/** A sandbox's connection counts by name (its bytes are counted by its link). */
export class NetCounters {
  connectionsAllowed = 0;
  connectionsDenied = 0;
  readonly allowed = new Map<string, number>();
  readonly denied = new Map<string, number>();

  allow(name: string): void {
    this.connectionsAllowed++;
    bump(this.allowed, name);
  }

  deny(name: string): void {
    this.connectionsDenied++;
    bump(this.denied, name);
  }

  /**
   * The usage object, with the link's byte counts and the kernel's refusals added: direct
   * connections, and DNS queries dropped past the sandbox's rate.
   */
  usage(link: { bytesIn: number; bytesOut: number } | null, directDenied: number, dnsLimited = 0): NetworkUsage {
    const denied = Object.fromEntries(this.denied);
    if (directDenied > 0) denied['(direct address)'] = directDenied;
    if (dnsLimited > 0) denied['(DNS rate limit)'] = dnsLimited;
    return {
      bytesIn: link?.bytesIn ?? 0,
      bytesOut: link?.bytesOut ?? 0,
      connectionsAllowed: this.connectionsAllowed,
      connectionsDenied: this.connectionsDenied + directDenied + dnsLimited,
      allowed: Object.fromEntries(this.allowed),
      denied,
    };
  }
}

function bump(m: Map<string, number>, name: string): void {
  const key = m.has(name) || m.size < MAX_NAMES ? name : '(other)';
  m.set(key, (m.get(key) ?? 0) + 1);
}
