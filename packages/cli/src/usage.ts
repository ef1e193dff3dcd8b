import { DEFAULT_IMAGES } from '@warren/images';
import { upUsage } from './node-options.js';

/** What `warren help` prints. */
export const USAGE = `warren — sandboxes for agents

${upUsage()}
  warren down [--data-dir DIR]
${upUsage(undefined, 'server')}
${upUsage(undefined, 'edge')}
  warren create IMAGE [--layer NAME]... [--cpu N] [--cpu-class latency|batch] [--memory MiB] [--ttl S] [--label k=v]... [--env K=V]... [--user U] [--workdir DIR]
                [--egress deny|allow] [--allow DOMAIN|CIDR]... [--deny DOMAIN|CIDR]... [--endpoint NAME]...
  warren network ID [--egress deny|allow] [--allow RULE]... [--deny RULE]... [--endpoint NAME]...   replace a running sandbox's rules
  warren exec ID [--session SS] [--timeout MS] -- CMD [ARG...]   (one arg: run by a shell)
  warren shell ID                    a terminal in the sandbox (stdin not a terminal: a persistent shell, one command per line)
  warren cp SRC DST                  one side is ID:/path
  warren ls ID [PATH]
  warren ps [--label k=v]... [--state STATE]
  warren rm ID...   warren pause ID   warren resume ID
  warren images [prepare]            list (or build the default images)
  warren images import FILE --name NAME   a docker save / OCI layout tarball, with a progress bar
  warren images pull REF [--name NAME]    from an OCI registry (host:port/repo:tag)
  warren images rm [--force] NAME...   refused while live sandboxes use it, unless --force
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
