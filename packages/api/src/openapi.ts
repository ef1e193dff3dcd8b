import { z } from 'zod';
import { ERROR_CODES } from './errors.js';
import { ROUTES, type RouteSpec } from './routes.js';
import { WebhookBody } from './events.js';

/** Notes where Warren deliberately differs from or extends the shared API contract. */
export const CONTRACT_NOTES = [
  'Exec events may end with {"type":"error","error":{...}} when the sandbox is lost mid-command; the exit event is then absent.',
  'Exec takes keepStdinOpen: with it, stdin stays open after the `stdin` field for POST .../commands/{id}/stdin.',
  "POST .../commands/{id}/stdin (and a terminal's input) answers once the sandbox has taken the bytes (the command read them, or its pipe holds them), writes to one command in order: a caller never outruns a command that reads slowly. While 16 MiB of a command's stdin wait, another write answers resource_exhausted (details.maxPendingStdinBytes), as it does while the node holds as much waiting stdin as it may for all commands (a 32nd of its memory, 64 MiB to 1 GiB; one tenant's half of it); so does a write whose bytes the sandbox does not take within 30 s (details.stdinBytes: what was sent by then stays sent). An exec's own `stdin` is held the same way from the start (resource_exhausted before the command starts). A command's output is streamed as fast as its client reads it, retained output in events of at most 64 KiB.",

  'Sandbox objects also carry layers, user, workdir and idleTimeoutSeconds.',
  'An exec whose requestId already ran, but whose command is no longer kept (10 minutes after it finished, once its sandbox has finished 1,024 newer commands, or after a Warren restart), answers conflict instead of running it again.',
  "A node holds command output for all its sandboxes together up to a bound (an eighth of its memory, at most 4 GiB), and one tenant's sandboxes up to half of it: finished commands are forgotten, the oldest first, to make room; past a bound a running command's output is dropped and marked truncated, and while running commands hold all of it an exec answers resource_exhausted (details.maxRetainedOutputBytes).",
  "A key's quota counts the FnCall workers made for its calls (one per image and size its calls ask for, and per waiting call up to the node's limit) as sandboxes of their size; past it its calls wait for the workers there are, or answer resource_exhausted where there are none.",
  'File entries carry `target` for symlinks; mtime is an ISO-8601 string.',
  'A create names its backend (container by default, microvm or vm): one that no node runs answers invalid_argument naming those there are, and placement takes only the nodes that run it.',
  "Network rules: domains are reached over HTTP (port 80, by Host) and HTTPS (port 443, by TLS SNI, never terminated) through the node's proxy; an IPv4 address or CIDR in `allow` opens direct connections (any port) to it, one in `deny` closes them; IPv6 rules are refused. `*.example.com` matches names under example.com, not example.com itself; `*`, `*.com` and the like are refused. DNS in the sandbox answers only allowed names (with the address of its link's far end) and never forwards a query. A plain-HTTP connection carries one request. A CIDR wider than the key's `quota.cidrMinPrefix` (default /16 for user keys) answers permission_denied.",
  'Sandbox objects carry `network`: the rules as applied (normalised), the sandbox\'s `address`, and `usage` (bytes in/out of its link, connections allowed and denied, counted per name; refused direct connections under "(direct address)").',
  'Named layers can also be listed (GET /v1/layers) and deleted (DELETE /v1/layers/{name}); POST /v1/layers answers 201 {name, digest, sizeBytes, createdAt}.',
  'Deleting an image or a layer needs an admin key; what no other image, layer or running sandbox uses is freed at once.',
  'Import and pull stream {"type":"progress"} lines and end with {"type":"done","image":...} or {"type":"error","error":{...}}; a pull whose ref does not parse answers 400 instead of a stream.',
  'Up to 120 extra layers per create; layer and image names are lowercase path segments with an optional :tag.',
  "GET /v1/blobs/ and /v1/blobs/{file} (admin; ranges, HEAD) serve this node's layer blobs: another node reads layers on demand from them (warren up --blob-url URL with WARREN_BLOB_KEY). PUT /v1/images/{name} (admin) names an image from layer digests held here or in that store. A cluster's store can also be an OCI registry: POST /v1/layers/publish (admin) copies layers there (one artifact per layer, tagged with its hex digest: metadata and data blobs), and warren up --blob-url oci://HOST/REPO reads them on demand. Pull and publish take an optional `auth` {username, password} for registries that want credentials (Basic auth, or sent to the registry's token service); it is never stored.",
  "Pause also pages the sandbox's anonymous memory out (to swap, when the node has some); `lifetime.ttlCountsPaused` (default false) says whether paused time counts against ttlSeconds (when not, expiresAt moves on at resume). Sandbox `usage` also has cpuRecent (cores), swapBytes and idleSeconds; nodes also report committed (what admission counts: running requests plus what paused sandboxes keep), used (cpu, memoryMiB, swapMiB) and paused. Pools answer {id, image, layers, resources, network, size, ready, claims, claimsPerSecond, lastError, createdAt}; a pool is its tenant's, and its unclaimed sandboxes are not listed.",
  "Commit freezes the sandbox while its writable layer is read, and leaves out the /.warren mount point, the /etc/resolv.conf, /etc/hosts and /etc/hostname the node writes, and shell histories besides `exclude`. The committed image keeps its source image's `env` (not the create's).",
  "Images carry `env`: their own environment (an imported or pulled image's OCI config `Env`; PUT /v1/images/{name} takes one). Every process Warren starts in a sandbox (commands, sessions, FnCalls) gets, as Docker gives a container's: the image's env, PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin when it sets none, HOME, USER and LOGNAME from the image's passwd for the process's user when none of these sets them, then the create's env, then the call's (later wins). Each sandbox has a host name of its own (its id with - for _) in its UTS namespace, /etc/hostname, and an /etc/hosts that resolves localhost (127.0.0.1, ::1) and that name (127.0.1.1).",
  "resources.cpuClass is `latency` (the default) or `batch`: a batch sandbox runs on the CPU the node's latency sandboxes leave idle (its cgroup the least weight, cpu.shares 2 on cgroup v1 with cpu.idle where the kernel has it, cpu.weight 1 and cpu.idle 1 on v2; every process of it SCHED_IDLE, which nothing inside can leave; a microVM's or VM's QEMU likewise), so a node saturated by batch work still answers a latency sandbox at once. Its `cpu` limit stands as given. Sandbox objects and pools carry resources.cpuClass. FnCall's bulk calls (POST /v1/fn/batch) run on batch workers, single calls on latency ones. A key whose quota has cpuClass `batch` (POST /v1/keys) makes batch sandboxes and FnCalls only: a create of it that asks for latency answers permission_denied; any other value answers invalid_argument.",
  'resources.diskMiB is enforced by the file system (a btrfs qgroup per sandbox; default 10240, at most a quarter of the file system the sandboxes share; more than half of it answers resource_exhausted, as does a create that finds the file system with no room for another sandbox); on a node started with --no-disk-quotas a create that asks for it answers invalid_argument (fail closed, not ignored).',
  'Images carry `tenant`: an image a non-admin key makes (commit, import, pull) is its tenant’s, listed and usable only by its keys (not_found for others) and not replaceable by another tenant (permission_denied); default images and an admin’s are every tenant’s (tenant null). Named layers carry `tenant` the same way: a layer a non-admin key uploads is listed and stackable (`layers` on create, by name or by digest) only by its tenant’s keys, and its name is not taken over by another tenant.',
  'Keys have roles admin, builder, runner and user (user keeps what keys could do before: as builder); a runner key cannot commit, import, pull or upload layers (permission_denied). POST /v1/keys also answers keyId (k_ + 16 hex of the key hash), which names the key in the audit log. GET /v1/audit (admin; limit, tenant, sandbox) lists mutating calls newest first: at, keyId, tenant, method, path, sandbox, status, code.',
  'FnCall: requests also take env, cwd (default /tmp), resources {cpu, memoryMiB, pids}, maxOutputBytes (default 1 MiB: past it the call is killed and answers truncated) and files[].encoding (utf8|base64; relative paths are under cwd; /proc, /sys and /dev are refused); timeoutMs defaults to 10000 and image to debian-python:latest. Results also carry signal, queuedMs (time waiting for a free worker) and truncated. A batch answers {results} in order, an entry {error: {code, message}} for a call that could not run; a request naming an unknown image, a refused path or more calls than the tenant may have waiting (default 10000) fails whole (resource_exhausted for the queue). A language the image lacks answers invalid_argument. Python code runs as with `python3 -c`, forked from a warm interpreter for the images Warren builds itself (Image.builtIn): PYTHON* variables in env, and any other image, make the call start its own interpreter instead. Workers are shared between tenants; nothing of a call outlives it.',
  "Nodes: `state` is also `joining` (the control plane is making the store and a node that joins again agree on its sandboxes); node objects also carry `backends` and `byBackend` (sandboxes and paused ones per backend). Edges join with the cluster's join token (not an API key): POST /v1/nodes/join {name, address, token, boot} and POST /v1/nodes/{id}/heartbeat {boot, load} (204; 409 when the node must join again); the join token reaches nothing else (permission_denied) but the blob store. POST /v1/nodes/{id}/drain and POST /v1/nodes/{id}/ready (admin) stop and restart placements on a node; the node of a single-node Warren cannot be drained.",
  'A create that no node can take answers resource_exhausted with details.nodes: why, per node. Sandboxes of a node that stopped sending heartbeats become failed (error: node NAME stopped answering); a create that a control plane never finished (it died) becomes failed (its create was cut off). Lists and gets answer while a node is down or silent, showing its sandboxes as recorded.',
  'POST /v1/sandboxes/batch places every sandbox before recording any, records them together and starts them side by side; `errors` has one entry per sandbox that could not be made, and none is left behind. The batch has at most 1000. `schedule.waitSeconds` (0–3600) makes a create wait for room while the cluster is full, in a queue per tenant served in turns (a tenant with 10,000 waiting answers resource_exhausted at once); a quota is not waited out; the time running out answers resource_exhausted. /metrics has warren_creates_waiting.',
];

