import { lookup } from 'node:dns/promises';
import { writeFileSync } from 'node:fs';
import { mkdir, readFile, readdir, unlink, writeFile } from 'node:fs/promises';
import { networkInterfaces } from 'node:os';
import { join } from 'node:path';
import { WarrenError, formatIpv4, parseIpv4, type NetworkPolicy, type NetworkUsage } from '@warren/api';
import { addressAllowed, cidrHas, coalesceCidrs, compilePolicy, type Cidr, type CompiledPolicy } from './policy.js';
import { INTERNAL, formatCidr, nodeTag, parseProcRoutes, pickBlock, slot, slotCount, type Slot } from './addresses.js';
import { alwaysDenyCommands, buildRuleset, cidrCommands, parseDeniedSet } from './nft.js';
import { EgressProxy, type EgressTarget } from './egress-proxy.js';
import { NetCounters } from './counters.js';
import { Endpoints } from './endpoints.js';
import { unlinkQuietly } from '../util/unlink-quietly.js';

/** What the network needs of the host helper (warren-hostd). */
export interface NetHost {
  /** The helper's pid: a namespace it holds is /proc/PID/fd/FD to other programs. */
  readonly pid: number;
  /** A new network namespace (loopback up, sandbox sysctls), held open by the helper. */
  netns(): Promise<number>;
  netnsClose(fd: number): Promise<void>;
  /** In namespace `fd` (one the helper holds) eth0 with `sandboxIp`/31 and a default route via `hostIp`; on the host its peer `hostIf` with `hostIp`/31. */
  veth(fd: number, hostIf: string, hostIp: string, sandboxIp: string): Promise<void>;
  run(file: string, args: string[], opts: { logFile: string }): Promise<number>;
}

export interface SandboxNetworkOptions {
  host: NetHost;
  /** The node's data dir: names the node (its table, interfaces, block) and keeps its block. */
  dataDir: string;
  /** A tmpfs dir for command files and each sandbox's slot (it survives a kept restart). */
  runDir: string;
  /** The sandboxes' block, a /16 to /18 (default: a free /17 in 10.200.0.0/13). */
  block?: Cidr;
  /** Network namespaces kept ready, so a create does not wait for ip(8). */
  poolSize?: number;
  /** Names the proxy resolves without DNS (the operator's word: any address is allowed). */
  hosts?: Record<string, string>;
  maxConnectionsPerSandbox?: number;
  /** New proxy connections a sandbox may open per second (default 500, a burst of twice that). */
  newConnectionsPerSecond?: number;
  /**
   * DNS queries a sandbox may send per second (a burst of twice that first). Default 1,000: a
   * connection asks for A and AAAA, so twice the default new-connection rate.
   */
  dnsQueriesPerSecond?: number;
  /** Ranges no sandbox reaches whatever its rules (`--deny-networks`): with the cluster's hosts (setClusterHosts). */
  deny?: Cidr[];
  /** The operator's endpoints (`--endpoint NAME=URL`): what rules' `endpoints` may name. */
  endpoints?: Endpoints;
  logger: { info(msg: string, meta?: unknown): void; warn(msg: string, meta?: unknown): void };
}

/** The host end's MAC address of every microVM's link (each link is an Ethernet of its own). */
export const TAP_HOST_MAC = '02:77:72:6e:00:02';

/** A link a VMM makes of a tap (see attachTap): the host end's name, the guest's address and prefix, its gateway. */
export interface TapAttachment {
  ifname: string;
  address: string;
  prefix: number;
  gateway: string;
}

/** What a sandbox joins: the namespace path to give the runtime, and its address. */
export interface NetAttachment {
  nsPath: string;
  address: string;
  gateway: string;
}

interface Attached extends EgressTarget {
  slot: Slot;
  /** Rule changes in flight, one after another (each is a diff against the last). */
  applying: Promise<void>;
  /** The helper's fd of the namespace until the sandbox's init holds it, and that helper's pid. */
  fd: number | null;
  fdPid: number;
}

interface Ready {
  slot: Slot;
  fd: number;
  /**
   * The helper that holds `fd`: a helper that died took its namespaces with it, and the same
   * number in the next one's table is another namespace.
   */
  pid: number;
}

