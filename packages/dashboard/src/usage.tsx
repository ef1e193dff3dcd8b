import { useEffect, useState } from 'preact/hooks';
import type { Sandbox } from './api.js';
import type { UsageCharts as UsageChartsView } from './charts.js';

/** Samples kept: 30 minutes of the page's 3 s refresh. */
const MAX_SAMPLES = 600;

/** A sandbox's usage samples as its page read them: when (ms), cores lately, memory (MiB). */
export interface UsageSamples {
  atMs: number[];
  cores: number[];
  memoryMiB: number[];
}

/** The samples with one more (the oldest dropped past MAX_SAMPLES); pure. */
export function addSample(s: UsageSamples, atMs: number, usage: Sandbox['usage']): UsageSamples {
  const keep = (xs: number[], x: number): number[] => [...xs.slice(-(MAX_SAMPLES - 1)), x];
  return { atMs: keep(s.atMs, atMs), cores: keep(s.cores, usage.cpuRecent), memoryMiB: keep(s.memoryMiB, Math.round(usage.memoryBytes / 2 ** 20)) };
}

/** Its CPU and memory over the time the page has been open (uPlot, loaded once there are two samples). */
export function UsageOverTime(p: { samples: UsageSamples }) {
  const [Charts, setCharts] = useState<typeof UsageChartsView | null>(null);
  const enough = p.samples.atMs.length >= 2;
  useEffect(() => {
    if (enough && !Charts) void import('./charts.js').then((m) => setCharts(() => m.UsageCharts));
  }, [enough]);
  if (!enough || !Charts) return <p class="sub">Usage over time shows once the page has read it twice (every 3 s).</p>;
  return <Charts {...p.samples} />;
}