function schema(t: z.ZodType): unknown {
  return z.toJSONSchema(t, { io: 'input', unrepresentable: 'any' });
}

function operation(name: string, spec: RouteSpec): Record<string, unknown> {
  const params: unknown[] = [...spec.path.matchAll(/\{(\w+)\}/g)].map((m) => ({
    name: m[1],
    in: 'path',
    required: true,
    schema: { type: 'string' },
  }));
  if (spec.query) {
    const js = schema(spec.query) as { properties?: Record<string, unknown>; required?: string[] };
    for (const [k, v] of Object.entries(js.properties ?? {})) {
      params.push({ name: k, in: 'query', required: js.required?.includes(k) ?? false, schema: v });
    }
  }
  const op: Record<string, unknown> = { operationId: name, summary: spec.summary, parameters: params };
  if (spec.body) op.requestBody = { required: true, content: { 'application/json': { schema: schema(spec.body) } } };
  if (spec.rawBody) op.requestBody = { required: true, content: { [spec.rawBody]: { schema: { type: 'string', format: 'binary' } } } };
  const content: Record<string, unknown> = {};
  if (spec.response) content['application/json'] = { schema: schema(spec.response) };
  if (spec.rawResponse) content[spec.rawResponse] = { schema: { type: 'string', format: 'binary' } };
  op.responses = {
    [String(spec.status)]: Object.keys(content).length ? { description: 'OK', content } : { description: 'OK' },
    default: { description: 'Error', content: { 'application/json': { schema: { $ref: '#/components/schemas/Error' } } } },
  };
  return op;
}