/**
 * Sandbox networking on one node: each sandbox gets its own network namespace with a veth to the
 * host (a /31 of the node's block), the kernel's rules (nftables) keep it from everything but the
 * node's egress proxy and DNS and the CIDRs its rules name, and the proxy lets names through by
 * its rules. Namespaces are prepared ahead in a small pool (ip(8) costs milliseconds).
 */
export class SandboxNetwork {
  readonly tag: string;
  readonly ifPrefix: string;
  readonly table: string;
  private block: Cidr = { base: 0, prefix: 32 };
  private readonly proxy: EgressProxy;
  private readonly bySandbox = new Map<string, Attached>();
  private readonly byAddress = new Map<string, Attached>();
  private readonly used = new Set<number>();
  private readonly pool: Ready[] = [];
  private readonly hosts: Map<string, string>;
  private readonly poolSize: number;
  private readonly endpoints: Endpoints;
  private nextIndex = 0;
  private filling: Promise<void> | null = null;
  private closed = false;
  private seq = 0;
  private ownAddresses: number[] = [];
  /** The cluster's own hosts (setClusterHosts), and with the operator's ranges what no sandbox reaches. */
  private clusterHosts: Cidr[] = [];
  private alwaysDeny: Cidr[];
  private denying: Promise<void> = Promise.resolve();
  private denied: { at: number; counts: Map<string, number>; dns: Map<string, number> } | null = null;
  private deniedRead: Promise<void> | null = null;
  private forwarding = false;
  /** Whether this node turned IPv4 forwarding on (and turns it off again when it stops). */
  private turnedForwardingOn = false;

  constructor(private readonly o: SandboxNetworkOptions) {
    this.tag = nodeTag(o.dataDir);
    this.ifPrefix = `wn${this.tag}`;
    this.table = `warren_${this.tag}`;
    this.poolSize = o.poolSize ?? 16;
    this.alwaysDeny = o.deny ?? [];
    this.hosts = new Map(Object.entries(o.hosts ?? {}).map(([k, v]) => [k.toLowerCase().replace(/\.$/, ''), v]));
    this.endpoints = o.endpoints ?? new Endpoints({ targets: {}, secret: '' });
    this.proxy = new EgressProxy({
      target: (ip) => this.byAddress.get(ip),
      resolve: (name, policy) => this.resolve(name, policy),
      endpoints: this.endpoints,
      maxConnectionsPerSandbox: o.maxConnectionsPerSandbox ?? 256,
      logger: o.logger,
    });
  }

  private get netDir(): string {
    return join(this.o.runDir, 'net');
  }

  /** The node's block, and whether it turned IPv4 forwarding on (to turn it off when it stops). */
  private get stateFile(): string {
    return join(this.o.dataDir, 'network.json');
  }

  private async saveState(): Promise<void> {
    await writeFile(this.stateFile, JSON.stringify({ block: formatCidr(this.block), turnedForwardingOn: this.turnedForwardingOn }) + '\n');
  }

