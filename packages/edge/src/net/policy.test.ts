import { test } from 'node:test';
import assert from 'node:assert/strict';
import { parseIpv4 } from '@warren/api';
import { addressAllowed, compilePolicy, nameAllowed, normalizeHostName, widestAllowPrefix } from './policy.js';

test('egress deny: only allowed names, deny wins, wildcards match below the domain only', () => {
  const p = compilePolicy({ egress: 'deny', allow: ['pypi.example', '*.pyfiles.example', 'Example.COM.'], deny: ['bad.pyfiles.example'] });
  assert.equal(nameAllowed(p, 'pypi.example'), true);
  assert.equal(nameAllowed(p, 'www.pypi.example'), false);
  assert.equal(nameAllowed(p, 'files.pyfiles.example'), true);
  assert.equal(nameAllowed(p, 'a.b.pyfiles.example'), true);
  assert.equal(nameAllowed(p, 'pyfiles.example'), false);
  assert.equal(nameAllowed(p, 'evilpyfiles.example'), false);
  assert.equal(nameAllowed(p, 'bad.pyfiles.example'), false);
  assert.equal(nameAllowed(p, 'example.com'), true);
  assert.deepEqual(p.source.allow, ['pypi.example', '*.pyfiles.example', 'example.com']);
});

test('egress allow: everything but deny; the default denies everything', () => {
  const p = compilePolicy({ egress: 'allow', deny: ['registry.npm.example'] });
  assert.equal(nameAllowed(p, 'pypi.example'), true);
  assert.equal(nameAllowed(p, 'registry.npm.example'), false);
  assert.equal(nameAllowed(p, 'npm.example'), true);
  assert.equal(nameAllowed(compilePolicy(undefined), 'pypi.example'), false);
});

test('CIDRs: allow covers, deny subtracts, the widest prefix is reported', () => {
  const p = compilePolicy({ allow: ['10.1.0.0/16', '192.0.2.7'], deny: ['10.1.2.0/24'] });
  assert.equal(addressAllowed(p, parseIpv4('10.1.3.4')!), true);
  assert.equal(addressAllowed(p, parseIpv4('10.1.2.4')!), false);
  assert.equal(addressAllowed(p, parseIpv4('192.0.2.7')!), true);
  assert.equal(addressAllowed(p, parseIpv4('192.0.2.8')!), false);
  assert.equal(widestAllowPrefix(p), 16);
  assert.equal(widestAllowPrefix(compilePolicy({ allow: ['pypi.example'] })), null);
});

test('nested and repeated CIDRs are kept once, the widest', () => {
  const p = compilePolicy({ allow: ['10.1.0.0/16', '10.0.0.0/8', '10.0.0.0/8', '192.0.2.0/24', '192.0.2.7'] });
  assert.deepEqual(
    p.allowCidrs.map((c) => c.prefix),
    [8, 24],
  );
  assert.deepEqual(p.source.allow, ['10.1.0.0/16', '10.0.0.0/8', '10.0.0.0/8', '192.0.2.0/24', '192.0.2.7/32']);
});

test('bad rules are refused with the rule named', () => {
  for (const bad of [
    '*',
    '*.com',
    '*.co.uk',
    'com',
    'foo.*.com',
    'a..b',
    '-a.com',
    'x'.repeat(64) + '.com',
    '10.0.0.1/8',
    '10.0.0.256',
    '::1',
    'fe80::/10',
    '1.2.3.4/33',
    'under_score.com',
    '*.123',
  ])
    assert.throws(
      () => compilePolicy({ allow: [bad] }),
      (e: Error) => e.message.includes(bad.slice(0, 10)),
      bad,
    );
  assert.doesNotThrow(() => compilePolicy({ allow: ['*.github.io', '0.0.0.0/0', 'xn--bcher-kva.example'] }));
});

test('host names from Host headers and SNI', () => {
  assert.equal(normalizeHostName('PyPI.example:80'), 'pypi.example');
  assert.equal(normalizeHostName('pypi.example.'), 'pypi.example');
  assert.equal(normalizeHostName('10.0.0.1'), null);
  assert.equal(normalizeHostName('10.0.0.1:80'), null);
  assert.equal(normalizeHostName('[::1]:80'), null);
  assert.equal(normalizeHostName(''), null);
  assert.equal(normalizeHostName('a b'), null);
  assert.equal(normalizeHostName('pypi.example:x'), null);
});