/** The OpenAPI 3.1 document of the Warren API, generated from the route schemas. */
export function buildOpenApi(version: string): Record<string, unknown> {
  const paths: Record<string, Record<string, unknown>> = {};
  for (const [name, spec] of Object.entries(ROUTES)) {
    const p = (paths[spec.path] ??= {});
    p[spec.method.toLowerCase()] = operation(name, spec);
  }
  return {
    openapi: '3.1.0',
    info: { title: 'Warren API', version, description: CONTRACT_NOTES.join('\n') },
    components: {
      securitySchemes: { bearer: { type: 'http', scheme: 'bearer' } },
      schemas: {
        Error: {
          type: 'object',
          required: ['error'],
          properties: {
            error: {
              type: 'object',
              required: ['code', 'message'],
              properties: {
                code: { type: 'string', enum: [...ERROR_CODES] },
                message: { type: 'string' },
                details: { type: 'object' },
              },
            },
          },
        },
      },
    },
    security: [{ bearer: [] }],
    paths,
    webhooks: { lifecycleEvents: webhookOperation() },
  };
}

/** What the server POSTs to an operator's webhook (`--webhook URL`). */
function webhookOperation(): Record<string, unknown> {
  const header = (name: string, description: string): unknown => ({ name, in: 'header', required: true, description, schema: { type: 'string' } });
  return {
    post: {
      operationId: 'lifecycleEvents',
      summary:
        "Every tenant's lifecycle events, in seq order, at most 100 (256 KiB) a POST; retried (0.5 s doubling to 60 s, jittered; 10 s a POST) until answered 2xx, so at least once: drop a seq already handled.",
      security: [],
      parameters: [
        header('Warren-Signature', 't=<unix seconds>,v1=<hex HMAC-SHA256(secret, "<t>.<raw body>")>: compare in constant time, refuse a t far from now'),
        header('Warren-Event-Ids', "the events' seqs, comma-separated"),
        header('Warren-Delivery-Attempt', 'this batch’s attempt, from 1'),
      ],
      requestBody: { required: true, content: { 'application/json': { schema: schema(WebhookBody) } } },
      responses: { '2XX': { description: 'Taken: the next events follow' }, default: { description: 'Not taken: sent again later' } },
    },
  };
}