  /** Picks (or finds again) the node's block, starts the proxy and installs the node's rules. */
  async open(): Promise<void> {
    await mkdir(join(this.netDir, 'slots'), { recursive: true });
    const saved = await readFile(this.stateFile, 'utf8').then(
      (t) => JSON.parse(t) as { block?: string; turnedForwardingOn?: boolean },
      () => ({}) as { block?: string; turnedForwardingOn?: boolean },
    );
    this.turnedForwardingOn = saved.turnedForwardingOn === true;
    if (this.o.block) this.block = this.o.block;
    else if (saved.block) {
      const [a, p] = saved.block.split('/');
      this.block = { base: parseIpv4(a!)!, prefix: Number(p) };
    } else this.block = pickBlock(parseProcRoutes(await readFile('/proc/net/route', 'utf8')), this.ifPrefix, this.tag);
    await this.saveState();
    // The block is held from here to the node's last stop (kept over a restart): an unreachable
    // route for all of it, which another node on this host sees in its routes and passes over
    // (a sandbox's route, more specific, still wins; its veth came only with the first sandbox,
    // and a node started meanwhile whose tag led its search to the same block took it too). It
    // also answers the block's unused addresses from the host as unreachable, not by the default route.
    await this.ip(`route replace unreachable ${formatCidr(this.block)}\n`);
    this.ownAddresses = Object.values(networkInterfaces())
      .flat()
      .map((i) => (i && i.family === 'IPv4' ? parseIpv4(i.address) : null))
      .filter((x): x is number => x !== null);
    // Interfaces of ours that exist (sandboxes kept running, or left by a crash) keep their slots
    // until sweep() has seen which sandboxes came back.
    for (const name of await readdir('/sys/class/net').catch(() => [] as string[])) {
      if (name.startsWith(this.ifPrefix)) {
        const i = parseInt(name.slice(this.ifPrefix.length), 36);
        if (Number.isInteger(i)) this.used.add(i);
      }
    }
    const ports = await this.proxy.listen();
    await this.nft(
      buildRuleset({
        table: this.table,
        ifPrefix: this.ifPrefix,
        block: this.block,
        ports,
        maxConnections: this.o.maxConnectionsPerSandbox ?? 256,
        newConnectionsPerSecond: this.o.newConnectionsPerSecond ?? 500,
        dnsQueriesPerSecond: this.o.dnsQueriesPerSecond ?? 1000,
        alwaysDeny: this.alwaysDeny,
      }),
    );
    this.o.logger.info('sandbox network ready', { block: formatCidr(this.block), table: this.table, ports });
  }

  /**
   * The cluster's own hosts as this node knows them (its control plane's replicas, the other
   * nodes, the database: what a join answers, and the address it joined through): no sandbox
   * reaches them, directly or through the proxy, whatever its rules. Replaces the last ones given
   * (IPv4 only: sandboxes have no IPv6); the kernel's set changes in one transaction.
   */
  async setClusterHosts(addresses: string[]): Promise<void> {
    const hosts = coalesceCidrs(addresses.map((a) => parseIpv4(a)).flatMap((ip) => (ip === null ? [] : [{ base: ip, prefix: 32 }])));
    const next = [...(this.o.deny ?? []), ...hosts];
    const run = this.denying.then(async () => {
      if (this.closed) return;
      await this.nft(alwaysDenyCommands(this.table, next));
      this.clusterHosts = hosts;
      this.alwaysDeny = next;
    });
    this.denying = run.catch(() => undefined);
    await run;
    this.o.logger.info('the cluster’s own hosts are out of sandboxes’ reach', { hosts: this.clusterHosts.map(formatCidr) });
  }

  /** After recovery: interfaces of sandboxes that did not come back are removed; the pool fills. */
  async sweep(): Promise<void> {
    const mine = new Set([...this.bySandbox.values()].map((a) => a.slot.index));
    const stale = [...this.used].filter((i) => !mine.has(i) && !this.pool.some((r) => r.slot.index === i));
    if (stale.length) {
      await this.ip(stale.map((i) => `link del ${slot(this.block, this.ifPrefix, i).hostIf}`).join('\n') + '\n', { force: true }).catch(() => undefined);
      for (const i of stale) this.used.delete(i);
    }
    for (const f of await readdir(join(this.netDir, 'slots')).catch(() => [] as string[])) {
      if (!this.bySandbox.has(f)) await unlink(join(this.netDir, 'slots', f)).catch(() => undefined);
    }
    this.refill();
  }

  /**
   * Takes a prepared namespace for a sandbox and applies its rules. The pool is refilled at once
   * only when it runs low (a burst); otherwise once the create is done (`topUp`): a namespace
   * and its link take warren-hostd ~2 ms, and the create's own requests to it (its disk, its
   * spawn, the watch on its init) waited behind that refill.
   */
  async attach(id: string, policy: NetworkPolicy | undefined): Promise<NetAttachment> {
    this.endpoints.check(policy?.endpoints);
    const compiled = compilePolicy(policy);
    // Namespaces a helper that has since died held are gone (and their links with them).
    while (this.pool[0] && this.pool[0].pid !== this.o.host.pid) this.used.delete(this.pool.shift()!.slot.index);
    const ready = this.pool.shift() ?? (await this.prepare(1))[0]!;
    if (this.pool.length < Math.max(1, this.poolSize >> 2)) this.refill();
    await this.record(this.take(id, ready.slot, ready.fd, ready.pid), compiled);
    return {
      nsPath: `/proc/${ready.pid}/fd/${ready.fd}`,
      address: formatIpv4(ready.slot.sandboxIp),
      gateway: formatIpv4(ready.slot.hostIp),
    };
  }

