import { DEFAULT_IMAGES } from '@warren/images';

/** What `warren help` prints. */
export const USAGE = `warren — sandboxes for agents

  warren up [--port 7070] [--host 127.0.0.1] [--data-dir DIR] [--keep-sandboxes] [--runtime native|runc]
            [--blob-url URL [--blob-cache-gib 20]]   read layers this node lacks on demand from a blob store:
                                     a registry repository oci://HOST/REPO (oci+http:// for plain HTTP), or
                                     another node's http://HOST:7070/v1/blobs/ with WARREN_BLOB_KEY=its admin key;
                                     WARREN_BLOB_USER/WARREN_BLOB_PASSWORD for a store that wants Basic auth
            [--no-network]            sandboxes get loopback only
            [--egress-hosts FILE]     names the egress proxy resolves from FILE (hosts(5) lines) before DNS
            [--sandbox-subnet CIDR]   the sandboxes' /18 (default: a free one in 10.200.0.0/13)
            [--dns-rate N]            DNS queries a sandbox may send per second, a burst of 2N first (default 1000)
            [--zram-swap-mib N]       compressed swap in RAM for paused sandboxes (set up now, removed at stop;
                                     default: half the memory, unless the host has swap) [--no-zram-swap]
            [--cpu-overcommit 64] [--cpu-busy 0.9] [--memory-overcommit 1.5] [--memory-floor-mib N]
            [--sandbox-disk-gib N] [--no-disk-quotas]   sandboxes' writable layers on a btrfs image of N GiB
                                     (sparse; default 80 % of free space past the reserve), each limited to its diskMiB (default 10 GiB)
            [--disk-reserve-mib N]    kept free on the data disk for Warren's own state: imports, uploads, pulls
                                     and commits that would reach into it are refused (default 5 %, 256 MiB to 2 GiB)
            [--fn-pool IMAGE[:LANGUAGE]=N]...   FnCall workers kept warm (python: its zygote started too)
            [--fn-max-workers N] [--fn-queue-limit N]   FnCall workers per image; calls a tenant may have waiting
            [--pull-registries HOST[:PORT],...]   registries non-admin keys may pull from (default: none)
  warren down [--data-dir DIR]
  warren create IMAGE [--layer NAME]... [--cpu N] [--memory MiB] [--ttl S] [--label k=v]... [--env K=V]... [--user U] [--workdir DIR]
                [--egress deny|allow] [--allow DOMAIN|CIDR]... [--deny DOMAIN|CIDR]...
  warren network ID [--egress deny|allow] [--allow RULE]... [--deny RULE]...   replace a running sandbox's rules
  warren exec ID [--session SS] [--timeout MS] -- CMD [ARG...]   (one arg: run by a shell)
  warren shell ID                    a persistent shell: one command per line
  warren cp SRC DST                  one side is ID:/path
  warren ls ID [PATH]
  warren ps [--label k=v]... [--state STATE]
  warren rm ID...   warren pause ID   warren resume ID
  warren images [prepare]            list (or build the default images)
  warren images import FILE --name NAME   a docker save / OCI layout tarball, with a progress bar
  warren images pull REF [--name NAME]    from an OCI registry (host:port/repo:tag)
  warren images rm NAME...
  warren layers [push FILE --name NAME | rm NAME...]   standalone layers for --layer
  warren layers publish --to oci://HOST/REPO [--image NAME] [LAYER...]   copy layers to a registry blob store
  warren commit ID NAME [--exclude PATH]...            the sandbox's changes as a new image
  warren fn run -l python|bash|node FILE|- [--image I] [--timeout MS] [--stdin FILE] [--file PATH=LOCAL]... [--env K=V]...
                                     one stateless call; prints its output, exits with its exit code

Environment: WARREN_URL, WARREN_API_KEY, WARREN_REGISTRY_USER/PASSWORD (images pull, layers publish)
(client); WARREN_DATA_DIR, WARREN_IMAGE_CACHE (server).`;

/** The usage and the default images' names. */
export function usage(): string {
  return `${USAGE}\n\nDefault images: ${Object.keys(DEFAULT_IMAGES).join(', ')}`;
}
