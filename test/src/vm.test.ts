// The full-VM backend on real QEMU (q35, TCG here): Debian's standard kernel, Warren's initramfs
// handing over to the desktop image's systemd, X on the VESA framebuffer with twm and xterm,
// the screen read through QMP's screendump and driven through QMP's input-send-event, and shown
// in the dashboard in a real browser.
import { test, type TestContext } from 'node:test';
import assert from 'node:assert/strict';
import { existsSync, readFileSync } from 'node:fs';
import { mkdir, readFile } from 'node:fs/promises';
import { join } from 'node:path';
import type { BrowserContext } from 'playwright-core';
import { vmFiles } from '@warren/edge';
import type { Sandbox } from '@warren/sdk';
import { errorCode, http, startTestWarren, until, type TestWarren } from './harness.js';
import { colourCounts, decodeRgbPng } from './png.js';
import { launchBrowser, logIn, noBrowser, openTab, SHOTS } from './browser.js';

const DESKTOP = 'debian-desktop:latest';

/** Whether a process runs (one that exited and waits to be reaped by the host's init does not). */
const alive = (pid: number): boolean => {
  try {
    return !/\) [ZX] /.test(readFileSync(`/proc/${pid}/stat`, 'utf8'));
  } catch {
    return false;
  }
};

/** The screen's pixels, and the share of them its two commonest colours have. */
async function screen(sb: Sandbox): Promise<{ width: number; height: number; rgb: Buffer; top: Array<[string, number]> }> {
  const img = decodeRgbPng(Buffer.from(await sb.screen()));
  const pixels = img.width * img.height;
  return { ...img, top: colourCounts(img).map(([c, n]) => [c, n / pixels] as [string, number]) };
}

/**
 * The VM's screen in the dashboard, in a real browser: the page shows it at its size, and a click
 * on it and keys typed into the page reach the guest's terminal (here rather than in
 * dashboard.test.ts: this test has a desktop booted already).
 */
async function typedInDashboard(ctx: TestContext, t: TestWarren, vm: Sandbox): Promise<void> {
  const why = noBrowser();
  if (why) return void ctx.diagnostic(`the dashboard's screen not shown: ${why}`);
  await mkdir(SHOTS, { recursive: true });
  const browser = await launchBrowser();
  const contexts: BrowserContext[] = [];
  try {
    const { page, errors } = await openTab(browser, contexts, t.url);
    await logIn(page, t.key);
    await page.goto(`${t.url}/#/sandboxes/${vm.id}`);
    const img = page.locator('.screen img');
    await img.waitFor();
    await until(async () => (await img.evaluate((i) => (i as unknown as { naturalWidth: number }).naturalWidth)) === 1024, 30_000);
    // A click into the terminal (twm gives it the focus under the pointer), then keys.
    const box = (await img.boundingBox())!;
    await page.mouse.click(box.x + (300 / 1024) * box.width, box.y + (200 / 768) * box.height);
    await page.keyboard.type('echo paged-$((6*7)) > /tmp/paged');
    await page.keyboard.press('Enter');
    await until(async () => (await vm.exec('cat /tmp/paged 2>/dev/null')).stdout === 'paged-42\n', 120_000);
    await page.screenshot({ path: join(SHOTS, 'vm-screen.png') });
    assert.deepEqual(errors, []);
  } finally {
    for (const c of contexts) await c.close().catch(() => undefined);
    await browser.close();
  }
}