  /**
   * A link for a sandbox whose VMM opens a tap (a microVM): its slot, address and rules, and no
   * namespace; the tap becomes the slot's host end once the VMM holds it (bindTap).
   */
  async attachTap(id: string, policy: NetworkPolicy | undefined): Promise<TapAttachment> {
    this.endpoints.check(policy?.endpoints);
    const compiled = compilePolicy(policy);
    const s = this.allocate();
    await this.record(this.take(id, s, null, 0), compiled);
    return { ifname: s.hostIf, address: formatIpv4(s.sandboxIp), prefix: 31, gateway: formatIpv4(s.hostIp) };
  }

  /** A sandbox's slot, registered (its namespace `fd` held by the helper `fdPid`, if any). */
  private take(id: string, s: Slot, fd: number | null, fdPid: number): Attached {
    const a: Attached = {
      id,
      slot: s,
      fd,
      fdPid,
      policy: compilePolicy(undefined),
      gateway: s.hostIp,
      counters: new NetCounters(),
      active: 0,
      applying: Promise.resolve(),
    };
    this.register(a);
    return a;
  }

  /** A new sandbox's slot written down (for an adopt) and its rules applied; on failure, nothing of it is left. */
  private async record(a: Attached, policy: CompiledPolicy): Promise<void> {
    try {
      // At once: a file of a few bytes, where an asynchronous write is three trips through
      // Node's thread pool (~0.1 ms of the event loop's time per create in a burst).
      writeFileSync(join(this.netDir, 'slots', a.id), String(a.slot.index));
      await this.apply(a, policy);
    } catch (e) {
      await this.detach(a.id);
      throw e;
    }
  }

  /**
   * Makes `tap` (one a VMM has just opened, on the host) the host end of `link`: named
   * `link.ifname`, the gateway's address, up. Again after each start of the VMM (a tap goes
   * with the process that opened it).
   */
  async bindTap(tap: string, link: Omit<TapAttachment, 'address'>): Promise<void> {
    for (const name of [tap, link.ifname]) if (!/^[A-Za-z0-9_-]{1,15}$/.test(name)) throw new WarrenError('internal', `bad link name ${name}`);
    const gateway = parseIpv4(link.gateway);
    if (gateway === null) throw new WarrenError('internal', `bad gateway ${link.gateway}`);
    const cmds = [
      ...(tap === link.ifname ? [] : [`link set dev ${tap} name ${link.ifname}`]),
      // One address for every tap's host end: a guest restored from a save keeps its neighbour
      // table, and its link's new tap must answer to the address it holds.
      `link set ${link.ifname} address ${TAP_HOST_MAC} addrgenmode none`,
      `addr replace ${formatIpv4(gateway)}/${link.prefix} dev ${link.ifname}`,
      `link set ${link.ifname} up`,
    ];
    await this.ip(cmds.join('\n') + '\n').catch((e: unknown) => {
      throw new WarrenError('unavailable', "could not set up a microVM's link", { link: link.ifname }, { cause: e });
    });
  }

  /** The sandbox's init holds its namespace now: the helper lets go of it. */
  async started(id: string): Promise<void> {
    const a = this.bySandbox.get(id);
    if (a?.fd == null) return;
    const fd = a.fd;
    a.fd = null;
    if (a.fdPid === this.o.host.pid) await this.o.host.netnsClose(fd);
  }

  /** Takes back a sandbox that kept running over a restart (its link is still there). */
  async adopt(id: string, policy: NetworkPolicy | undefined): Promise<boolean> {
    const index = Number(await readFile(join(this.netDir, 'slots', id), 'utf8').catch(() => 'NaN'));
    if (!Number.isInteger(index) || index < 0 || index >= slotCount(this.block)) return false;
    await this.apply(this.take(id, slot(this.block, this.ifPrefix, index), null, 0), compilePolicy(policy));
    return true;
  }

