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

/** One uPlot chart of `points`, redrawn when they change. */
function Chart(p: { points: HistoryPoint[]; chart: (typeof CHARTS)[number] }) {
  const el = useRef<HTMLDivElement>(null);
  const plot = useRef<uPlot | null>(null);
  const data = (): uPlot.AlignedData => [p.points.map((x) => Date.parse(x.at) / 1000), ...p.chart.series.map((s) => p.points.map(s.value))];
  useEffect(() => {
    plot.current = new uPlot(
      {
        width: 560,
        height: 180,
        series: [{}, ...p.chart.series.map((s) => ({ label: s.label, stroke: s.stroke, width: 1.5 }))],
        axes: [{}, { size: 50 }],
      },
      data(),
      el.current!,
    );
    return () => plot.current?.destroy();
  }, []);
  useEffect(() => plot.current?.setData(data()), [p.points]);
  return (
    <figure class="chart" data-chart={p.chart.title}>
      <figcaption>{p.chart.title}</figcaption>
      <div ref={el} />
    </figure>
  );
}

/** The replica's last hour: a chart per kind of figure (uPlot, loaded with this view). */
export function Charts(p: { points: HistoryPoint[] }) {
  return (
    <div class="charts">
      {CHARTS.map((c) => (
        <Chart key={c.title} chart={c} points={p.points} />
      ))}
    </div>
  );
}
