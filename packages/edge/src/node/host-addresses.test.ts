import { test } from 'node:test';
import assert from 'node:assert/strict';
import { hostAddresses } from './host-addresses.js';

test('the cluster’s hosts by address: names resolved to all theirs, unspecified ones and names that do not resolve left out, each once', async () => {
  const lookupAll = async (h: string) => {
    if (h === 'db.example')
      return [
        { address: '10.0.0.9', family: 4 },
        { address: 'fd00::9', family: 6 },
      ];
    throw new Error(`ENOTFOUND ${h}`);
  };
  assert.deepEqual(await hostAddresses(['10.0.0.5', 'db.example', '[fd00::5]', '0.0.0.0', '', 'nowhere.example', '10.0.0.5'], lookupAll), [
    '10.0.0.5',
    '10.0.0.9',
    'fd00::5',
    'fd00::9',
  ]);
});
