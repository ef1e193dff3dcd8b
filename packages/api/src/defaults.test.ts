import { test } from 'node:test';
import assert from 'node:assert/strict';
import { z } from 'zod';
import { DEFAULTS } from './defaults.js';
import { ExecRequest } from './exec.js';
import { FnRunRequest } from './fn.js';
import { CreateSandboxRequest } from './sandbox.js';

type Json = { properties: Record<string, Json & { default?: unknown; anyOf?: Json[] }> };
const props = (s: z.ZodType): Json['properties'] => (z.toJSONSchema(s, { io: 'input', unrepresentable: 'any' }) as unknown as Json).properties;

test("the schemas show what a request left out becomes (OpenAPI's default), from DEFAULTS", () => {
  const exec = props(ExecRequest);
  assert.equal(exec.timeoutMs!.default, DEFAULTS.exec.timeoutMs);
  assert.equal(exec.maxOutputBytes!.default, DEFAULTS.exec.maxOutputBytes);
  const fn = props(FnRunRequest);
  assert.equal(fn.timeoutMs!.default, DEFAULTS.fn.timeoutMs);
  assert.equal(fn.resources!.properties.pids!.default, 256, "a FnCall's own pids, not a sandbox's");
  const create = props(CreateSandboxRequest);
  assert.equal(create.resources!.properties.pids!.default, DEFAULTS.sandbox.resources.pids);
  assert.equal(create.resources!.properties.cpuClass!.default, 'latency');
  assert.equal(create.lifetime!.properties.ttlSeconds!.default, DEFAULTS.sandbox.ttlSeconds);
  // A default is documentation: parsing leaves the field out, the service applies it.
  assert.equal(ExecRequest.parse({ cmd: 'true' }).timeoutMs, undefined);
});