  /** New rules for a running sandbox; new connections follow them at once. */
  async update(id: string, policy: NetworkPolicy): Promise<void> {
    const a = this.bySandbox.get(id);
    if (!a) throw new WarrenError('not_found', 'sandbox has no network on this node', { id });
    this.endpoints.check(policy.endpoints);
    await this.apply(a, compilePolicy(policy));
  }

  private register(a: Attached): void {
    this.used.add(a.slot.index);
    this.bySandbox.set(a.id, a);
    this.byAddress.set(formatIpv4(a.slot.sandboxIp), a);
  }

  private apply(a: Attached, next: CompiledPolicy): Promise<void> {
    const run = a.applying.then(() => this.applyNow(a, next));
    a.applying = run.catch(() => undefined);
    return run;
  }

  private async applyNow(a: Attached, next: CompiledPolicy): Promise<void> {
    const cmds = cidrCommands(
      this.table,
      a.slot.sandboxIp,
      { allow: a.policy.allowCidrs, deny: a.policy.denyCidrs },
      { allow: next.allowCidrs, deny: next.denyCidrs },
    );
    if (next.allowCidrs.length) await this.enableForwarding();
    if (cmds) await this.nft(cmds);
    a.policy = next;
  }

  /**
   * Direct (CIDR) connections are routed by the host: IPv4 forwarding must be on. Only the
   * node's rules decide what is forwarded from and to sandboxes.
   */
  private async enableForwarding(): Promise<void> {
    if (this.forwarding) return;
    const f = '/proc/sys/net/ipv4/ip_forward';
    if ((await readFile(f, 'utf8')).trim() !== '1') {
      await writeFile(f, '1');
      this.turnedForwardingOn = true;
      await this.saveState();
      this.o.logger.info('turned on IPv4 forwarding for sandboxes with CIDR rules');
    }
    this.forwarding = true;
  }

  /** Forgets a sandbox's network (its namespace and link go when its processes have). */
  async detach(id: string): Promise<void> {
    const a = this.bySandbox.get(id);
    if (!a) return;
    this.bySandbox.delete(id);
    this.byAddress.delete(formatIpv4(a.slot.sandboxIp));
    // Rules still being applied land first, so that what is removed is what is there.
    await a.applying;
    const cmds = cidrCommands(this.table, a.slot.sandboxIp, { allow: a.policy.allowCidrs, deny: a.policy.denyCidrs }, { allow: [], deny: [] });
    if (a.fd !== null && a.fdPid === this.o.host.pid) await this.o.host.netnsClose(a.fd).catch(() => undefined);
    try {
      if (cmds) await this.nft(cmds);
      this.used.delete(a.slot.index);
    } catch (e) {
      // Its address keeps its CIDR rules in the kernel: it is never given to another sandbox.
      this.o.logger.warn("could not remove a sandbox's CIDR rules; its address stays out of use", { id, error: String(e) });
    }
    unlinkQuietly(join(this.netDir, 'slots', id));
  }

  has(id: string): boolean {
    return this.bySandbox.has(id);
  }

  /** The names of the operator's endpoints on this node. */
  endpointNames(): string[] {
    return this.endpoints.names();
  }

  policy(id: string): CompiledPolicy['source'] | null {
    return this.bySandbox.get(id)?.policy.source ?? null;
  }

  address(id: string): string | null {
    const a = this.bySandbox.get(id);
    return a ? formatIpv4(a.slot.sandboxIp) : null;
  }

  /** Bytes through the sandbox's link and its connections, allowed and denied by name. */
  async usage(id: string): Promise<NetworkUsage | null> {
    const a = this.bySandbox.get(id);
    if (!a) return null;
    const stat = (f: string): Promise<number> => readFile(`/sys/class/net/${a.slot.hostIf}/statistics/${f}`, 'utf8').then(Number, () => NaN);
    const [rx, tx] = await Promise.all([stat('rx_bytes'), stat('tx_bytes'), this.readDenied()]);
    // The host end receives what the sandbox sends.
    const link = Number.isFinite(rx) && Number.isFinite(tx) ? { bytesIn: tx, bytesOut: rx } : null;
    const ip = formatIpv4(a.slot.sandboxIp);
    return a.counters.usage(link, this.denied?.counts.get(ip) ?? 0, this.denied?.dns.get(ip) ?? 0);
  }

