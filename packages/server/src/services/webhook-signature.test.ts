import { test } from 'node:test';
import assert from 'node:assert/strict';
import { signWebhook, verifyWebhook } from './webhook-signature.js';

const SECRET = 'whsec-test-0123456789';
const BODY = '{"events":[]}';
const T = 1796536800;

test('a signature is HMAC-SHA256 of "<t>.<body>" in hex (a value Python’s hmac module computed), and verifies', () => {
  const h = signWebhook(SECRET, BODY, T);
  assert.equal(h, `t=${T},v1=0e003386ad00a140b30b053a83920c1248387dcad963753173410fd6fb9638b7`);
  assert.ok(verifyWebhook(SECRET, h, BODY, T));
  assert.ok(verifyWebhook(SECRET, h, Buffer.from(BODY), T + 299));
});

test('a signature fails for another body, secret or time, past the tolerance, or malformed; any v1 of several may match', () => {
  const h = signWebhook(SECRET, BODY, T);
  assert.equal(verifyWebhook(SECRET, h, '{"events":[ ]}', T), false);
  assert.equal(verifyWebhook('another-secret-0123', h, BODY, T), false);
  assert.equal(verifyWebhook(SECRET, h.replace(`t=${T}`, `t=${T + 1}`), BODY, T), false);
  assert.equal(verifyWebhook(SECRET, h, BODY, T + 301), false);
  assert.equal(verifyWebhook(SECRET, h, BODY, T - 301), false);
  for (const bad of ['', 'v1=00', `t=${T}`, `t=${T},v1=zz`, `t=x,${h.split(',')[1]!}`, `t=${T},v1=${'0'.repeat(63)}`])
    assert.equal(verifyWebhook(SECRET, bad, BODY, T), false, bad);
  const rotated = `t=${T},v1=${signWebhook('old-secret-0123456', BODY, T).split('v1=')[1]!},${h.split(',')[1]!}`;
  assert.ok(verifyWebhook(SECRET, rotated, BODY, T));
});
