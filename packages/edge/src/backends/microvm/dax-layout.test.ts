import { test } from 'node:test';
import assert from 'node:assert/strict';
import { MAX_DAX_REGIONS, TAIL_MIB, daxFits, daxLayout } from './dax-layout.js';
import { microvmArgs, type MicrovmSpec } from './qemu-args.js';

const MiB = 2 ** 20;

test('daxLayout: RAM first, each file a read-only shared node padded to 2 MiB with a reserved gap after it, the initramfs room last', () => {
  const l = daxLayout(256, 'memory-backend-ram,id=microvm.ram,size=256M', 'microvm.ram', [
    { file: '/l/a.erofs', bytes: 4096 },
    { file: '/l/a.data', bytes: 6 * MiB },
  ]);
  const objects = l.args.flatMap((a, i) => (l.args[i - 1] === '-object' ? [a] : []));
  assert.deepEqual(objects, [
    'memory-backend-ram,id=microvm.ram,size=256M',
    'memory-backend-file,id=dax0,mem-path=/l/a.erofs,size=4096,share=on,readonly=on',
    `memory-backend-memfd,id=daxpad0,size=${2 * MiB - 4096},share=on`,
    `memory-backend-memfd,id=daxgap0,size=${2 * MiB},share=on`,
    `memory-backend-file,id=dax1,mem-path=/l/a.data,size=${6 * MiB},share=on,readonly=on`,
    `memory-backend-memfd,id=daxgap1,size=${2 * MiB},share=on`,
    `memory-backend-memfd,id=daxtail,size=${TAIL_MIB}M,share=on`,
  ]);
  const nodes = l.args.flatMap((a, i) => (l.args[i - 1] === '-numa' ? [a] : []));
  assert.deepEqual(
    nodes.map((n) => n.replace(/^node,nodeid=\d+,memdev=/, '')),
    ['microvm.ram', 'dax0', 'daxpad0', 'daxgap0', 'dax1', 'daxgap1', 'daxtail'],
  );
  assert.deepEqual(
    nodes.map((n) => Number(/nodeid=(\d+)/.exec(n)![1])),
    [0, 1, 2, 3, 4, 5, 6],
  );
  // Persistent memory where the files are (a file and its pad are one device), reserved elsewhere: addresses add up.
  assert.deepEqual(l.memmap, [
    `memmap=${2 * MiB}!${256 * MiB}`,
    `memmap=${2 * MiB}$${258 * MiB}`,
    `memmap=${6 * MiB}!${260 * MiB}`,
    `memmap=${2 * MiB}$${266 * MiB}`,
    `memmap=${TAIL_MIB * MiB}$${268 * MiB}`,
  ]);
  assert.equal(l.totalMiB, 268 + TAIL_MIB);
});

test('daxFits: files of whole pages, not too many, all under 3 GiB; anything else is said why', () => {
  const one = [{ file: '/l/a.erofs', bytes: 8192 }];
  assert.equal(daxFits(256, one), null);
  assert.match(daxFits(256, [])!, /no layers/);
  assert.match(daxFits(256, [{ file: '/l/a.erofs', bytes: 1000 }])!, /4 KiB pages/);
  assert.match(daxFits(256, [{ file: '/l/a.erofs', bytes: 0 }])!, /4 KiB pages/);
  assert.match(
    daxFits(
      256,
      Array.from({ length: MAX_DAX_REGIONS + 1 }, (_, i) => ({ file: `/l/${i}`, bytes: 4096 })),
    )!,
    /more than/,
  );
  assert.match(daxFits(2048, [{ file: '/l/big', bytes: 1024 * MiB }])!, /pass/);
  assert.throws(() => daxLayout(256, 'x', 'microvm.ram', [{ file: '/l/a b', bytes: 4096 }]), /commas or spaces/);
  assert.throws(() => daxLayout(256, 'x', 'microvm.ram', []), /no layers/);
});

test('microvmArgs with dax: PCIe on, memory of NUMA nodes with its RAM by its usual id, no layer disks, memmap and warren.dax told the guest', () => {
  const spec: MicrovmSpec = {
    kernel: '/k/vmlinuz',
    initrd: '/k/initrd',
    cpus: 1,
    memoryMiB: 128,
    layers: [{ meta: '/l/a.erofs', data: '/l/a.data' }],
    rwDisk: '/vm/rw.ext4',
    agentSocket: '/vm/agent.sock',
    qmpSocket: '/vm/qmp.sock',
    consoleSocket: '/vm/console.sock',
    pidFile: '/vm/qemu.pid',
    accel: 'tcg',
    tscKhz: 2096013,
    noPit: true,
    dax: [
      { file: '/l/a.erofs', bytes: 4096 },
      { file: '/l/a.data', bytes: 2 * MiB },
    ],
  };
  const args = microvmArgs(spec);
  const after = (flag: string): string[] => args.flatMap((a, i) => (a === flag ? [args[i + 1]!] : []));
  assert.deepEqual(after('-M'), ['microvm,x-option-roms=off,rtc=on,pit=off,pcie=on']);
  assert.deepEqual(after('-m'), [`${128 + 4 + 4 + TAIL_MIB}M`]);
  assert.equal(after('-object')[0], 'memory-backend-ram,id=microvm.ram,size=128M');
  assert.deepEqual(
    after('-device').filter((d) => d.startsWith('virtio-blk')),
    ['virtio-blk-device,drive=rw,serial=warren-rw'],
  );
  assert.match(after('-append')[0]!, / warren\.layers=d warren\.dax memmap=2097152!134217728 memmap=2097152\$136314880 /);
  // A template's RAM file stays its RAM, by the same id (a state saved names it so).
  const template = microvmArgs({ ...spec, ram: { file: '/t/ram', shared: true } });
  assert.equal(template[template.indexOf('-object') + 1], 'memory-backend-file,id=microvm.ram,size=128M,mem-path=/t/ram,share=on');
  assert.doesNotMatch(template[template.indexOf('-M') + 1]!, /memory-backend=/);
});
