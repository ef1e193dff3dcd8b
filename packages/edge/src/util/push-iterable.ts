/**
 * An async iterable fed by a source that pushes: `start` is called on the first read with
 * `push` and `end` (an error ends the iteration with it) and returns the function that stops the
 * source, called when the reader stops early or the source ended. Values are queued until read
 * (the source bounds how many it pushes).
 */
export function pushIterable<T>(start: (push: (v: T) => void, end: (err?: Error) => void) => () => void): AsyncIterable<T> {
  return {
    [Symbol.asyncIterator](): AsyncIterator<T> {
      const queue: T[] = [];
      let done = false;
      let failure: Error | null = null;
      let wake: (() => void) | null = null;
      let stop: (() => void) | null = null;
      const finish = (): void => {
        const s = stop;
        stop = null;
        s?.();
      };
      const open = (): void => {
        if (stop || done) return;
        stop = start(
          (v) => {
            if (done) return;
            queue.push(v);
            wake?.();
          },
          (err) => {
            if (done) return;
            done = true;
            failure = err ?? null;
            wake?.();
          },
        );
        // The source may have ended while it started.
        if (done) finish();
      };
      return {
        async next(): Promise<IteratorResult<T>> {
          open();
          while (queue.length === 0 && !done) await new Promise<void>((r) => (wake = r));
          wake = null;
          if (queue.length) return { value: queue.shift() as T, done: false };
          finish();
          if (failure !== null) {
            const e = failure;
            failure = null;
            throw e;
          }
          return { value: undefined, done: true };
        },
        async return(): Promise<IteratorResult<T>> {
          done = true;
          queue.length = 0;
          finish();
          wake?.();
          return { value: undefined, done: true };
        },
      };
    },
  };
}
