import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { startTestWarren, type TestWarren } from '../harness.js';

/**
 * Calls an agent would make to leave its sandbox or read what is not its own, each tried from
 * inside with ctypes, with the errno the seccomp filter must answer (native/seccomp.c). Printed
 * as one JSON object: name → errno (0 when the call went through).
 */
const PROBE = String.raw`
import ctypes, errno, fcntl, json, os, socket
libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
def sc(nr, *args):
    r = libc.syscall(ctypes.c_long(nr), *[ctypes.c_long(a) for a in args])
    return 0 if r >= 0 else ctypes.get_errno()
out = {}
out["mount"] = 0 if libc.mount(b"none", b"/mnt", b"tmpfs", 0, None) == 0 else ctypes.get_errno()
out["unshare_user"] = sc(272, 0x10000000)
out["unshare_mnt"] = sc(272, 0x00020000)
fd = os.open("/proc/self/ns/uts", os.O_RDONLY)
out["setns"] = sc(308, fd, 0)
out["clone_newuser"] = sc(56, 0x10000000 | 17, 0, 0, 0, 0)
out["clone3"] = sc(435, 0, 0)
out["pivot_root"] = sc(155, 0, 0)
out["io_uring_setup"] = sc(425, 8, 0)
out["open_by_handle_at"] = sc(304, -100, 0, 0)
out["name_to_handle_at"] = sc(303, -100, 0, 0, 0, 0)
out["bpf"] = sc(321, 0, 0, 0)
out["perf_event_open"] = sc(298, 0, 0, -1, -1, 0)
out["userfaultfd"] = sc(323, 0)
out["keyctl"] = sc(250, 0, 0)
out["ptrace"] = sc(101, 16, 1, 0, 0)
out["finit_module"] = sc(313, 0, 0, 0)
out["kexec_load"] = sc(246, 0, 0, 0, 0)
out["reboot"] = sc(169, 0, 0, 0, 0)
out["swapon"] = sc(167, 0, 0)
out["fsopen"] = sc(430, 0, 0)
out["open_tree"] = sc(428, -100, 0, 0)
out["x32_getpid"] = sc(39 | 0x40000000)
try:
    socket.socket(38, socket.SOCK_SEQPACKET)  # AF_ALG
    out["af_alg"] = 0
except OSError as e:
    out["af_alg"] = e.errno
try:
    socket.socket(40, socket.SOCK_STREAM)  # AF_VSOCK
    out["af_vsock"] = 0
except OSError as e:
    out["af_vsock"] = e.errno
a = os.open("/tmp/a", os.O_RDWR | os.O_CREAT, 0o600); os.write(a, b"x" * 4096)
b = os.open("/tmp/b", os.O_RDWR | os.O_CREAT, 0o600)
for name, cmd in (("ficlone", 0x40049409), ("ficlone_high_bits", 0x140049409), ("ficlonerange", 0x4020940D),
                  ("fideduperange", 0xC0189436), ("xfs_swapext", 0xC0C0586D), ("xfs_exchange_range", 0x40285881),
                  ("fs_ioc_fssetxattr", 0x401C5820), ("tiocsti", 0x5412)):
    out[name] = sc(16, b, cmd, a)
out["getpid"] = sc(39)
# Not on the allow list: answered ENOSYS, as on a kernel without them (this machine's has them).
out["statmount"] = sc(457, 0, 0, 0, 0)
out["listmount"] = sc(458, 0, 0, 0, 0)
out["open_tree_attr"] = sc(467, -100, 0, 0, 0, 0)
out["lsm_list_modules"] = sc(461, 0, 0, 0)
out["modify_ldt"] = sc(154, 0, 0, 0)
out["unknown_1000"] = sc(1000)
out["unknown_400"] = sc(400)
# On it, newer than most lists: they reach the kernel (which answers for bad arguments itself).
addr = lambda buf: ctypes.cast(buf, ctypes.c_void_p).value
path, root, stx = ctypes.create_string_buffer(b"/tmp/a"), ctypes.create_string_buffer(b"/"), ctypes.create_string_buffer(256)
out["fchmodat2"] = sc(452, -100, addr(path), 0o600, 0)
out["cachestat_badf"] = sc(451, -1, 0, 0, 0)
out["landlock_abi"] = 0 if libc.syscall(ctypes.c_long(444), None, ctypes.c_long(0), ctypes.c_long(1)) > 0 else ctypes.get_errno()
out["statx"] = sc(332, -100, addr(root), 0, 0x7ff, addr(stx))
out["plain_clone"] = 0 if os.fork() == 0 and os._exit(0) is None else (os.wait() and 0)
print(json.dumps(out))
`;

