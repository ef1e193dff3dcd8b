import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync, spawn, type ChildProcess } from 'node:child_process';
import { createServer as createHttpServer, request, type Server } from 'node:http';
import { createServer as createHttpsServer } from 'node:https';
import { readFile, readdir, rm } from 'node:fs/promises';
import { randomBytes, randomInt } from 'node:crypto';
import { join } from 'node:path';
import type { Sandbox } from '@warren/sdk';
import type { AuditEntry } from '@warren/api';
import type { WarrenOptions } from '@warren/server';
import { nodeTag, sandboxResolvConf } from '@warren/edge';
import { errorCode, http, ownedTempDir, startTestWarren, type TestWarren, until } from './harness.js';

/**
 * A probe run inside sandboxes (debian-python): each command prints one line that the test
 * asserts on. Timeouts are short: a dropped packet shows as "timeout".
 */
const PROBE = String.raw`
import socket, ssl, sys, time, struct, random
def err(e):
    if isinstance(e, socket.timeout): return 'timeout'
    if isinstance(e, socket.gaierror): return 'nxdomain'
    return type(e).__name__ + ':' + str(getattr(e, 'errno', '') or '')
cmd, args = sys.argv[1], sys.argv[2:]
try:
    if cmd == 'resolve':
        print(socket.gethostbyname(args[0]))
    elif cmd == 'http':
        host, port, hosthdr = args[0], int(args[1]), args[2]
        s = socket.create_connection((host, port), timeout=3)
        s.sendall(('GET /simple/ HTTP/1.1\r\nHost: %s\r\nConnection: keep-alive\r\n\r\n' % hosthdr).encode())
        data = b''
        while True:
            d = s.recv(65536)
            if not d: break
            data += d
        print(data.split(b'\r\n')[0].decode() + ' | ' + data.split(b'\r\n\r\n', 1)[-1].decode().strip())
    elif cmd == 'tls':
        host, port, sni = args[0], int(args[1]), args[2]
        ctx = ssl.create_default_context(); ctx.check_hostname = False; ctx.verify_mode = ssl.CERT_NONE
        s = ctx.wrap_socket(socket.create_connection((host, port), timeout=3), server_hostname=sni)
        s.sendall(('GET / HTTP/1.1\r\nHost: %s\r\nConnection: close\r\n\r\n' % sni).encode())
        data = b''
        while True:
            d = s.recv(65536)
            if not d: break
            data += d
        print(data.split(b'\r\n\r\n', 1)[-1].decode().strip())
    elif cmd == 'connect':
        s = socket.create_connection((args[0], int(args[1])), timeout=float(args[2]) if len(args) > 2 else 1.5)
        print('connected')
    elif cmd == 'connect6':
        s = socket.socket(socket.AF_INET6, socket.SOCK_STREAM); s.settimeout(1.5)
        s.connect((args[0], int(args[1]), 0, socket.if_nametoindex('eth0') if args[0].startswith('fe80') else 0))
        print('connected')
    elif cmd == 'flood':
        n = int(args[2]); t = time.time()
        for i in range(n):
            s = socket.socket(); s.setblocking(False)
            s.connect_ex((args[0], int(args[1])))
            s.close()
        print('sent %d in %.1fs' % (n, time.time() - t))
    elif cmd == 'hold':
        n = int(args[2]); socks = []; addr = socket.gethostbyname(args[0])
        for i in range(n):
            s = socket.socket(); s.settimeout(2)
            try:
                s.connect((addr, int(args[1]))); socks.append(s)
            except Exception: pass
        time.sleep(0.5)
        alive = 0
        for s in socks:
            s.setblocking(False)
            try:
                d = s.recv(1)
                if d: alive += 1
            except BlockingIOError: alive += 1
            except Exception: pass
        print('open %d of %d' % (alive, n))
    elif cmd == 'burst':
        n = int(args[2]); refused = 0; addr = socket.gethostbyname(args[0])
        for i in range(n):
            try:
                socket.create_connection((addr, int(args[1])), timeout=2).close()
            except ConnectionRefusedError: refused += 1
        print('refused %d of %d' % (refused, n))
    elif cmd == 'dns':
        server, name, qtype = args[0], args[1], int(args[2]) if len(args) > 2 else 1
        q = struct.pack('>HHHHHH', random.randint(0, 65535), 0x0100, 1, 0, 0, 0)
        q += b''.join(bytes([len(l)]) + l.encode() for l in name.split('.')) + b'\0' + struct.pack('>HH', qtype, 1)
        s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); s.settimeout(2)
        s.sendto(q, (server, 53))
        r = s.recv(512)
        print('rcode=%d answers=%d' % (r[3] & 15, struct.unpack('>H', r[6:8])[0]))
    elif cmd == 'dnseach':
        # One query a name, paced under the node's DNS rate (50 a second after a burst of 100).
        server = args[0]
        for name in args[1:]:
            q = struct.pack('>HHHHHH', random.randint(0, 65535), 0x0100, 1, 0, 0, 0)
            q += b''.join(bytes([len(l)]) + l.encode() for l in name.split('.')) + b'\0' + struct.pack('>HH', 1, 1)
            s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); s.settimeout(2)
            s.sendto(q, (server, 53))
            try:
                r = s.recv(512)
                print('rcode=%d answers=%d' % (r[3] & 15, struct.unpack('>H', r[6:8])[0]))
            except socket.timeout:
                print('timeout')
            s.close(); time.sleep(0.025)
    elif cmd == 'dnsflood':
        server, n, secs = args[0], int(args[1]), float(args[2])
        name = b''.join(bytes([len(l)]) + l.encode() for l in 'a.pyfiles.example'.split('.')) + b'\0'
        s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); s.setblocking(False)
        sent = got = 0; t = time.time()
        while sent < n and time.time() - t < secs:
            try:
                s.sendto(struct.pack('>HHHHHH', sent & 0xffff, 0x0100, 1, 0, 0, 0) + name + struct.pack('>HH', 1, 1), (server, 53)); sent += 1
            except BlockingIOError: pass
            try:
                while True: s.recv(512); got += 1
            except BlockingIOError: pass
        end = time.time() + 0.5
        while time.time() < end:
            try: s.recv(512); got += 1
            except BlockingIOError: time.sleep(0.01)
        print('sent %d answered %d in %.2fs' % (sent, got, time.time() - t - 0.5))
    elif cmd == 'serve':
        port = int(args[0])
        srv = socket.socket(); srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        srv.bind(('0.0.0.0', port)); srv.listen(16)
        open('/tmp/serving-%d' % port, 'w').close()
        while True:
            c, _ = srv.accept()
            head = b''
            while b'\r\n\r\n' not in head:
                d = c.recv(4096)
                if not d: break
                head += d
            if b'\r\n\r\n' not in head:
                c.close(); continue
            text = head.decode('latin1')
            if 'upgrade: ' in text.lower():
                c.sendall(b'HTTP/1.1 101 Switching Protocols\r\nUpgrade: echo\r\nConnection: Upgrade\r\n\r\n')
                while True:
                    d = c.recv(4096)
                    if not d: break
                    c.sendall(d)
            else:
                body = ('path=%s auth=%s' % (text.split(' ')[1], 'authorization:' in text.lower())).encode()
                c.sendall(b'HTTP/1.1 200 OK\r\nContent-Length: %d\r\nConnection: close\r\n\r\n' % len(body) + body)
            c.close()
except Exception as e:
    print(err(e))
`;

