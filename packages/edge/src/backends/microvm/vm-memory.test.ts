import { test } from 'node:test';
import assert from 'node:assert/strict';
import { parseRollup, swapCostPerByte } from './vm-memory.js';
import { IDLE_POLICY, idleStep, type IdleState } from './idle-pageout.js';

test('parseRollup: the proportional set, its anonymous and file parts and the swap share, in bytes', () => {
  const text = [
    '55a0-7ffd ---p 00000000 00:00 0    [rollup]',
    'Rss:               37396 kB',
    'Pss:               18711 kB',
    'Pss_Anon:           1820 kB',
    'Pss_File:          16891 kB',
    'Swap:              23972 kB',
    'SwapPss:           11986 kB',
  ].join('\n');
  assert.deepEqual(parseRollup(text), { pss: 18711 * 1024, anon: 1820 * 1024, file: 16891 * 1024, swapPss: 11986 * 1024 });
  assert.deepEqual(parseRollup(''), { pss: 0, anon: 0, file: 0, swapPss: 0 });
});

test('swapCostPerByte: zram costs what it uses over the swap in use on it, over all its devices; zero pages nothing; a disk swap costs no RAM', () => {
  // Used: 1 and 3 KiB (/proc/swaps); mm_stat: orig_data_size compr_data_size mem_used_total ...
  const swaps = 'Filename Type Size Used Priority\n/dev/zram1 partition 100 1 100\n/dev/zram2 partition 100 3 100\n';
  assert.equal(swapCostPerByte(swaps, { zram1: '1024 200 300 0 0', zram2: '3072 500 700 0 0' }), 1000 / 4096);
  // Half the swapped pages zero (in use, not stored): they cost nothing, the average halves.
  const halfZero = 'Filename Type Size Used Priority\n/dev/zram1 partition 100 8 100\n';
  assert.equal(swapCostPerByte(halfZero, { zram1: '4096 1000 1024 0 0' }), 1024 / 8192);
  assert.equal(swapCostPerByte('Filename\n/swapfile file 100 0 -2\n', {}), 0);
  // Nothing in zram yet: a guess, never free.
  assert.ok(swapCostPerByte(swaps.replace(/ 1 100/, ' 0 100').replace(/ 3 100/, ' 0 100'), { zram1: '0 0 0', zram2: '0 0 0' }) > 0);
  // Never counted above the uncompressed size (zram's own overhead on a few pages).
  assert.equal(swapCostPerByte(swaps, { zram1: '4096 4000 65536', zram2: '0 0 0' }), 1);
});

test('idleStep: paged out once idle long enough, again only when it grew back; busy starts over', () => {
  const p = { ...IDLE_POLICY, idleMs: 30_000, busyCpuFraction: 0.1, regrowBytes: 4 << 20 };
  const look = (prev: IdleState | undefined, atMs: number, cpuSeconds: number, anonBytes = 10 << 20) => idleStep(prev, { atMs, cpuSeconds, anonBytes }, p);
  let s = look(undefined, 0, 5);
  assert.equal(s.pageOut, false);
  s = look(s.state, 10_000, 5.2); // 2 % of a CPU: idle
  assert.equal(s.pageOut, false);
  s = look(s.state, 30_000, 5.4);
  assert.equal(s.pageOut, true);
  s.state.pagedAnonBytes = 2 << 20;
  s = look(s.state, 40_000, 5.5, 5 << 20);
  assert.equal(s.pageOut, false, 'grew back by 3 MiB only');
  s = look(s.state, 50_000, 5.6, 7 << 20);
  assert.equal(s.pageOut, true, 'grew back by 5 MiB');
  s.state.pagedAnonBytes = 2 << 20;
  s = look(s.state, 60_000, 8); // 24 % of a CPU: busy
  assert.equal(s.pageOut, false);
  assert.equal(s.state.pagedAnonBytes, null);
  s = look(s.state, 80_000, 8.1);
  assert.equal(s.pageOut, false, 'idle 20 s only since it was busy');
  s = look(s.state, 90_000, 8.2);
  assert.equal(s.pageOut, true);
});
