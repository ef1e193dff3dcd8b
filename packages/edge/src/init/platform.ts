/**
 * The platform mount: what Warren puts in every sandbox, read-only at {@link PLATFORM_MOUNT}, for
 * its agent and for the edge's own work inside (the contract a backend provides, whatever it
 * is: a bind mount in a container, a shared file system in a VM).
 *
 * - `warren-init`: PID 1 of the sandbox, Warren's agent (native/init/); it serves the
 *   init protocol (init/frame.ts) on the socket the backend hands it (fd 3 in a container).
 * - `bash`, `busybox`: static builds the edge runs commands, sessions, file moves and tar with,
 *   so they work whatever the image has (an image without a shell included).
 * - `libwarren-fn.so` and `fn-zygote.py`: a FnCall worker's per-call isolation (native/fn.c) and its Python zygote.
 * Nothing there is writable from inside, and nothing there belongs to a tenant.
 */
export const PLATFORM_MOUNT = '/.warren';
/** The sandbox's PID 1. */
export const INIT_PATH = `${PLATFORM_MOUNT}/warren-init`;
/**
 * The shell strings and sessions run with: the platform's own static bash, never the image's
 * /bin/sh or /bin/bash, so a sandbox that overwrites those changes only what it runs itself, not
 * the next command or session.
 */
export const SHELL = `${PLATFORM_MOUNT}/bash`;
/** The platform's own busybox (tar, mv, chown), inside every sandbox. */
export const BUSYBOX = `${PLATFORM_MOUNT}/busybox`;

/**
 * What a commit leaves out of every layer: the platform mount, the files the edge writes into a
 * sandbox (resolv.conf, hosts, hostname) and shell histories (paths relative to the root).
 */
export const COMMIT_RESIDUES = { paths: ['.warren', 'etc/resolv.conf', 'etc/hosts', 'etc/hostname'], regex: ['^(root|home/[^/]+)/\\.[a-z]*_history$'] };