  /** Prometheus lines for every sandbox with a network. */
  async metrics(): Promise<string> {
    const rows: string[] = [];
    for (const id of this.bySandbox.keys()) {
      const u = await this.usage(id);
      if (!u) continue;
      const l = `{sandbox="${id}"}`;
      rows.push(
        `warren_sandbox_network_bytes_in${l} ${u.bytesIn}`,
        `warren_sandbox_network_bytes_out${l} ${u.bytesOut}`,
        `warren_sandbox_network_connections_allowed${l} ${u.connectionsAllowed}`,
        `warren_sandbox_network_connections_denied${l} ${u.connectionsDenied}`,
      );
    }
    const head = ['bytes_in', 'bytes_out', 'connections_allowed', 'connections_denied'].map((n) => `# TYPE warren_sandbox_network_${n} counter`);
    return rows.length ? [...head, ...rows].join('\n') + '\n' : '';
  }

  /** The kernel's counts of refused connections and dropped DNS queries per sandbox, read at most once a second. */
  private async readDenied(): Promise<void> {
    if (this.denied && Date.now() - this.denied.at < 1000) return;
    this.deniedRead ??= (async () => {
      try {
        const [direct, dns] = await Promise.all(['denied', 'dns_limited'].map((set) => this.capture('nft', ['-j', 'list', 'set', 'inet', this.table, set])));
        this.denied = { at: Date.now(), counts: parseDeniedSet(direct!), dns: parseDeniedSet(dns!) };
      } catch {
        this.denied = { at: Date.now(), counts: this.denied?.counts ?? new Map<string, number>(), dns: this.denied?.dns ?? new Map<string, number>() };
      } finally {
        this.deniedRead = null;
      }
    })();
    await this.deniedRead;
  }

  /**
   * Where the proxy connects for an allowed name: the operator's hosts map, else DNS, skipping
   * internal addresses (private, loopback, link-local, this host's own) unless a CIDR rule of the
   * sandbox names them, and the always-denied ones (the cluster's hosts) whatever its rules.
   */
  private async resolve(name: string, policy: CompiledPolicy): Promise<string> {
    const mapped = this.hosts.get(name);
    if (mapped) return mapped;
    const addrs = await lookup(name, { all: true, family: 4 });
    for (const { address } of addrs) {
      const ip = parseIpv4(address);
      if (ip === null || policy.denyCidrs.some((c) => cidrHas(c, ip)) || this.alwaysDeny.some((c) => cidrHas(c, ip))) continue;
      const internal = INTERNAL.some((c) => cidrHas(c, ip)) || this.ownAddresses.includes(ip) || cidrHas(this.block, ip);
      if (!internal || (addressAllowed(policy, ip) && !cidrHas(this.block, ip) && !this.ownAddresses.includes(ip))) return address;
    }
    throw new Error(`${name} resolves only to addresses a sandbox may not reach`);
  }

  /** Refills the pool in the background (a create that took a namespace is done with the helper). */
  topUp(): void {
    this.refill();
  }

  /** Keeps the pool full in the background, a few namespaces at a time. */
  private refill(): void {
    if (this.filling || this.closed || this.pool.length >= this.poolSize) return;
    this.filling = (async () => {
      while (!this.closed && this.pool.length < this.poolSize) {
        const ready = await this.prepare(Math.min(8, this.poolSize - this.pool.length));
        if (this.closed) await Promise.all(ready.map((r) => this.o.host.netnsClose(r.fd).catch(() => undefined)));
        else this.pool.push(...ready);
      }
    })()
      .catch((e: unknown) => this.o.logger.warn('could not prepare sandbox networks', { error: String(e) }))
      .finally(() => {
        this.filling = null;
      });
  }

  private allocate(): Slot {
    const n = slotCount(this.block);
    for (let tries = 0; tries < n; tries++) {
      const i = this.nextIndex;
      this.nextIndex = (this.nextIndex + 1) % n;
      // Round robin: an address (and its counters and conntrack entries) is reused as late as possible.
      if (!this.used.has(i)) {
        this.used.add(i);
        return slot(this.block, this.ifPrefix, i);
      }
    }
    throw new WarrenError('resource_exhausted', `this node's sandbox network block ${formatCidr(this.block)} is full`);
  }

