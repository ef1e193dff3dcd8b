// Warren benchmark: the dashboard in a real browser (Debian's Chromium through playwright-core).
// Fills a node with `--count` sandboxes (5,000 busybox by default, batch creates), then: the
// list's time from the login to its first row and to all of them counted, the time to scroll
// through every row a screen at a time (a frame each), and a terminal's keystroke-to-echo latency
// (measured in the page: a key's keydown to its echo in the terminal's rows). Prints numbers;
// asserts nothing. Usage: npm run bench:dashboard [-- --count 5000 --keys 100]
import { mkdtemp } from 'node:fs/promises';
import { cpus, totalmem, tmpdir } from 'node:os';
import { join } from 'node:path';
import { parseArgs } from 'node:util';
import { chromium } from 'playwright-core';
import { pct, pool } from './stats.js';
import { startWarrenUp } from './warren-up.js';

const { values } = parseArgs({ options: { count: { type: 'string', default: '5000' }, keys: { type: 'string', default: '100' } } });
const COUNT = Number(values.count);
const KEYS = Number(values.keys);

/** Scrolls the list to its end a screen at a time, a frame each; answers the time and the rows drawn at the end. */
const SCROLL = `(async () => {
  const v = document.querySelector('.virtual');
  const t0 = performance.now();
  let frames = 0;
  while (v.scrollTop + v.clientHeight < v.scrollHeight - 1) {
    v.scrollTop += v.clientHeight;
    await new Promise((r) => requestAnimationFrame(() => requestAnimationFrame(r)));
    frames++;
  }
  const rows = [...document.querySelectorAll('.row[data-id]')];
  return { ms: performance.now() - t0, frames, drawn: rows.length };
})()`;

/** Records, per key typed into the terminal, the time from its keydown to its echo in the rows. */
const WATCH_ECHO = `(() => {
  window.__lat = [];
  window.__typed = '';
  let pending = null;
  const rows = document.querySelector('.term-host .xterm-rows');
  document.querySelector('.xterm-helper-textarea').addEventListener('keydown', (e) => {
    window.__typed += e.key;
    pending = { t: performance.now(), text: window.__typed };
  }, true);
  new MutationObserver(() => {
    if (pending && rows.textContent.includes(pending.text)) {
      window.__lat.push(performance.now() - pending.t);
      pending = null;
    }
  }).observe(rows, { childList: true, subtree: true, characterData: true });
})()`;

console.log(
  `machine: ${cpus().length} cores (${cpus()[0]?.model.split(' ').slice(0, 2).join(' ')}), ${(totalmem() / 2 ** 30).toFixed(1)} GiB, node ${process.version}`,
);
const node = await startWarrenUp(await mkdtemp(join(tmpdir(), 'warren-bench-dashboard-')), ['--images', 'busybox:latest'], { removeDataDir: true });
const browser = await chromium.launch({
  executablePath: '/usr/bin/chromium',
  headless: true,
  args: ['--no-sandbox', '--disable-gpu', '--disable-background-networking', '--disable-component-update', '--disable-sync', '--no-first-run'],
});
try {
  const fill = await pool(Math.ceil(COUNT / 250), 2, (i) =>
    node.client.sandboxes.createMany(Math.min(250, COUNT - i * 250), {
      image: 'busybox:latest',
      resources: { cpu: 0.01, memoryMiB: 16 },
      labels: { bench: 'ui' },
    }),
  );
  const made = fill.results.reduce((n, r) => n + r.sandboxes.length, 0);
  console.log(`## the dashboard with ${made} sandboxes (made in ${(fill.wallMs / 1000).toFixed(0)} s)`);
  // Every sandbox the key sees (failed creates are listed too).
  let listed = 0;
  for (let cursor: string | undefined; ; ) {
    const r = await node.client.sandboxes.list({ limit: 1000, ...(cursor ? { cursor } : {}) });
    listed += r.sandboxes.length;
    if (!r.nextCursor) break;
    cursor = r.nextCursor;
  }
  // The measuring scripts are evaluated in the page, which its own policy forbids (no eval).
  const page = await (await browser.newContext({ viewport: { width: 1400, height: 900 }, bypassCSP: true })).newPage();
  await page.goto(node.url + '/');
  await page.fill('input[name=key]', node.key);
  const t0 = performance.now();
  await page.click('button[type=submit]');
  await page.waitForSelector('.row[data-id]');
  const firstRow = performance.now() - t0;
  await page.waitForFunction(`(document.querySelector('.sandboxes h2')?.textContent ?? '').trim() === 'Sandboxes ${listed}'`, undefined, { polling: 5 });
  const allRows = performance.now() - t0;
  console.log(`list: first row ${firstRow.toFixed(0)} ms after the login, all ${listed} counted ${allRows.toFixed(0)} ms (read 100, then 1,000 a page)`);
  const scroll = await page.evaluate<{ ms: number; frames: number; drawn: number }>(SCROLL);
  console.log(
    `scroll through ${listed} rows, a screen a step: ${scroll.ms.toFixed(0)} ms over ${scroll.frames} steps (${(scroll.ms / Math.max(1, scroll.frames)).toFixed(1)} ms a step, two frames each), ${scroll.drawn} rows drawn at the end`,
  );

  const one = fill.results[0]!.sandboxes[0]!;
  await page.goto(`${node.url}/#/sandboxes/${one.id}`);
  await page.click('text=Open a terminal');
  await page.waitForSelector('[data-terminal-state=open]');
  await page.locator('.term-host').click();
  await page.waitForFunction(`(document.querySelector('.term-host .xterm-rows')?.textContent ?? '').includes('#')`);
  await page.evaluate(WATCH_ECHO);
  const letters = 'abcdefghijklmnopqrstuvwxyz';
  for (let i = 0; i < KEYS; i++) {
    await page.keyboard.press(letters[i % 26]!);
    await page.waitForFunction(`window.__lat.length >= ${i + 1}`, undefined, { polling: 1, timeout: 10_000 });
  }
  const lat = await page.evaluate<number[]>('window.__lat');
  console.log(
    `terminal keystroke to echo, ${lat.length} keys: p50 ${pct(lat, 50).toFixed(1)} ms, p99 ${pct(lat, 99).toFixed(1)} ms, max ${Math.max(...lat).toFixed(1)} ms`,
  );
} finally {
  await browser.close();
  await node.stop();
}
