/** Work under way, so that a close can wait until it has settled (and refuse more meanwhile). */
export class InFlight {
  private readonly all = new Set<Promise<unknown>>();
  private closed = false;

  /** `refusal`: what work started after `close` is rejected with. */
  constructor(private readonly refusal: () => Error) {}

  /** Starts `work` and counts it as under way until it settles; rejected at once after `close`. */
  run<T>(work: () => Promise<T>): Promise<T> {
    if (this.closed) return Promise.reject(this.refusal());
    const p = work();
    this.all.add(p);
    const done = (): void => void this.all.delete(p);
    p.then(done, done);
    return p;
  }

  /** Refuses new work and resolves once all work under way has settled (whichever way). */
  async close(): Promise<void> {
    this.closed = true;
    await Promise.allSettled([...this.all]);
  }
}
