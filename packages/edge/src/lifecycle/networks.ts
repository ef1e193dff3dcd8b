import type { NetworkPolicy, NetworkUsage } from '@warren/api';
import { WarrenError } from '@warren/api';
import type { SandboxNetwork } from '../net/sandbox-network.js';
import type { Live } from './live.js';

/** A sandbox's network as the edge reports it: the rules as applied, its address, what it did. */
export interface NetworkView {
  policy: { egress: 'deny' | 'allow'; allow: string[]; deny: string[]; endpoints: string[] };
  address: string | null;
  usage: NetworkUsage | null;
}

/**
 * The edge's side of its sandboxes' networks (net/ does the work): rules, addresses, counters.
 * Without networking every sandbox has loopback only and no rules can open more.
 */
export class SandboxNetworks {
  constructor(
    private readonly net: SandboxNetwork | undefined,
    /** A live sandbox (conflict when the edge does not hold it). */
    private readonly get: (id: string) => Live,
  ) {}

  /** Whether sandboxes on this node can have a network beyond loopback. */
  get enabled(): boolean {
    return this.net !== undefined;
  }

  /** The names of the operator's endpoints on this node (none without networking). */
  endpointNames(): string[] {
    return this.net?.endpointNames() ?? [];
  }

  /** New network rules for a running sandbox. */
  async setPolicy(id: string, policy: NetworkPolicy): Promise<void> {
    const l = this.get(id);
    if (!this.net?.has(id)) throw new WarrenError('invalid_argument', 'this sandbox has loopback only: it started without a network', { id });
    await this.net.update(id, policy);
    l.spec.network = policy;
  }

  /** The sandbox's rules, address and, with `withUsage`, its counters (file reads, now and then an nft run). */
  async view(id: string, withUsage = true): Promise<NetworkView> {
    this.get(id);
    const n = this.net;
    const usage = withUsage ? ((await n?.usage(id)) ?? null) : null;
    return { policy: n?.policy(id) ?? { egress: 'deny', allow: [], deny: [], endpoints: [] }, address: n?.address(id) ?? null, usage };
  }

  /** Where the host reaches the sandbox (its link address), or null without a network. */
  address(id: string): string | null {
    return this.net?.address(id) ?? null;
  }

  /** Per-sandbox network counters, Prometheus text. */
  async metrics(): Promise<string> {
    return (await this.net?.metrics()) ?? '';
  }
}