const EPERM = 1;
const ENOSYS = 38;
const DENIED = [
  'mount',
  'unshare_user',
  'unshare_mnt',
  'setns',
  'clone_newuser',
  'pivot_root',
  'io_uring_setup',
  'open_by_handle_at',
  'name_to_handle_at',
  'bpf',
  'perf_event_open',
  'userfaultfd',
  'keyctl',
  'ptrace',
  'finit_module',
  'kexec_load',
  'reboot',
  'swapon',
  'fsopen',
  'open_tree',
  'x32_getpid',
  'af_alg',
  'af_vsock',
  'ficlone',
  'ficlone_high_bits',
  'ficlonerange',
  'fideduperange',
  'xfs_swapext',
  'xfs_exchange_range',
  'fs_ioc_fssetxattr',
  'tiocsti',
];

function check(raw: string): void {
  const out = JSON.parse(raw) as Record<string, number>;
  for (const name of DENIED) assert.equal(out[name], EPERM, `${name}: errno ${out[name]}`);
  // clone3 answers ENOSYS, so libc falls back to clone, whose flags the filter sees.
  assert.equal(out.clone3, ENOSYS);
  assert.equal(out.getpid, 0);
  for (const name of ['statmount', 'listmount', 'open_tree_attr', 'lsm_list_modules', 'modify_ldt', 'unknown_1000', 'unknown_400']) {
    assert.equal(out[name], ENOSYS, `${name}: errno ${out[name]}`);
  }
  assert.equal(out.fchmodat2, 0);
  assert.equal(out.cachestat_badf, 9); // EBADF: the kernel's answer
  assert.equal(out.landlock_abi, 0);
  assert.equal(out.statx, 0);
  assert.equal(out.plain_clone, 0);
}

describe('red team: system calls an agent uses to break out are refused', () => {
  let t: TestWarren;
  before(async () => {
    t = await startTestWarren({ images: ['debian-python:latest'], network: false, fn: { maxWorkersPerImage: 1 } });
  });
  after(async () => {
    await t?.close();
  });

  test('in a sandbox: mounts, namespaces, io_uring, file handles, modules, extent-swapping ioctls, AF_ALG, x32', async () => {
    const sb = await t.client.sandboxes.create({ image: 'debian-python:latest' });
    try {
      await sb.files.write('/tmp/probe.py', PROBE);
      const r = await sb.exec(['python3', '/tmp/probe.py']);
      assert.equal(r.exitCode, 0, r.stderr);
      check(r.stdout);
      // The same from a shell session and from the sandbox's init's point of view.
      const st = await sb.exec('grep -E "^(Seccomp|NoNewPrivs):" /proc/1/status /proc/self/status');
      assert.equal(st.stdout.match(/Seccomp:\t2/g)?.length, 2, st.stdout);
      assert.equal(st.stdout.match(/NoNewPrivs:\t1/g)?.length, 2, st.stdout);
    } finally {
      await sb.delete();
    }
  });

  test('in a FnCall: the call has the same filter on top of its worker’s', async () => {
    const r = await t.client.fn.run({ language: 'python', code: PROBE, timeoutMs: 30_000 });
    assert.equal(r.exitCode, 0, r.stderr);
    check(r.stdout);
    const st = await t.client.fn.run({ language: 'bash', code: 'grep -E "^Seccomp_filters:" /proc/self/status' });
    assert.match(st.stdout, /Seccomp_filters:\t2/);
  });
});
