import { spawn } from 'node:child_process';
import { existsSync } from 'node:fs';
import { readFile, rename, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import type { GuestKit } from './guest-kit.js';
import { tcgClockArgs, withoutPit } from './qemu-args.js';
import { hostTscKhz } from './vm-process.js';

/** What the guest's stage prints when it is booted with no layers (its first words on the console). */
const STAGE_SAYS = 'warren-vmstage: warren.layers= names 0 layers';

/**
 * Whether QEMU runs Warren's guest under `accel`: boots the kit with no layers, so that its stage
 * says so on the console and powers off (about 0.3 s under KVM, 2-3 s under TCG). False when
 * QEMU fails or the words do not come within `timeoutMs` (a /dev/kvm that opens but cannot run
 * a stock kernel hangs it).
 */
export async function guestRuns(kit: GuestKit, accel: 'kvm' | 'tcg', timeoutMs: number): Promise<boolean> {
  // Under TCG the guest is told the TSC's rate, as every TCG guest (see MicrovmSpec.tscKhz).
  const tsc = accel === 'tcg' ? await hostTscKhz() : null;
  // prettier-ignore
  const p = spawn('qemu-system-x86_64', [
    '-M', `microvm,x-option-roms=off${withoutPit(accel, tsc) ? ',pit=off' : ''}`, '-accel', accel, '-cpu', accel === 'kvm' ? 'host' : 'max', '-m', '128M',
    '-nodefaults', '-no-user-config', '-no-reboot', '-display', 'none',
    '-kernel', kit.kernel, '-initrd', kit.initrd, '-append', `console=ttyS0 quiet panic=-1${accel === 'tcg' ? tcgClockArgs(tsc) : ''} warren.layers=`,
    '-serial', 'stdio',
  ], { stdio: ['ignore', 'pipe', 'ignore'] });
  return new Promise<boolean>((resolve) => {
    let out = '';
    const done = (ok: boolean): void => {
      clearTimeout(timer);
      p.kill('SIGKILL');
      resolve(ok);
    };
    const timer = setTimeout(() => done(false), timeoutMs);
    p.stdout.on('data', (d: Buffer) => {
      out = (out + d.toString()).slice(-4096);
      if (out.includes(STAGE_SAYS)) done(true);
    });
    p.once('error', () => done(false));
    p.once('close', () => done(out.includes(STAGE_SAYS)));
  });
}

/**
 * The accelerator for this node's microVMs: `kvm` when `kvmDevice` is there and a guest really
 * runs under it, else `tcg`. The probe runs once per boot of the host: its answer is kept in
 * `cacheDir` (`accel-BOOTID`).
 */
export async function chooseAccel(cacheDir: string, kit: () => Promise<GuestKit>, o: { kvmDevice?: string; timeoutMs?: number } = {}): Promise<'kvm' | 'tcg'> {
  if (!existsSync(o.kvmDevice ?? '/dev/kvm')) return 'tcg';
  const boot = (await readFile('/proc/sys/kernel/random/boot_id', 'utf8')).trim();
  const cached = join(cacheDir, `accel-${boot}`);
  const known = (await readFile(cached, 'utf8').catch(() => '')).trim();
  if (known === 'kvm' || known === 'tcg') return known;
  const accel = (await guestRuns(await kit(), 'kvm', o.timeoutMs ?? 10_000).catch(() => false)) ? 'kvm' : 'tcg';
  const tmp = `${cached}.${process.pid}`;
  await writeFile(tmp, accel);
  await rename(tmp, cached);
  return accel;
}
