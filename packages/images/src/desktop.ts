import { chmod, mkdir, rm, symlink, writeFile } from 'node:fs/promises';
import { dirname, join } from 'node:path';
import { buildDebianRootfs, type DebianImageOptions } from './debian.js';

/**
 * The desktop image's packages: systemd to boot it as a machine, X on the VESA framebuffer
 * (fbdev) with libinput for the virtual keyboard and tablet, twm as its window manager, xterm,
 * the fonts xterm needs, and the tools a computer-use agent's scripts expect (python3, xwininfo).
 */
export const DESKTOP_PACKAGES = [
  'systemd',
  'systemd-sysv',
  'udev',
  'xserver-xorg-core',
  'xserver-xorg-video-fbdev',
  'xserver-xorg-input-libinput',
  'xinit',
  'xterm',
  'twm',
  'xfonts-base',
  'x11-utils',
  'python3',
  'bash',
  'coreutils',
  'procps',
  'ca-certificates',
];

/**
 * The files that make a Debian root a desktop (pure; paths relative to the root): a unit that
 * starts X on the display at boot with a session of twm and one terminal, and is started only
 * once that terminal runs (so a boot that is done has its desktop up), with no screen blanking.
 */
export function desktopFiles(): Array<{ path: string; data: string; mode: number }> {
  return [
    {
      path: 'etc/systemd/system/warren-desktop.service',
      mode: 0o644,
      data: `[Unit]
Description=Warren desktop: X on the virtual display, twm and a terminal
After=systemd-udev-trigger.service systemd-user-sessions.service

[Service]
Type=forking
ExecStart=/usr/local/sbin/warren-desktop
TimeoutStartSec=600

[Install]
WantedBy=multi-user.target
`,
    },
    {
      path: 'usr/local/sbin/warren-desktop',
      mode: 0o755,
      data: `#!/bin/sh
# Starts X on the virtual display (vt7) with Warren's session; returns once its terminal runs.
rm -f /run/warren-desktop.up
setsid xinit /etc/X11/warren-session -- /usr/bin/Xorg :0 vt7 -nolisten tcp -s 0 -dpms </dev/null >/var/log/warren-desktop.log 2>&1 &
x=$!
i=0
while [ ! -e /run/warren-desktop.up ]; do
  i=$((i + 1))
  # X gone, or no terminal after 10 minutes: the unit fails (its log says why).
  if [ "$i" -gt 6000 ] || ! kill -0 "$x" 2>/dev/null; then
    cat /var/log/warren-desktop.log >&2
    exit 1
  fi
  sleep 0.1
done
`,
    },
    {
      path: 'etc/X11/warren-session',
      mode: 0o755,
      data: `#!/bin/sh
# Warren's desktop session: one terminal at the top left, twm around it. twm's fonts have no
# UTF-8 fontset: it runs in the C locale (in C.UTF-8 it exits, and the session with it).
xterm -geometry 100x30+0+0 -e /bin/sh -c 'touch /run/warren-desktop.up; cd /root; exec bash -l' &
exec env LC_ALL=C twm
`,
    },
    {
      path: 'etc/X11/xorg.conf.d/10-warren.conf',
      mode: 0o644,
      data: `Section "Device"
  Identifier "display"
  Driver "fbdev"
EndSection

Section "ServerFlags"
  Option "BlankTime" "0"
  Option "StandbyTime" "0"
  Option "SuspendTime" "0"
  Option "OffTime" "0"
EndSection
`,
    },
  ];
}

/** Builds the desktop image's root in `dir`: Debian with DESKTOP_PACKAGES and desktopFiles, its desktop unit enabled, no /etc/hostname. */
export async function buildDesktopRootfs(dir: string, opts: DebianImageOptions = {}): Promise<void> {
  await buildDebianRootfs(dir, { ...opts, packages: opts.packages ?? DESKTOP_PACKAGES });
  // No hostname of its own: systemd then keeps the one Warren gave the VM (the sandbox's).
  await rm(join(dir, 'etc/hostname'), { force: true });
  for (const f of desktopFiles()) {
    await mkdir(dirname(join(dir, f.path)), { recursive: true });
    await writeFile(join(dir, f.path), f.data);
    await chmod(join(dir, f.path), f.mode);
  }
  const wants = join(dir, 'etc/systemd/system/multi-user.target.wants');
  await mkdir(wants, { recursive: true });
  await symlink('/etc/systemd/system/warren-desktop.service', join(wants, 'warren-desktop.service'));
}
