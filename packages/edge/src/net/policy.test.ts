import { test } from 'node:test';
import assert from 'node:assert/strict';
import { parseIpv4 } from '@warren/api';
import { addressAllowed, compilePolicy, nameAllowed, normalizeHostName, widestAllowPrefix } from './policy.js';

test('egress deny: only allowed names, deny wins, wildcards match below the domain only', () => {
  const p = compilePolicy({ egress: 'deny', allow: ['pypi.org', '*.pythonhosted.org', 'Example.COM.'], deny: ['bad.pythonhosted.org'] });
  assert.equal(nameAllowed(p, 'pypi.org'), true);
  assert.equal(nameAllowed(p, 'www.pypi.org'), false);
  assert.equal(nameAllowed(p, 'files.pythonhosted.org'), true);
  assert.equal(nameAllowed(p, 'a.b.pythonhosted.org'), true);
  assert.equal(nameAllowed(p, 'pythonhosted.org'), false);
  assert.equal(nameAllowed(p, 'evilpythonhosted.org'), false);
  assert.equal(nameAllowed(p, 'bad.pythonhosted.org'), false);
  assert.equal(nameAllowed(p, 'example.com'), true);
  assert.deepEqual(p.source.allow, ['pypi.org', '*.pythonhosted.org', 'example.com']);
});

test('egress allow: everything but deny; the default denies everything', () => {
  const p = compilePolicy({ egress: 'allow', deny: ['registry.npmjs.org'] });
  assert.equal(nameAllowed(p, 'pypi.org'), true);
  assert.equal(nameAllowed(p, 'registry.npmjs.org'), false);
  assert.equal(nameAllowed(p, 'npmjs.org'), true);
  assert.equal(nameAllowed(compilePolicy(undefined), 'pypi.org'), false);
});

test('CIDRs: allow covers, deny subtracts, the widest prefix is reported', () => {
  const p = compilePolicy({ allow: ['10.1.0.0/16', '192.0.2.7'], deny: ['10.1.2.0/24'] });
  assert.equal(addressAllowed(p, parseIpv4('10.1.3.4')!), true);
  assert.equal(addressAllowed(p, parseIpv4('10.1.2.4')!), false);
  assert.equal(addressAllowed(p, parseIpv4('192.0.2.7')!), true);
  assert.equal(addressAllowed(p, parseIpv4('192.0.2.8')!), false);
  assert.equal(widestAllowPrefix(p), 16);
  assert.equal(widestAllowPrefix(compilePolicy({ allow: ['pypi.org'] })), null);
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
  assert.equal(normalizeHostName('PyPI.org:80'), 'pypi.org');
  assert.equal(normalizeHostName('pypi.org.'), 'pypi.org');
  assert.equal(normalizeHostName('10.0.0.1'), null);
  assert.equal(normalizeHostName('10.0.0.1:80'), null);
  assert.equal(normalizeHostName('[::1]:80'), null);
  assert.equal(normalizeHostName(''), null);
  assert.equal(normalizeHostName('a b'), null);
  assert.equal(normalizeHostName('pypi.org:x'), null);
});