async function probe(sb: Sandbox, ...args: string[]): Promise<string> {
  const r = await sb.exec(['python3', '/tmp/probe.py', ...args], { timeoutMs: 60_000 });
  return r.stdout.trim();
}

/** Starts the probe's HTTP server on `port` in the background and waits until it listens. */
async function serve(sb: Sandbox, port: number): Promise<void> {
  void sb.exec(['python3', '/tmp/probe.py', 'serve', String(port)], { timeoutMs: 60_000 }).catch(() => undefined);
  await until(() => sb.files.exists(`/tmp/serving-${port}`), 20_000);
}

/** Creates a sandbox with the probe in it; the test removes it. */
async function box(t: TestWarren, network?: unknown, client = t.client): Promise<Sandbox> {
  return client.sandboxes.create({
    image: 'debian-python:latest',
    network: network as never,
    files: [{ path: '/tmp/probe.py', content: Buffer.from(PROBE).toString('base64') }],
  });
}

describe('sandbox network policy', () => {
  let t: TestWarren;
  const web = `127.${randomInt(100, 200)}.${randomInt(1, 250)}.1`;
  const servers: Server[] = [];
  let certDir = '';
  // A network namespace of the test's own with an HTTP server: the target of CIDR rules.
  const ns = `wtest${randomInt(1000, 9999)}`;
  const nsIf = `wt${randomInt(10000, 99999)}`;
  const sub = randomInt(1, 250);
  const cidrHost = `10.251.${sub}.2`;
  // Another address of that namespace, one the node names as a host of its cluster's.
  const clusterHost = `10.251.${sub}.3`;
  const netOptions = (): WarrenOptions['network'] => ({
    hosts: { 'pypi.example': web, 'files.pyfiles.example': web, 'registry.npm.example': web },
    poolSize: 4,
    maxConnectionsPerSandbox: 32,
    newConnectionsPerSecond: 100,
    dnsQueriesPerSecond: 50,
    deny: [`${clusterHost}/32`],
  });
  let nsServer: ChildProcess | null = null;

  before(async () => {
    certDir = await ownedTempDir('cert-');
    execFileSync(
      'openssl',
      [
        'req',
        '-x509',
        '-newkey',
        'rsa:2048',
        '-nodes',
        '-days',
        '1',
        '-subj',
        '/CN=test',
        '-keyout',
        join(certDir, 'key.pem'),
        '-out',
        join(certDir, 'cert.pem'),
      ],
      {
        stdio: 'ignore',
      },
    );
    const [key, cert] = await Promise.all([readFile(join(certDir, 'key.pem')), readFile(join(certDir, 'cert.pem'))]);
    const plain = createHttpServer((req, res) => res.end(`http ${req.headers.host ?? '-'} ${req.headers.connection ?? '-'}\n`));
    const tls = createHttpsServer({ key, cert }, (req, res) => {
      const name = (req.socket as unknown as { servername?: string }).servername ?? '-';
      res.end(`https sni=${name} host=${req.headers.host ?? '-'}\n`);
    });
    for (const [s, port] of [
      [plain, 80],
      [tls, 443],
    ] as const) {
      await new Promise<void>((resolve, reject) => {
        s.once('error', reject);
        s.listen(port, web, () => resolve());
      });
      servers.push(s);
    }
    execFileSync('sh', [
      '-c',
      `ip netns add ${ns} && ip link add ${nsIf} type veth peer name eth0 netns ${ns} && ip addr add 10.251.${sub}.1/29 dev ${nsIf} && ip link set ${nsIf} up && ` +
        `ip -n ${ns} addr add ${cidrHost}/29 dev eth0 && ip -n ${ns} addr add ${clusterHost}/29 dev eth0 && ip -n ${ns} link set eth0 up && ip -n ${ns} link set lo up && ip -n ${ns} route add default via 10.251.${sub}.1`,
    ]);
    nsServer = spawn(
      'ip',
      [
        'netns',
        'exec',
        ns,
        process.execPath,
        '-e',
        "require('http').createServer((q,r)=>{r.setHeader('connection','close');r.end('cidr '+q.socket.remoteAddress+'\\n')}).listen(8000)",
      ],
      { stdio: 'ignore' },
    );
    t = await startTestWarren({ images: ['busybox:latest', 'debian-python:latest'], network: netOptions() });
  });

  after(async () => {
    await t?.close();
    nsServer?.kill('SIGKILL');
    try {
      execFileSync('sh', ['-c', `ip link del ${nsIf}; ip netns del ${ns}`], { stdio: 'ignore' });
    } catch {
      /* gone */
    }
    for (const s of servers) s.close();
    await rm(certDir, { recursive: true, force: true });
  });

  test('egress deny with an allow list: those names over HTTP and HTTPS, nothing else; usage counts both', async () => {
    const sb = await box(t, { egress: 'deny', allow: ['pypi.example', '*.pyfiles.example'] });
    try {
      // The sysctls its namespace got (written through a procfs of warren-hostd's own): low ports
      // for every uid, no IPv6 on its link (the kernel's defaults are 1024 and 0).
      const sysctls = await sb.exec('cat /proc/sys/net/ipv4/ip_unprivileged_port_start /proc/sys/net/ipv6/conf/eth0/disable_ipv6');
      assert.equal(sysctls.stdout.replace(/\s+/g, ' ').trim(), '0 1', sysctls.stderr);
      assert.equal(await probe(sb, 'http', 'pypi.example', '80', 'pypi.example'), 'HTTP/1.1 200 OK | http pypi.example close');
      assert.equal(
        await probe(sb, 'tls', 'files.pyfiles.example', '443', 'files.pyfiles.example'),
        'https sni=files.pyfiles.example host=files.pyfiles.example',
      );
      // DNS answers allowed names only.
      assert.equal(await probe(sb, 'resolve', 'registry.npm.example'), 'nxdomain');
      assert.equal(await probe(sb, 'resolve', 'pyfiles.example'), 'nxdomain');
      // Aiming at an allowed name's address with another name: the name decides, not the address.
      const gw = await probe(sb, 'resolve', 'pypi.example');
      assert.match(await probe(sb, 'http', gw, '80', 'registry.npm.example'), /^HTTP\/1.1 403 Forbidden \| registry.npm.example is not allowed/);
      assert.match(await probe(sb, 'tls', gw, '443', 'registry.npm.example'), /^(SSLEOFError|ConnectionResetError|SSLZeroReturnError|OSError)/);
      assert.match(await probe(sb, 'http', gw, '80', gw), /^HTTP\/1.1 403 Forbidden/);
      const info = await sb.refresh();
      assert.deepEqual([info.network.egress, info.network.allow], ['deny', ['pypi.example', '*.pyfiles.example']]);
      assert.equal(info.network.usage.allowed['pypi.example'], 1);
      assert.equal(info.network.usage.allowed['files.pyfiles.example'], 1);
      assert.ok((info.network.usage.denied['registry.npm.example'] ?? 0) >= 3, JSON.stringify(info.network.usage));
      assert.ok(info.network.usage.bytesIn > 0 && info.network.usage.bytesOut > 0);
      const metrics = await (await fetch(`${t.url}/metrics`, { headers: { authorization: `Bearer ${t.key}` } })).text();
      assert.match(metrics, new RegExp(`warren_sandbox_network_connections_allowed\\{sandbox="${sb.id}"\\} 2`));
    } finally {
      await sb.delete();
    }
  });

  test('egress allow with a deny list reaches everything but what it names; no rules leaves nothing', async () => {
    const open = await box(t, { egress: 'allow', deny: ['registry.npm.example'] });
    const closed = await box(t, { egress: 'deny' });
    try {
      assert.equal(await probe(open, 'http', 'pypi.example', '80', 'pypi.example'), 'HTTP/1.1 200 OK | http pypi.example close');
      assert.equal(await probe(open, 'resolve', 'registry.npm.example'), 'nxdomain');
      assert.equal(
        await probe(open, 'tls', await probe(open, 'resolve', 'pypi.example'), '443', 'registry.npm.example').then((s) => s.startsWith('https')),
        false,
      );
      assert.equal(await probe(closed, 'resolve', 'pypi.example'), 'nxdomain');
      assert.match(
        await probe(
          closed,
          'http',
          (await closed.refresh()).network.address!.replace(/\d+$/, (n) => String(Number(n) - 1)),
          '80',
          'pypi.example',
        ),
        /403 Forbidden/,
      );
      assert.equal(await probe(closed, 'connect', cidrHost, '8000'), 'timeout');
    } finally {
      await Promise.all([open.delete(), closed.delete()]);
    }
  });

  test('PATCH replaces the rules of a running sandbox; new connections follow at once', async () => {
    const sb = await box(t, { egress: 'deny' });
    try {
      assert.equal(await probe(sb, 'resolve', 'pypi.example'), 'nxdomain');
      const info = await sb.setNetwork({ egress: 'deny', allow: ['pypi.example', `${cidrHost}/32`] });
      assert.deepEqual(info.network.allow, ['pypi.example', `${cidrHost}/32`]);
      assert.equal(await probe(sb, 'http', 'pypi.example', '80', 'pypi.example'), 'HTTP/1.1 200 OK | http pypi.example close');
      assert.equal(await probe(sb, 'connect', cidrHost, '8000'), 'connected');
      // Bad rules change nothing.
      const bad = await http(t, 'PATCH', `/v1/sandboxes/${sb.id}/network`, { egress: 'deny', allow: ['*.com'] });
      assert.equal(errorCode(bad), 'invalid_argument');
      assert.equal(await probe(sb, 'resolve', 'pypi.example').then((a) => a !== 'nxdomain'), true);
      await http(t, 'PATCH', `/v1/sandboxes/${sb.id}/network`, { egress: 'deny', allow: [] });
      assert.equal(await probe(sb, 'resolve', 'pypi.example'), 'nxdomain');
      assert.equal(await probe(sb, 'connect', cidrHost, '8000'), 'timeout');
    } finally {
      await sb.delete();
    }
  });

  test('CIDR rules: direct connections to what allow names, minus deny; other sandboxes stay out', async () => {
    const a = await box(t, { egress: 'deny', allow: [`10.251.${sub}.0/30`] });
    const b = await box(t, { egress: 'deny', allow: [`10.251.${sub}.0/30`], deny: [`${cidrHost}/32`] });
    const c = await box(t, { egress: 'allow' });
    try {
      assert.match(await probe(a, 'http', cidrHost, '8000', 'x'), /^HTTP\/1.1 200 OK \| cidr /);
      assert.equal(await probe(b, 'connect', cidrHost, '8000'), 'timeout');
      // egress allow opens names, not addresses.
      assert.equal(await probe(c, 'connect', cidrHost, '8000'), 'timeout');
    } finally {
      await Promise.all([a.delete(), b.delete(), c.delete()]);
    }
  });

  test('the cluster’s own hosts are out of reach whatever the rules: a CIDR rule that names one is dropped for it, and another address it names is reached', async () => {
    const a = await box(t, { egress: 'deny', allow: [`10.251.${sub}.0/29`] });
    try {
      // The denied address listens (the host reaches it), and the same rule reaches its neighbour.
      assert.match(await (await fetch(`http://${clusterHost}:8000/`)).text(), /^cidr /);
      assert.match(await probe(a, 'http', cidrHost, '8000', 'x'), /^HTTP\/1.1 200 OK \| cidr /);
      // Dropped, not refused: a refusal would come back at once (0.5 s is long enough to tell).
      assert.equal(await probe(a, 'connect', clusterHost, '8000', '0.5'), 'timeout');
      assert.equal(await probe(a, 'connect', clusterHost, '80', '0.5'), 'timeout', 'port 80, which a CIDR rule routes instead of the proxy');
    } finally {
      await a.delete();
    }
  });

  test('nothing of the host, other sandboxes, link-local or IPv6 is reachable', async () => {
    const a = await box(t, { egress: 'allow', allow: ['0.0.0.0/0'] });
    const b = await box(t, { egress: 'allow' });
    try {
      const api = new URL(t.url).port;
      const aInfo = await a.refresh();
      const bAddr = (await b.refresh()).network.address!;
      const gw = await probe(a, 'resolve', 'pypi.example');
      const hostIps = execFileSync('sh', ['-c', "ip -4 -o addr show scope global | awk '{print $4}' | cut -d/ -f1"])
        .toString()
        .trim()
        .split('\n')
        .filter(Boolean);
      // Another sandbox, even with a listener and a rule naming every address. The listener is
      // shown to answer where it should (its own loopback, and the node through the port proxy)
      // before its being out of a's reach means anything.
      await serve(b, 8080);
      assert.equal(await probe(b, 'connect', '127.0.0.1', '8080'), 'connected', 'the listener, from its own sandbox');
      assert.equal((await http(t, 'GET', `/v1/sandboxes/${b.id}/ports/8080/x`)).text, 'path=/x auth=False', 'the listener, from the node');
      // What a must not reach, probed side by side (each a timeout of its own).
      const out = await Promise.all([
        probe(a, 'connect', gw, api).then((r) => ['the API through the link', r]),
        ...hostIps.filter((ip) => !/^10\.(251|20[0-7])\./.test(ip)).map((ip) => probe(a, 'connect', ip, api).then((r) => [`the API at ${ip}`, r])),
        probe(a, 'connect', bAddr, '8080').then((r) => ['another sandbox', r]),
        probe(a, 'connect', '169.254.169.254', '8080').then((r) => ['link-local', r]),
        // Port 80 of any address goes to the proxy (which refuses addresses), unless a CIDR rule
        // names it: then it is routed, and link-local is dropped.
        probe(a, 'http', '169.254.169.254', '80', 'pypi.example').then((r) => ['metadata over HTTP, CIDR-allowed', r]),
      ]);
      for (const [what, r] of out) assert.equal(r, 'timeout', what);
      assert.equal(await probe(a, 'connect', '127.0.0.1', api), 'ConnectionRefusedError:111', "loopback is the sandbox's own");
      assert.match(await probe(b, 'http', '169.254.169.254', '80', '169.254.169.254'), /403 Forbidden/, 'metadata over HTTP');
      assert.match(await probe(a, 'connect6', '::ffff:' + gw, api), /timeout|OSError|ConnectionRefused/, 'IPv4-mapped IPv6');
      const v6 = (await a.exec(['sh', '-c', 'cat /proc/net/if_inet6 | grep -v " lo$" || true'])).stdout.trim();
      assert.equal(v6, '', 'no IPv6 address on the link');
      // Root in the sandbox cannot take another address on its link.
      const r = await a.exec(['sh', '-c', `/.warren/busybox ip addr add ${bAddr}/31 dev eth0 2>&1`]);
      assert.match(r.stdout, /not permitted/i);
      assert.ok(aInfo.network.address);
    } finally {
      await Promise.all([a.delete(), b.delete()]);
    }
  });

  test('DNS: queries to any server are answered here, never forwarded; odd queries fail cleanly', async () => {
    const sb = await box(t, { egress: 'deny', allow: ['*.pyfiles.example'] });
    try {
      // Its resolv.conf (written at create) names the node's resolver: the far end of its default route.
      const route = `import socket,struct;r=[l.split() for l in open('/proc/net/route')][1:];print(socket.inet_ntoa(struct.pack('<L',int(next(x for x in r if x[1]=='00000000')[2],16))))`;
      const gateway = (await sb.exec(`python3 -c "${route}"`)).stdout.trim();
      assert.match(gateway, /^\d+\.\d+\.\d+\.\d+$/);
      assert.equal((await sb.exec('cat /etc/resolv.conf')).stdout, sandboxResolvConf(gateway).toString());
      assert.equal(await probe(sb, 'dns', '192.0.2.53', 'files.pyfiles.example'), 'rcode=0 answers=1');
      assert.equal(await probe(sb, 'dns', '8.8.8.8', 'registry.npm.example'), 'rcode=3 answers=0');
      assert.equal(await probe(sb, 'dns', '8.8.8.8', 'files.pyfiles.example', '16'), 'rcode=0 answers=0', 'TXT: no data');
      // Tunnelling-style names: all refused and counted, at most 100 kept by name.
      const names = Array.from({ length: 150 }, (_, i) => `c${i}${randomBytes(12).toString('hex')}.t.evil.example`);
      const answers = (await probe(sb, 'dnseach', '8.8.8.8', ...names)).split('\n');
      assert.deepEqual(new Set(answers), new Set(['rcode=3 answers=0']));
      assert.equal(answers.length, 150);
      const u = (await sb.refresh()).network.usage;
      assert.ok(u.connectionsDenied >= 151, JSON.stringify(u.connectionsDenied));
      assert.ok(Object.keys(u.denied).length <= 101);
      assert.ok((u.denied['(other)'] ?? 0) >= 50);
    } finally {
      await sb.delete();
    }
  });

  test('a DNS flood is cut to its rate in the kernel and counted; another sandbox is answered meanwhile', async () => {
    const [a, b] = await Promise.all([box(t, { egress: 'deny', allow: ['*.pyfiles.example'] }), box(t, { egress: 'deny', allow: ['*.pyfiles.example'] })]);
    try {
      const [flood, other] = await Promise.all([
        probe(a, 'dnsflood', '192.0.2.53', '50000', '3'),
        (async () => {
          const out: string[] = [];
          for (let i = 0; i < 3; i++) out.push(await probe(b, 'dns', '192.0.2.53', 'files.pyfiles.example'));
          return out;
        })(),
      ]);
      const m = /^sent (\d+) answered (\d+) in ([\d.]+)s$/.exec(flood);
      assert.ok(m, flood);
      const [sent, answered, secs] = [Number(m[1]), Number(m[2]), Number(m[3])];
      // This node's rate: 50 a second, a burst of 100 first.
      assert.ok(sent > 2000, flood);
      assert.ok(answered <= 100 + 50 * (secs + 1), flood);
      assert.ok(answered >= 50, flood);
      assert.deepEqual(other, ['rcode=0 answers=1', 'rcode=0 answers=1', 'rcode=0 answers=1']);
      const u = (await a.refresh()).network.usage;
      assert.ok((u.denied['(DNS rate limit)'] ?? 0) >= sent - answered - 100, JSON.stringify(u.denied));
      assert.equal((await b.refresh()).network.usage.denied['(DNS rate limit)'], undefined);
    } finally {
      await Promise.all([a.delete(), b.delete()]);
    }
  });

  test('100,000 connection attempts are dropped and counted; the proxy holds a limit; others keep their network', async () => {
    const noisy = await box(t, { egress: 'deny', allow: ['pypi.example'] });
    const quiet = await box(t, { egress: 'deny', allow: ['pypi.example'] });
    try {
      const flood = probe(noisy, 'flood', cidrHost, '9', '100000');
      assert.equal(await probe(quiet, 'http', 'pypi.example', '80', 'pypi.example'), 'HTTP/1.1 200 OK | http pypi.example close');
      assert.match(await flood, /^sent 100000 /);
      // 64 connections held open to the proxy: the node allows 32 per sandbox.
      const held = await probe(noisy, 'hold', 'pypi.example', '80', '64');
      const open = Number(/open (\d+) of 64/.exec(held)?.[1]);
      assert.ok(open <= 32 && open >= 16, held);
      assert.equal(await probe(quiet, 'http', 'pypi.example', '80', 'pypi.example'), 'HTTP/1.1 200 OK | http pypi.example close');
      // New connections past 100 a second (a burst of 200) are refused by the kernel. The wait is
      // the time its token bucket takes to refill after the holds above, not a guess at readiness.
      await new Promise((r) => setTimeout(r, 2100));
      const burst = await probe(noisy, 'burst', 'pypi.example', '80', '1000');
      const refused = Number(/refused (\d+) of 1000/.exec(burst)?.[1]);
      assert.ok(refused >= 100, burst);
      assert.equal(await probe(quiet, 'http', 'pypi.example', '80', 'pypi.example'), 'HTTP/1.1 200 OK | http pypi.example close');
      // The node reads its counters on its own beat: wait for the flood to show.
      let u = (await noisy.refresh()).network.usage;
      await until(async () => ((u = (await noisy.refresh()).network.usage).denied['(direct address)'] ?? 0) >= 100_000, 10_000).catch(() => undefined);
      assert.ok((u.denied['(direct address)'] ?? 0) >= 100_000, JSON.stringify(u));
    } finally {
      await Promise.all([noisy.delete(), quiet.delete()]);
    }
  });

  test('ports: HTTP and upgrades reach a port inside, with the owner key only, which is not passed on', async () => {
    const sb = await box(t, { egress: 'deny' });
    try {
      await serve(sb, 8080);
      const r = await http(t, 'GET', `/v1/sandboxes/${sb.id}/ports/8080/a/b?c=1`);
      assert.equal(r.status, 200);
      assert.equal(r.text, 'path=/a/b?c=1 auth=False');
      assert.equal(errorCode(await http(t, 'GET', `/v1/sandboxes/${sb.id}/ports/8081/`)), 'unavailable');
      assert.equal(errorCode(await http(t, 'GET', `/v1/sandboxes/${sb.id}/ports/70000/`)), 'invalid_argument');
      assert.equal(errorCode(await http(t, 'GET', `/v1/sandboxes/%E0%A4%A/ports/8080/`)), 'invalid_argument');
      const other = await http(t, 'POST', '/v1/keys', { tenant: 'someone-else' });
      const otherKey = (other.json as { key: string }).key;
      assert.equal(errorCode(await http(t, 'GET', `/v1/sandboxes/${sb.id}/ports/8080/`, undefined, { authorization: `Bearer ${otherKey}` })), 'not_found');
      assert.equal((await fetch(`${t.url}/v1/sandboxes/${sb.id}/ports/8080/`)).status, 401);
      // An upgrade: the echo server inside answers 101, then bytes go both ways.
      const echoed = await new Promise<string>((resolve, reject) => {
        const u = new URL(t.url);
        const req = request({
          host: u.hostname,
          port: u.port,
          path: `/v1/sandboxes/${sb.id}/ports/8080/ws`,
          headers: { authorization: `Bearer ${t.key}`, connection: 'Upgrade', upgrade: 'echo' },
        });
        req.on('upgrade', (res, socket) => {
          assert.equal(res.statusCode, 101);
          socket.write('ping');
          socket.once('data', (d: Buffer) => {
            resolve(d.toString());
            socket.destroy();
          });
        });
        req.on('response', (res) => reject(new Error(`no upgrade: ${res.statusCode}`)));
        req.on('error', reject);
        req.end();
      });
      assert.equal(echoed, 'ping');
      // Each connection is an audit entry, as a call of the contract is: who, where, how it ended.
      const base = `/v1/sandboxes/${sb.id}/ports`;
      const entries = ((await http(t, 'GET', `/v1/audit?sandbox=${sb.id}&limit=10000`)).json as { entries: AuditEntry[] }).entries
        .filter((e) => e.path.startsWith(base))
        .map(
          (e) =>
            `${e.method} ${e.path.slice(base.length)} ${e.status} ${e.code ?? 'null'} ${e.keyId === 'admin' ? 'admin' : e.keyId === null ? 'none' : 'other'}`,
        )
        .sort();
      assert.deepEqual(entries, [
        'GET /8080 101 null admin',
        'GET /8080 200 null admin',
        'GET /8080 401 unauthenticated none',
        'GET /8080 404 not_found other',
        'GET /8081 503 unavailable admin',
      ]);
    } finally {
      await sb.delete();
    }
  });

  test('a node restarted with its sandboxes kept takes their networks back; they stay confined meanwhile', async () => {
    const sb = await box(t, { egress: 'deny', allow: ['pypi.example', `${cidrHost}/32`] });
    const id = sb.id;
    const dataDir = t.dataDir;
    await t.close({ keep: true });
    // While no Warren runs, the node's rules still hold: the proxy is gone, nothing else opens.
    const table = execFileSync('nft', ['list', 'tables']).toString();
    assert.match(table, /warren_/);
    t = await startTestWarren({ dataDir, images: ['busybox:latest', 'debian-python:latest'], network: netOptions() });
    const back = await t.client.sandboxes.get(id);
    try {
      assert.equal(back.info.state, 'running');
      assert.equal(await probe(back, 'http', 'pypi.example', '80', 'pypi.example'), 'HTTP/1.1 200 OK | http pypi.example close');
      assert.equal(await probe(back, 'connect', cidrHost, '8000'), 'connected');
      assert.equal(await probe(back, 'resolve', 'registry.npm.example'), 'nxdomain');
      await back.setNetwork({ egress: 'deny' });
      assert.equal(await probe(back, 'connect', cidrHost, '8000'), 'timeout');
      // A new sandbox does not get the kept one's address.
      const fresh = await box(t, { egress: 'deny' });
      assert.notEqual((await fresh.refresh()).network.address, back.info.network.address);
      await fresh.delete();
    } finally {
      await back.delete();
    }
  });

  test('bad rules are refused at create with the rule named; wide CIDRs need a key that may', async () => {
    for (const rule of ['*', '*.com', 'foo..bar', 'pypi.example/x', '::/0', '10.0.0.1/8']) {
      const r = await http(t, 'POST', '/v1/sandboxes', { image: 'busybox:latest', network: { egress: 'deny', allow: [rule] } });
      assert.equal(errorCode(r), 'invalid_argument', rule);
      assert.ok(r.text.includes(JSON.stringify(rule).slice(1, -1).slice(0, 6)), r.text);
    }
    const user = (await http(t, 'POST', '/v1/keys', { tenant: 'netuser' })).json as { key: string };
    const wide = await http(
      t,
      'POST',
      '/v1/sandboxes',
      { image: 'busybox:latest', network: { egress: 'deny', allow: ['0.0.0.0/0'] } },
      { authorization: `Bearer ${user.key}` },
    );
    assert.equal(errorCode(wide), 'permission_denied');
    const narrow = await http(
      t,
      'POST',
      '/v1/sandboxes',
      { image: 'busybox:latest', network: { egress: 'deny', allow: ['10.9.0.0/16'] } },
      { authorization: `Bearer ${user.key}` },
    );
    assert.equal(narrow.status, 201, narrow.text);
    await http(t, 'DELETE', `/v1/sandboxes/${(narrow.json as { id: string }).id}`);
    const list = await http(t, 'GET', '/v1/sandboxes?state=failed', undefined, { authorization: `Bearer ${user.key}` });
    assert.deepEqual((list.json as { sandboxes: unknown[] }).sandboxes, [], 'refused creates leave no sandbox');
  });

  test('the pool of namespaces is made again after creates (not while they wait on the helper): after one, and after a burst', async () => {
    // Each namespace, ready or a sandbox's, has its link's host end on the host: the pool's size (4) more than the sandboxes.
    const links = async (): Promise<number> => (await readdir('/sys/class/net')).filter((n) => n.startsWith(`wn${nodeTag(t.dataDir)}`)).length;
    const live = async (): Promise<number> =>
      (await t.client.sandboxes.list()).sandboxes.filter((s) => s.info.state === 'running' || s.info.state === 'paused').length;
    const full = async (): Promise<boolean> => (await links()) === (await live()) + 4;
    await until(full, 15_000);
    const made = [await t.client.sandboxes.create({ image: 'busybox:latest' })];
    try {
      await until(full, 15_000);
      made.push(...(await Promise.all([1, 2, 3].map(() => t.client.sandboxes.create({ image: 'busybox:latest' })))));
      await until(full, 15_000);
      // warren-hostd writes each new namespace's sysctls through one procfs of its own, kept for
      // many namespaces: each sandbox has its own namespace's values.
      for (const sb of made) {
        const r = await sb.exec('cat /proc/sys/net/ipv4/ip_unprivileged_port_start /proc/sys/net/ipv6/conf/eth0/disable_ipv6');
        assert.equal(r.stdout.replace(/\s+/g, ' ').trim(), '0 1', r.stderr);
      }
      // Each link is made with one queue each way (not one per CPU, then cut down).
      const ours = (await readdir('/sys/class/net')).filter((n) => n.startsWith(`wn${nodeTag(t.dataDir)}`));
      for (const dev of ours) {
        const [info] = JSON.parse(execFileSync('ip', ['-d', '-j', 'link', 'show', 'dev', dev]).toString()) as Array<{
          num_tx_queues: number;
          num_rx_queues: number;
        }>;
        assert.deepEqual([info?.num_tx_queues, info?.num_rx_queues], [1, 1], dev);
      }
    } finally {
      await Promise.all(made.map((s) => s.delete()));
    }
  });
});

