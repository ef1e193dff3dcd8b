export { startWarren, VERSION } from './node.js';
export type { Logger, RunningWarren, WarrenOptions } from './node.js';
export { createApp } from './http/app.js';
export type { AppDeps } from './http/app.js';
export { SqliteStore } from './store/sqlite-store.js';
export type { KeyRecord, ListFilter, SandboxRecord, Store } from './store/store.js';
export { SandboxService } from './services/sandboxes.js';
export type { Caller } from './services/sandboxes.js';
export { Auth } from './services/auth.js';
