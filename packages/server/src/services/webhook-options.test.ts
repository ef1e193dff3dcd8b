import { test } from 'node:test';
import assert from 'node:assert/strict';
import { WebhookBody } from '@warren/api';
import type { EventRecord } from '../store/events.js';
import { compileWebhooks, webhookBatch, webhookUrl } from './webhook-options.js';

const row = (seq: number, pad = 0): EventRecord => ({
  seq,
  tenant: `t${seq % 2}`,
  at: Date.UTC(2026, 11, 6),
  type: 'created',
  data: { sandbox: `sb_${seq}`, labels: { pad: 'x'.repeat(pad) }, lease: null },
});

test('a batch is the events from the first, in order, as many as fit in its bytes (one at least), each with its tenant', () => {
  const all = webhookBatch([row(1), row(2), row(3)]);
  assert.deepEqual(all.seqs, [1, 2, 3]);
  const parsed = WebhookBody.parse(JSON.parse(all.body));
  assert.deepEqual(
    parsed.events.map((e) => [e.seq, e.tenant, e.sandbox, e.at]),
    [
      [1, 't1', 'sb_1', '2026-12-06T00:00:00.000Z'],
      [2, 't0', 'sb_2', '2026-12-06T00:00:00.000Z'],
      [3, 't1', 'sb_3', '2026-12-06T00:00:00.000Z'],
    ],
  );
  const two = webhookBatch([row(1, 1000), row(2, 1000), row(3, 1000)], 2400);
  assert.deepEqual(two.seqs, [1, 2]);
  assert.ok(Buffer.byteLength(two.body) <= 2400);
  assert.deepEqual(webhookBatch([row(1, 5000), row(2)], 2200).seqs, [1]);
});

test('webhooks are http(s) URLs without credentials, at most 8, with a secret of 16 characters; each has its own row and a label without its query', () => {
  assert.equal(compileWebhooks(undefined), null);
  assert.equal(compileWebhooks({ urls: [], secret: '' }), null);
  const c = compileWebhooks({
    urls: ['https://a.example/h?token=s3cret', 'http://b.example:8080/x', 'https://a.example/h?token=s3cret'],
    secret: 'x'.repeat(16),
  });
  assert.deepEqual(
    c?.hooks.map((h) => h.label),
    ['https://a.example/h', 'http://b.example:8080/x'],
  );
  assert.notEqual(c?.hooks[0]?.key, c?.hooks[1]?.key);
  assert.doesNotMatch(c?.hooks[0]?.key ?? '', /s3cret/);
  assert.throws(() => compileWebhooks({ urls: ['https://a.example/'], secret: 'short' }), /16 characters/);
  assert.throws(() => compileWebhooks({ urls: Array.from({ length: 9 }, (_, i) => `https://a.example/${i}`), secret: 'x'.repeat(16) }), /at most 8/);
  for (const bad of ['a.example/hook', 'file:///etc/passwd', 'https://u:p@a.example/', `https://a.example/${'x'.repeat(2048)}`])
    assert.throws(() => webhookUrl(bad), /invalid|URL|http|credentials|2048/, bad);
});