describe('a node without sandbox networking', () => {
  test('gives loopback only and refuses rules that open anything', async () => {
    const t = await startTestWarren({ network: false });
    try {
      const r = await http(t, 'POST', '/v1/sandboxes', { image: 'busybox:latest', network: { egress: 'deny', allow: ['pypi.example'] } });
      assert.equal(errorCode(r), 'invalid_argument');
      const sb = await t.client.sandboxes.create({ image: 'busybox:latest' });
      const links = await sb.exec(['sh', '-c', 'ls /sys/class/net']);
      assert.equal(links.stdout.trim(), 'lo');
      assert.equal((await sb.refresh()).network.address, null);
      assert.equal(errorCode(await http(t, 'PATCH', `/v1/sandboxes/${sb.id}/network`, { egress: 'allow' })), 'invalid_argument');
    } finally {
      await t.close();
    }
  });
});

describe('nodes on one host', () => {
  test('each holds a block of its own from its start, even before its first sandbox and whatever its tag; the last stop lets it go', async () => {
    // Two data dirs whose tags start the block search at the same place (the node's tag picks it).
    const start = (dir: string): number => parseInt(nodeTag(dir), 36) % 16;
    const dirs: string[] = [];
    while (dirs.length < 2) {
      const d = await ownedTempDir('blocks-');
      if (dirs.length === 0 || start(d) === start(dirs[0]!)) dirs.push(d);
      else await rm(d, { recursive: true, force: true });
    }
    const blockOf = async (dir: string): Promise<string> => (JSON.parse(await readFile(join(dir, 'network.json'), 'utf8')) as { block: string }).block;
    const held = (): string => execFileSync('ip', ['route', 'show', 'type', 'unreachable']).toString();
    // No namespaces kept ready: a node's block then has no route of a sandbox's until its first create.
    const a = await startTestWarren({ dataDir: dirs[0], network: { poolSize: 0 } });
    let b: TestWarren | null = null;
    try {
      b = await startTestWarren({ dataDir: dirs[1], network: { poolSize: 0 } });
      const [ba, bb] = [await blockOf(dirs[0]!), await blockOf(dirs[1]!)];
      assert.notEqual(ba, bb, 'the second node passed over the first one’s block');
      for (const block of [ba, bb]) assert.match(held(), new RegExp(`^unreachable ${block.replace(/\./g, '\\.')}(\\s|$)`, 'm'));
      const sb = await b.client.sandboxes.create({ image: 'busybox:latest' });
      assert.equal((await sb.exec(['sh', '-c', 'echo ok'])).stdout, 'ok\n');
      await b.close();
      b = null;
      assert.doesNotMatch(held(), new RegExp(`^unreachable ${bb.replace(/\./g, '\\.')}(\\s|$)`, 'm'), 'a stopped node lets its block go');
    } finally {
      await b?.close();
      await a.close();
    }
  });
});
