import { WarrenError } from '@warren/api';
import { OutputBudget, takeFromAll } from './output-budget.js';

/** The default: a 32nd of the machine's memory, between 64 MiB and 1 GiB. */
export function defaultStdinBudget(totalMemBytes: number): number {
  return Math.max(64 * 2 ** 20, Math.min(2 ** 30, Math.floor(totalMemBytes / 32)));
}

/**
 * The stdin a node holds for its commands while their sandboxes have not taken it (a write waits
 * for that, Command.writeStdin): all commands together, and each tenant's share (half). One
 * command's is bounded on its own too; this bounds many commands that each hold theirs.
 */
export class StdinBudgets {
  private readonly node: OutputBudget;
  private readonly shares = new Map<string, OutputBudget>();

  constructor(totalBytes: number) {
    this.node = new OutputBudget(totalBytes);
  }

  /** What the stdin of a command of `tenant` is held in. */
  forTenant(tenant: string | undefined): StdinHold {
    if (tenant === undefined) return new StdinHold([this.node]);
    let share = this.shares.get(tenant);
    if (!share) this.shares.set(tenant, (share = new OutputBudget(Math.floor(this.node.totalBytes / 2))));
    return new StdinHold([this.node, share]);
  }
}

/** One command's hold on the stdin budgets: taken while a write waits, given back once it is taken. */
export class StdinHold {
  constructor(private readonly budgets: OutputBudget[]) {}

  /** Takes `n` bytes from every budget, or none and throws resource_exhausted. */
  take(n: number): void {
    const got = takeFromAll(this.budgets, n);
    if (got === n) return;
    this.give(got);
    const full = this.budgets.find((b) => b.totalBytes - b.used < n) ?? this.budgets[0]!;
    throw new WarrenError('resource_exhausted', 'this node holds as much stdin waiting for its commands as it may (they are not reading it); try again later', {
      pendingStdinBytes: full.used,
      maxPendingStdinBytes: full.totalBytes,
    });
  }

  give(n: number): void {
    for (const b of this.budgets) b.give(n);
  }
}