test(
  '"backend": "vm": a desktop boots under systemd, its screen shows a terminal, keys and a click typed into it (through the API and in the dashboard) write a file; paused and resumed; a clone with its own address, files and a served port, committed; deleted with nothing left',
  {
    timeout: 1_200_000,
    // Where the control plane keeps its state is nothing to a VM's display: it runs in the first two passes (in process, and over the edge protocol).
    skip: process.env.WARREN_TEST_STORE === 'postgres' ? 'runs in the in-process and edge-protocol passes' : false,
  },
  async (ctx) => {
    let t: TestWarren | null = null;
    const made: Sandbox[] = [];
    try {
      t = await startTestWarren({ images: ['busybox:latest', DESKTOP] });
      const info = (await http(t, 'GET', '/v1/info')).json as { backends: Array<{ name: string; available: boolean; accelerator: string | null }> };
      assert.deepEqual(
        info.backends.find((b) => b.name === 'vm'),
        { name: 'vm', available: true, accelerator: 'tcg' },
      );
      // The first create boots the image (its template); the second clones that.
      const t0 = Date.now();
      const sb = await t.client.sandboxes.create({ image: DESKTOP, backend: 'vm', resources: { memoryMiB: 1024, cpu: 1 } });
      made.push(sb);
      const bootMs = Date.now() - t0;
      const dir = join(t.dataDir, 'vm', sb.id);
      const pid = Number(await readFile(vmFiles(dir).pid, 'utf8'));
      assert.equal(sb.info.backend, 'vm');

      const r = await sb.exec('cat /proc/1/comm; uname -r; systemctl is-system-running; systemctl is-active warren-desktop; hostname');
      const [init, kernel, system, desktop, hostname] = r.stdout.split('\n');
      assert.equal(init, 'systemd', 'the image boots as a machine: systemd is PID 1');
      assert.match(kernel ?? '', /-amd64$/);
      assert.doesNotMatch(kernel ?? '', /cloud/, 'the standard kernel (its framebuffer), not the cloud one');
      assert.match(system ?? '', /^(running|degraded)$/);
      assert.equal(desktop, 'active');
      assert.equal(hostname, sb.id.replace(/_/g, '-'));

      // The screen: 1024x768, not blank (twm's root and the terminal at least), the PNG's colours as X drew them.
      const before = await screen(sb);
      assert.deepEqual([before.width, before.height], [1024, 768]);
      assert.ok(before.top.length >= 2 && before.top[1]![1] > 0.05, `two colours cover more than 5 % each: ${JSON.stringify(before.top.slice(0, 3))}`);
      assert.ok(
        before.top.slice(0, 2).some(([c]) => c === 'ffffff'),
        `xterm's white is one of the two commonest colours (red and blue in place): ${JSON.stringify(before.top.slice(0, 3))}`,
      );

      // A click into the terminal (twm gives it the focus under the pointer), then typed keys.
      await sb.input([
        { type: 'mouse', x: 300, y: 200, button: 'left' },
        { type: 'text', text: 'echo typed-$((6*7)) > /tmp/typed' },
        { type: 'key', key: 'Return' },
      ]);
      await until(async () => (await sb.exec('cat /tmp/typed 2>/dev/null')).stdout === 'typed-42\n', 120_000);
      // The terminal shows what was typed: the screen is read anew, and its pixels changed.
      assert.equal((await screen(sb)).rgb.equals(before.rgb), false, 'the screen changed with the typing');
      // A long line, typed faster than X draws it under TCG: none of it is lost (sent as fast as QMP
      // answered, keys were dropped by QEMU when the guest's queue was full, and by the guest's kernel
      // when X's buffer overflowed: SYN_DROPPED), and it has been handled when the input is done.
      const alnum = 'abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789';
      const long = Array.from({ length: 600 }, (_, i) => alnum[(i * 7) % alnum.length]!).join('');
      await sb.input([
        { type: 'text', text: `echo ${long} > /tmp/long` },
        { type: 'key', key: 'Return' },
      ]);
      await until(async () => (await sb.exec('cat /tmp/long 2>/dev/null')).stdout !== '', 60_000).catch(() => undefined);
      assert.equal((await sb.exec('cat /tmp/long')).stdout, `${long}\n`, 'every key of a long line arrived');
      assert.equal((await sb.exec('grep -c SYN_DROPPED /var/log/Xorg.0.log')).stdout, '0\n', 'X lost no input');

      // Bad input: a key no keyboard has, text a US keyboard cannot type; a container has no screen.
      const bad = await http(t, 'POST', `/v1/sandboxes/${sb.id}/input`, { events: [{ type: 'key', key: 'Hyper_Q' }] });
      assert.equal(bad.status, 400);
      assert.equal(errorCode(bad), 'invalid_argument');
      assert.equal(errorCode(await http(t, 'POST', `/v1/sandboxes/${sb.id}/input`, { events: [{ type: 'text', text: '€' }] })), 'invalid_argument');
      assert.equal(errorCode(await http(t, 'POST', `/v1/sandboxes/${sb.id}/input`, { events: [] })), 'invalid_argument');
      // More keystrokes than one request types (W3-06): refused before any is sent.
      const tooMany = await http(t, 'POST', `/v1/sandboxes/${sb.id}/input`, {
        events: [
          { type: 'text', text: 'a'.repeat(10_000) },
          { type: 'key', key: 'Return' },
        ],
      });
      assert.equal(errorCode(tooMany), 'invalid_argument');
      assert.match((tooMany.json as { error: { message: string } }).error.message, /10001 keystrokes .* one request types 10000 at most/);
      const box = await t.client.sandboxes.create({ image: 'busybox:latest' });
      made.push(box);
      const none = await http(t, 'GET', `/v1/sandboxes/${box.id}/screen`);
      assert.equal(none.status, 400);
      assert.match((none.json as { error: { message: string } }).error.message, /container sandbox cannot show a screen/);

      // Paused (saved to disk, its QEMU gone), then resumed by a screen read: the desktop and the shell's file are back.
      await sb.pause();
      await until(async () => !alive(pid), 120_000);
      const back = await screen(sb);
      assert.ok(
        back.top.slice(0, 2).some(([c]) => c === 'ffffff'),
        'the terminal is on the screen after the resume',
      );
      assert.equal((await sb.exec('cat /tmp/typed')).stdout, 'typed-42\n');

      // A second VM clones the first one's template: no boot.
      const t1 = Date.now();
      const second = await t.client.sandboxes.create({ image: DESKTOP, backend: 'vm', resources: { memoryMiB: 1024, cpu: 1 } });
      made.push(second);
      const cloneMs = Date.now() - t1;
      assert.equal((await second.exec('cat /proc/1/comm; test -e /tmp/typed || echo clean')).stdout, 'systemd\nclean\n');
      assert.ok(cloneMs < bootMs, `a clone (${cloneMs} ms) is quicker than the boot (${bootMs} ms)`);
      // Its screen in the dashboard, typed into from the page.
      await typedInDashboard(ctx, t, second);
      // On the sandbox network with an address of its own, as a microVM.
      const address = (await second.refresh()).network.address;
      assert.ok(address && address !== (await sb.refresh()).network.address);
      assert.equal((await second.exec('hostname -I')).stdout.trim(), address);
      // Files through the API, and a port served from inside through the node's proxy.
      await second.files.write('/srv/www/hello.txt', 'from a VM\n');
      assert.equal(await second.files.readText('/srv/www/hello.txt'), 'from a VM\n');
      await second.exec('cd /srv/www && nohup python3 -m http.server 8000 > /dev/null 2>&1 &');
      let served = { status: 0, text: '' };
      await until(async () => (served = await http(t!, 'GET', `/v1/sandboxes/${second.id}/ports/8000/hello.txt`)).status === 200, 60_000).catch(
        () => undefined,
      );
      assert.deepEqual([served.status, served.text], [200, 'from a VM\n']);
      // Committed: its writable layer runs in a container.
      await second.exec('echo from-a-vm > /root/committed.txt');
      await second.commit('built/desktop-vm:v1');
      const fromVm = await t.client.sandboxes.create({ image: 'built/desktop-vm:v1' });
      made.push(fromVm);
      assert.equal((await fromVm.exec('cat /root/committed.txt')).stdout, 'from-a-vm\n');
      await fromVm.delete();
      const nodes = (await http(t, 'GET', '/v1/nodes')).json as { nodes: Array<{ byBackend: Record<string, { sandboxes: number; paused: number }> }> };
      assert.deepEqual(nodes.nodes[0]!.byBackend.vm, { sandboxes: 2, paused: 0 });

      const secondDir = join(t.dataDir, 'vm', second.id);
      const secondPid = Number(await readFile(vmFiles(secondDir).pid, 'utf8'));
      for (const s of [sb, second]) await s.delete();
      assert.equal(alive(secondPid), false);
      assert.equal(existsSync(dir), false);
      assert.equal(existsSync(secondDir), false);
    } finally {
      for (const s of made) await s.delete().catch(() => undefined);
      await t?.close();
    }
  },
);
