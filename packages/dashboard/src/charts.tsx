import 'uplot/dist/uPlot.min.css';
import uPlot from 'uplot';
import { useEffect, useRef } from 'preact/hooks';
import type { HistoryPoint } from '@warren/api';

/** The charts: each a few of the history's series over time. */
const CHARTS: Array<{ title: string; series: Array<{ label: string; value: (p: HistoryPoint) => number; stroke: string }> }> = [
  {
    title: 'Creates, commands and FnCall calls per second',
    series: [
      { label: 'creates/s', value: (p) => p.createsPerSecond, stroke: '#1f5fbf' },
      { label: 'commands/s', value: (p) => p.commandsPerSecond, stroke: '#1e7d32' },
      { label: 'command errors/s', value: (p) => p.commandErrorsPerSecond, stroke: '#b3261e' },
      { label: 'FnCall calls/s', value: (p) => p.fnCallsPerSecond, stroke: '#8a6d00' },
    ],
  },
  {
    title: 'Sandboxes',
    series: [
      { label: 'running', value: (p) => p.running, stroke: '#1e7d32' },
      { label: 'paused', value: (p) => p.paused, stroke: '#8a6d00' },
    ],
  },
  { title: 'CPU used (cores)', series: [{ label: 'cores', value: (p) => p.cpuUsed, stroke: '#1f5fbf' }] },
  { title: 'Memory used (MiB)', series: [{ label: 'MiB', value: (p) => p.memoryUsedMiB, stroke: '#6a3fb5' }] },
];

/** Series over time: the times (ms), and each series' values at them. */
export interface Samples {
  atMs: number[];
  series: Array<{ label: string; stroke: string; values: number[] }>;
}

/** One uPlot chart of `samples`, redrawn when they change. */
export function SeriesChart(p: { title: string; samples: Samples }) {
  const el = useRef<HTMLDivElement>(null);
  const plot = useRef<uPlot | null>(null);
  const data = (): uPlot.AlignedData => [p.samples.atMs.map((t) => t / 1000), ...p.samples.series.map((s) => s.values)];
  useEffect(() => {
    plot.current = new uPlot(
      {
        width: 560,
        height: 180,
        series: [{}, ...p.samples.series.map((s) => ({ label: s.label, stroke: s.stroke, width: 1.5 }))],
        axes: [{}, { size: 50 }],
      },
      data(),
      el.current!,
    );
    return () => plot.current?.destroy();
  }, []);
  useEffect(() => plot.current?.setData(data()), [p.samples]);
  return (
    <figure class="chart" data-chart={p.title}>
      <figcaption>{p.title}</figcaption>
      <div ref={el} />
    </figure>
  );
}

/** The replica's last hour: a chart per kind of figure (uPlot, loaded with this view). */
export function Charts(p: { points: HistoryPoint[] }) {
  const atMs = p.points.map((x) => Date.parse(x.at));
  return (
    <div class="charts">
      {CHARTS.map((c) => (
        <SeriesChart
          key={c.title}
          title={c.title}
          samples={{ atMs, series: c.series.map((s) => ({ label: s.label, stroke: s.stroke, values: p.points.map(s.value) })) }}
        />
      ))}
    </div>
  );
}

/** A sandbox's CPU and memory while its page is open (the page samples them with every refresh). */
export function UsageCharts(p: { atMs: number[]; cores: number[]; memoryMiB: number[] }) {
  return (
    <div class="charts">
      <SeriesChart title="CPU (cores)" samples={{ atMs: p.atMs, series: [{ label: 'cores', stroke: '#1f5fbf', values: p.cores }] }} />
      <SeriesChart title="Memory (MiB)" samples={{ atMs: p.atMs, series: [{ label: 'MiB', stroke: '#6a3fb5', values: p.memoryMiB }] }} />
    </div>
  );
}
