/**
 * The command output a node holds for all its sandboxes together (what exec answers, reattach
 * replays and a stream catches up from): every retained byte is taken from here and given back
 * when its command is forgotten. A command's output past what is left is dropped and the
 * command marked truncated, as past its own cap; a new command is refused while it is spent.
 */
export class OutputBudget {
  private usedBytes = 0;

  constructor(readonly totalBytes: number) {}

  get used(): number {
    return this.usedBytes;
  }

  get spent(): boolean {
    return this.usedBytes >= this.totalBytes;
  }

  /** Up to `n` bytes, as many as are left. */
  take(n: number): number {
    const granted = Math.max(0, Math.min(n, this.totalBytes - this.usedBytes));
    this.usedBytes += granted;
    return granted;
  }

  give(n: number): void {
    this.usedBytes = Math.max(0, this.usedBytes - n);
  }
}

/** As many of `n` bytes as every budget has left, taken from each. */
export function takeFromAll(budgets: OutputBudget[], n: number): number {
  let granted = n;
  const took: number[] = [];
  for (const b of budgets) {
    granted = b.take(granted);
    took.push(granted);
  }
  // What an earlier budget gave beyond what a later one had goes back.
  budgets.forEach((b, i) => b.give(took[i]! - granted));
  return granted;
}

/** The default: an eighth of the machine's memory, at most 4 GiB. */
export function defaultOutputBudget(totalMemBytes: number): number {
  return Math.min(4 * 2 ** 30, Math.floor(totalMemBytes / 8));
}
