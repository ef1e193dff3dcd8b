/**
 * Where each webhook has got to in the event log, and which replica sends to it: a row per hook
 * (its cursor, the last seq it delivered) with a claim (a holder and a deadline by the store's
 * clock). The replica holding the claim sends and renews it; when it stops renewing (it died),
 * another takes it once the deadline has passed, and goes on from the cursor.
 */
export interface WebhookStore {
  /**
   * Takes or renews `hook`'s claim for `holder` for `ttlMs`: a hook new to the store begins at
   * `start`. Answers the cursor when `holder` holds the claim now, null when another does.
   */
  claim(hook: string, holder: string, ttlMs: number, start: number): Promise<number | null>;
  /** Moves the cursor to `seq` and renews the claim, if `holder` still holds it; whether it did. */
  advance(hook: string, holder: string, seq: number, ttlMs: number): Promise<boolean>;
  /** Gives the claim up (a replica that stops): another takes it at once. */
  release(hook: string, holder: string): Promise<void>;
  /** The cursor (null: no such hook yet). */
  cursor(hook: string): Promise<number | null>;
}
