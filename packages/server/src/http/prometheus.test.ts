import { test } from 'node:test';
import assert from 'node:assert/strict';
import { exposition } from './prometheus.js';

test('each family once, its TYPE first and its samples together, whatever the parts repeat or interleave', () => {
  const node = (n: string): string =>
    `# TYPE warren_sandbox_network_bytes_in counter\n# TYPE warren_sandbox_network_bytes_out counter\n` +
    `warren_sandbox_network_bytes_in{sandbox="sb_${n}"} 1\nwarren_sandbox_network_bytes_out{sandbox="sb_${n}"} 2\n`;
  const own =
    '# TYPE warren_http_requests_total counter\nwarren_http_requests_total 7\n' +
    '# TYPE warren_node_sandboxes gauge\n# TYPE warren_node_committed_memory_mib gauge\n' +
    'warren_node_sandboxes{node="a"} 1\nwarren_node_committed_memory_mib{node="a"} 512\n' +
    'warren_node_sandboxes{node="b"} 2\nwarren_node_committed_memory_mib{node="b"} 1024\n';
  assert.equal(
    exposition([own, node('1'), '', node('2')]),
    '# TYPE warren_http_requests_total counter\nwarren_http_requests_total 7\n' +
      '# TYPE warren_node_sandboxes gauge\nwarren_node_sandboxes{node="a"} 1\nwarren_node_sandboxes{node="b"} 2\n' +
      '# TYPE warren_node_committed_memory_mib gauge\nwarren_node_committed_memory_mib{node="a"} 512\nwarren_node_committed_memory_mib{node="b"} 1024\n' +
      '# TYPE warren_sandbox_network_bytes_in counter\nwarren_sandbox_network_bytes_in{sandbox="sb_1"} 1\nwarren_sandbox_network_bytes_in{sandbox="sb_2"} 1\n' +
      '# TYPE warren_sandbox_network_bytes_out counter\nwarren_sandbox_network_bytes_out{sandbox="sb_1"} 2\nwarren_sandbox_network_bytes_out{sandbox="sb_2"} 2\n',
  );
  // A family with no samples (no tenants yet) keeps its TYPE line only.
  assert.equal(exposition(['# TYPE warren_tenant_cpu gauge\n\n']), '# TYPE warren_tenant_cpu gauge\n');
});