  /** n namespaces, each with its veth, addresses and default route. */
  private async prepare(n: number): Promise<Ready[]> {
    const fds: number[] = [];
    const slots: Slot[] = [];
    try {
      for (let i = 0; i < n; i++) {
        fds.push(await this.o.host.netns());
        slots.push(this.allocate());
      }
      const pid = this.o.host.pid;
      // Over rtnetlink in the helper: no ip(8) on the host and in each namespace.
      await Promise.all(slots.map((s, i) => this.o.host.veth(fds[i]!, s.hostIf, formatIpv4(s.hostIp), formatIpv4(s.sandboxIp))));
      return slots.map((s, i) => ({ slot: s, fd: fds[i]!, pid }));
    } catch (e) {
      // Closing a namespace removes its veth (both ends) with it.
      await Promise.all(fds.map((fd) => this.o.host.netnsClose(fd).catch(() => undefined)));
      for (const s of slots) this.used.delete(s.index);
      if (e instanceof WarrenError && e.code === 'resource_exhausted') throw e;
      throw new WarrenError('unavailable', 'could not set up the sandbox network', {}, { cause: e });
    }
  }

  private async ip(batch: string, opts: { netns?: string; force?: boolean } = {}): Promise<void> {
    const args = [...(opts.force ? ['-force'] : []), '-batch'];
    if (opts.netns) await this.runWith('nsenter', [`--net=${opts.netns}`, 'ip', ...args], batch);
    else await this.runWith('ip', args, batch);
  }

  private async nft(script: string): Promise<void> {
    await this.runWith('nft', ['-f'], script);
  }

  /** Runs a program through the helper with its input in a file (the last argument). */
  private async runWith(file: string, args: string[], input: string): Promise<void> {
    const base = join(this.netDir, `${process.pid}.${this.seq++}`);
    await writeFile(`${base}.in`, input);
    try {
      const status = await this.o.host.run(file, [...args, `${base}.in`], { logFile: `${base}.log` });
      if (status !== 0) {
        const log = (await readFile(`${base}.log`, 'utf8').catch(() => '')).trim().split('\n').slice(-3).join(' | ');
        throw new Error(`${file} exited ${status}: ${log}`);
      }
    } finally {
      await Promise.all([unlink(`${base}.in`).catch(() => undefined), unlink(`${base}.log`).catch(() => undefined)]);
    }
  }

  /** A program's stdout, through the helper (its stderr is the log; the shell swaps them). */
  private async capture(file: string, args: string[]): Promise<string> {
    const base = join(this.netDir, `${process.pid}.${this.seq++}`);
    try {
      const status = await this.o.host.run('sh', ['-c', 'exec "$@" 1>&2 2>/dev/null', 'sh', file, ...args], { logFile: `${base}.out` });
      if (status !== 0) throw new Error(`${file} exited ${status}`);
      return await readFile(`${base}.out`, 'utf8');
    } finally {
      await unlink(`${base}.out`).catch(() => undefined);
    }
  }

  /** Stops the proxy; unless sandboxes are kept running, removes the node's rules and pool. */
  async close(opts: { keep: boolean }): Promise<void> {
    this.closed = true;
    await this.filling;
    await this.proxy.close();
    const held = this.pool.splice(0).filter((r) => r.pid === this.o.host.pid);
    await Promise.all(held.map((r) => this.o.host.netnsClose(r.fd).catch(() => undefined)));
    if (opts.keep) return;
    await this.nft(`table inet ${this.table}\ndelete table inet ${this.table}\n`).catch(() => undefined);
    await this.ip(`route del unreachable ${formatCidr(this.block)}\n`, { force: true }).catch(() => undefined);
    if (this.turnedForwardingOn) {
      await writeFile('/proc/sys/net/ipv4/ip_forward', '0').catch(() => undefined);
      this.turnedForwardingOn = false;
      await this.saveState().catch(() => undefined);
    }
  }
}
