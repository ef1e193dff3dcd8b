import { test } from 'node:test';
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { createServer, type AddressInfo } from 'node:net';
import { promisify } from 'node:util';
import { HostHelper } from '@warren/edge';
import { until } from './harness.js';

// warren-hostd links a sandbox's network namespace to the host over rtnetlink (no ip(8) runs):
// eth0 inside with its address, up, and its default route; the peer on the host with its own.
const HOSTD = new URL('../../native/build/warren-hostd', import.meta.url).pathname;
const run = promisify(execFile);

interface IpAddr {
  ifname: string;
  operstate: string;
  addr_info: Array<{ family: string; local: string; prefixlen: number }>;
}

test("a namespace's veth: eth0 with its address, up, routed via the host's side; the host's side addressed, up; both gone with the namespace", async () => {
  const h = new HostHelper(HOSTD);
  const hostIf = `wv${randomBytes(4).toString('hex')}`;
  let fd = -1;
  try {
    fd = await h.netns();
    const ns = `--net=/proc/${h.pid}/fd/${fd}`;
    // Bad requests are refused before anything is made.
    await assert.rejects(h.veth(fd + 1000, hostIf, '10.253.254.0', '10.253.254.1'), /EBADF|EINVAL|invalid/i);
    await assert.rejects(h.veth(fd, 'a/b', '10.253.254.0', '10.253.254.1'), /EINVAL|invalid/i);
    await assert.rejects(h.veth(fd, hostIf, '10.253.254.300', '10.253.254.1'), /EINVAL|invalid/i);
    await h.veth(fd, hostIf, '10.253.254.0', '10.253.254.1');
    const inside = JSON.parse((await run('nsenter', [ns, 'ip', '-j', 'addr', 'show', 'dev', 'eth0'])).stdout) as IpAddr[];
    assert.deepEqual(
      inside[0]?.addr_info.filter((a) => a.family === 'inet').map((a) => `${a.local}/${a.prefixlen}`),
      ['10.253.254.1/31'],
    );
    assert.notEqual(inside[0]?.operstate, 'DOWN');
    const routes = JSON.parse((await run('nsenter', [ns, 'ip', '-j', 'route', 'show', 'default'])).stdout) as Array<{ gateway: string; dev: string }>;
    assert.deepEqual(
      routes.map((r) => [r.gateway, r.dev]),
      [['10.253.254.0', 'eth0']],
    );
    const outside = JSON.parse((await run('ip', ['-j', 'addr', 'show', 'dev', hostIf])).stdout) as IpAddr[];
    assert.deepEqual(
      outside[0]?.addr_info.map((a) => `${a.family} ${a.local}/${a.prefixlen}`),
      ['inet 10.253.254.0/31'],
      'no IPv6 link-local address on the host side',
    );
    // The two ends reach each other: a connection from inside to a listener on the host's side.
    const server = createServer((c) => c.end('hi'));
    await new Promise<void>((r) => server.listen(0, '10.253.254.0', r));
    try {
      const port = (server.address() as AddressInfo).port;
      const got = await run('nsenter', [ns, 'bash', '-c', `exec 3<>/dev/tcp/10.253.254.0/${port}; cat <&3`]);
      assert.equal(got.stdout, 'hi');
    } finally {
      server.close();
    }
    // The same name again is refused (the kernel's EEXIST), and the first pair stays.
    await assert.rejects(h.veth(fd, hostIf, '10.253.254.0', '10.253.254.1'), /EEXIST|exists/i);
    // The helper's netlink socket for the host's side is kept between links: after a refusal the
    // next link is made whole (its requests go in one write, their answers all read).
    const fd2 = await h.netns();
    try {
      await h.veth(fd2, `${hostIf}b`, '10.253.254.2', '10.253.254.3');
      const second = JSON.parse((await run('ip', ['-j', 'addr', 'show', 'dev', `${hostIf}b`])).stdout) as IpAddr[];
      assert.deepEqual(
        second[0]?.addr_info.map((a) => `${a.family} ${a.local}/${a.prefixlen}`),
        ['inet 10.253.254.2/31'],
      );
      const routes2 = JSON.parse((await run('nsenter', [`--net=/proc/${h.pid}/fd/${fd2}`, 'ip', '-j', 'route', 'show', 'default'])).stdout) as Array<{
        gateway: string;
      }>;
      assert.deepEqual(
        routes2.map((r) => r.gateway),
        ['10.253.254.2'],
      );
    } finally {
      await h.netnsClose(fd2);
    }
    await h.netnsClose(fd);
    fd = -1;
    await until(
      async () =>
        await run('ip', ['link', 'show', hostIf]).then(
          () => false,
          () => true,
        ),
    );
  } finally {
    if (fd >= 0) await h.netnsClose(fd).catch(() => undefined);
    await run('ip', ['link', 'del', hostIf]).catch(() => undefined);
    await h.close();
  }
});

test('each new namespace gets its own sysctls, also past the 32 that one private procfs of warren-hostd serves', async () => {
  const h = new HostHelper(HOSTD);
  const fds: number[] = [];
  try {
    for (let i = 0; i < 40; i++) fds.push(await h.netns());
    for (const fd of fds) {
      const ns = `--net=/proc/${h.pid}/fd/${fd}`;
      const got = await run('nsenter', [ns, 'cat', '/proc/sys/net/ipv4/ip_unprivileged_port_start', '/proc/sys/net/ipv6/conf/default/disable_ipv6']);
      assert.equal(got.stdout.replace(/\s+/g, ' ').trim(), '0 1', `namespace ${fd}`);
    }
  } finally {
    for (const fd of fds) await h.netnsClose(fd).catch(() => undefined);
    await h.close();
  }
});
