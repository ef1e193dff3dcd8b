"""The Warren API's contract as the client needs it: every route's method and path template (``{id}``
and the like are filled in by :func:`warren._wire.route`), and what the server does with what a
request leaves out. Generated from packages/api (routes.ts, defaults.ts) by
``node scripts/gen-python.mjs``; a test fails when it drifts from it."""

from typing import Any, Dict, Tuple

# --- generated from the API contract by scripts/gen-python.mjs: do not edit by hand ---
ROUTES: Dict[str, Tuple[str, str]] = {
    "createSandbox": ("POST", "/v1/sandboxes"),
    "batchCreate": ("POST", "/v1/sandboxes/batch"),
    "listSandboxes": ("GET", "/v1/sandboxes"),
    "getSandbox": ("GET", "/v1/sandboxes/{id}"),
    "deleteSandbox": ("DELETE", "/v1/sandboxes/{id}"),
    "sandboxEvents": ("GET", "/v1/sandboxes/{id}/events"),
    "setTimeout": ("POST", "/v1/sandboxes/{id}/timeout"),
    "pause": ("POST", "/v1/sandboxes/{id}/pause"),
    "resume": ("POST", "/v1/sandboxes/{id}/resume"),
    "setNetwork": ("PATCH", "/v1/sandboxes/{id}/network"),
    "portProxy": ("GET", "/v1/sandboxes/{id}/ports/{port}/{path}"),
    "commit": ("POST", "/v1/sandboxes/{id}/commit"),
    "forkSandbox": ("POST", "/v1/sandboxes/{id}/fork"),
    "createSnapshot": ("POST", "/v1/sandboxes/{id}/snapshots"),
    "listSnapshots": ("GET", "/v1/snapshots"),
    "deleteSnapshot": ("DELETE", "/v1/snapshots/{name}"),
    "screen": ("GET", "/v1/sandboxes/{id}/screen"),
    "input": ("POST", "/v1/sandboxes/{id}/input"),
    "batchPause": ("POST", "/v1/batch/pause"),
    "batchResume": ("POST", "/v1/batch/resume"),
    "batchDelete": ("POST", "/v1/batch/delete"),
    "exec": ("POST", "/v1/sandboxes/{id}/exec"),
    "commandOutput": ("GET", "/v1/sandboxes/{id}/commands/{commandId}"),
    "killCommand": ("POST", "/v1/sandboxes/{id}/commands/{commandId}/kill"),
    "listCommands": ("GET", "/v1/sandboxes/{id}/commands"),
    "resizeCommand": ("POST", "/v1/sandboxes/{id}/commands/{commandId}/resize"),
    "pty": ("GET", "/v1/sandboxes/{id}/pty"),
    "commandStdin": ("POST", "/v1/sandboxes/{id}/commands/{commandId}/stdin"),
    "createSession": ("POST", "/v1/sandboxes/{id}/sessions"),
    "deleteSession": ("DELETE", "/v1/sandboxes/{id}/sessions/{sessionId}"),
    "writeFile": ("PUT", "/v1/sandboxes/{id}/files"),
    "readFile": ("GET", "/v1/sandboxes/{id}/files"),
    "deleteFile": ("DELETE", "/v1/sandboxes/{id}/files"),
    "listFiles": ("GET", "/v1/sandboxes/{id}/files/list"),
    "statFile": ("GET", "/v1/sandboxes/{id}/files/stat"),
    "mkdir": ("POST", "/v1/sandboxes/{id}/files/mkdir"),
    "move": ("POST", "/v1/sandboxes/{id}/files/move"),
    "putArchive": ("PUT", "/v1/sandboxes/{id}/archive"),
    "getArchive": ("GET", "/v1/sandboxes/{id}/archive"),
    "listImages": ("GET", "/v1/images"),
    "importImage": ("POST", "/v1/images/import"),
    "pullImage": ("POST", "/v1/images/pull"),
    "putImage": ("PUT", "/v1/images/{name}"),
    "deleteImage": ("DELETE", "/v1/images/{name}"),
    "uploadLayer": ("POST", "/v1/layers"),
    "publishLayers": ("POST", "/v1/layers/publish"),
    "listBlobs": ("GET", "/v1/blobs/"),
    "getBlob": ("GET", "/v1/blobs/{file}"),
    "listLayers": ("GET", "/v1/layers"),
    "deleteLayer": ("DELETE", "/v1/layers/{name}"),
    "listNodes": ("GET", "/v1/nodes"),
    "joinNode": ("POST", "/v1/nodes/join"),
    "heartbeat": ("POST", "/v1/nodes/{id}/heartbeat"),
    "drainNode": ("POST", "/v1/nodes/{id}/drain"),
    "undrainNode": ("POST", "/v1/nodes/{id}/ready"),
    "audit": ("GET", "/v1/audit"),
    "createKey": ("POST", "/v1/keys"),
    "deleteKey": ("DELETE", "/v1/keys/{keyId}"),
    "info": ("GET", "/v1/info"),
    "metricsHistory": ("GET", "/v1/metrics/history"),
    "createLease": ("POST", "/v1/leases"),
    "listLeases": ("GET", "/v1/leases"),
    "getLease": ("GET", "/v1/leases/{id}"),
    "renewLease": ("POST", "/v1/leases/{id}/renew"),
    "deleteLease": ("DELETE", "/v1/leases/{id}"),
    "events": ("GET", "/v1/events"),
    "createPool": ("POST", "/v1/pools"),
    "listPools": ("GET", "/v1/pools"),
    "deletePool": ("DELETE", "/v1/pools/{id}"),
    "fnRun": ("POST", "/v1/fn/run"),
    "fnBatch": ("POST", "/v1/fn/batch"),
    "openapi": ("GET", "/v1/openapi.json"),
}

DEFAULTS: Dict[str, Any] = {
    "exec": {
        "timeoutMs": 60000,
        "maxOutputBytes": 10485760
    },
    "fn": {
        "timeoutMs": 10000,
        "maxOutputBytes": 1048576,
        "cwd": "/tmp",
        "image": "debian-python:latest",
        "resources": {
            "cpu": 1,
            "memoryMiB": 512,
            "pids": 256
        }
    },
    "sandbox": {
        "resources": {
            "cpu": 1,
            "memoryMiB": 512,
            "pids": 1024,
            "cpuClass": "latency"
        },
        "ttlSeconds": 3600
    },
    "memoryRequestFraction": 0.25
}
# --- end of the generated part ---
