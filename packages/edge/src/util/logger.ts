/** Where a node's and a control plane's own messages go: the CLI passes one that writes to stderr. */
export interface Logger {
  info(msg: string, meta?: unknown): void;
  warn(msg: string, meta?: unknown): void;
}
