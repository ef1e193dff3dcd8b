import { parseArgs } from 'node:util';
import { WarrenError } from '@warren/sdk';
import { kv } from '../args.js';
import { client } from '../client.js';

/** `warren ps`: the sandboxes, then the node's use. */
export async function run(rest: string[]): Promise<number> {
  const { values } = parseArgs({ args: rest, options: { label: { type: 'string', multiple: true }, state: { type: 'string' } } });
  const w = await client();
  let cursor: string | undefined;
  do {
    const page = await w.sandboxes.list({ labels: kv(values.label), state: values.state as never, cursor });
    for (const s of page.sandboxes) {
      const u = s.info.usage;
      const mem = `${(u.memoryBytes / 2 ** 20).toFixed(1)}M${u.swapBytes ? `+${(u.swapBytes / 2 ** 20).toFixed(0)}M swap` : ''}`;
      console.log(
        `${s.id}  ${s.info.state.padEnd(8)} ${s.info.image.padEnd(24)} cpu ${u.cpuRecent.toFixed(2).padStart(5)} (${u.cpuSeconds.toFixed(1)}s)  mem ${mem.padEnd(16)} idle ${String(u.idleSeconds).padStart(5)}s  ${s.info.createdAt}`,
      );
    }
    cursor = page.nextCursor ?? undefined;
  } while (cursor);
  // The nodes are an admin's to list: a tenant's key sees its sandboxes only.
  const [node] = (
    await w.nodes().catch((e: unknown) => {
      if (e instanceof WarrenError && e.code === 'permission_denied') return { nodes: [] };
      throw e;
    })
  ).nodes;
  if (node) {
    const mib = (n: number): string => `${(n / 1024).toFixed(1)}G`;
    console.log(
      `node ${node.id}: ${node.sandboxes} sandboxes (${node.paused} paused); cpu requested ${node.allocated.cpu} / committed ${node.committed.cpu} / used ${node.used.cpu.toFixed(2)} of ${node.capacity.cpu}; ` +
        `memory requested ${mib(node.allocated.memoryMiB)} / committed ${mib(node.committed.memoryMiB)} / used ${mib(node.used.memoryMiB)} (+${mib(node.used.swapMiB)} swap) of ${mib(node.capacity.memoryMiB)}`,
    );
  }
  return 0;
}
