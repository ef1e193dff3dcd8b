/**
 * The order a shell's commands are sent in: the order they were called. The server runs a
 * session's commands one at a time in the order they reach it, and calls made at once go on
 * different connections (and through the server's own hops to the node), so they may reach it
 * in another order than they were made. Each call therefore waits until the one called before it
 * was taken (answered, or its stream's first event read: the server sends that as soon as the
 * command has its place); only the sending waits, the server holds the queue.
 */
export class Turns {
  private last: Promise<void> = Promise.resolve();

  /**
   * A place in the order: `ready` settles when the calls before it were taken; `done` says this
   * one was (or gave up). A call that gives up early still lets the next go only after the ones
   * before it.
   */
  take(): { ready: Promise<void>; done: () => void } {
    const ready = this.last;
    let done!: () => void;
    const mine = new Promise<void>((resolve) => (done = resolve));
    this.last = ready.then(() => mine);
    return { ready, done };
  }
}
