import { test } from 'node:test';
import assert from 'node:assert/strict';
import { createServer } from 'node:http';
import { SERVER_OPTIONS } from './app.js';

test('the API server sets no limit on how long a request takes to send (uploads run for hours), but headers must come within a minute', () => {
  const server = createServer(SERVER_OPTIONS);
  assert.equal(server.requestTimeout, 0);
  assert.equal(server.headersTimeout, 60_000);
  assert.notEqual(createServer().requestTimeout, 0, "Node's own default would cut them off");
});
