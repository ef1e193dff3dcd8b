/** Small formatters for the tables. */
export const mib = (bytes: number): string => `${(bytes / 2 ** 20).toFixed(1)} MiB`;

export function ago(iso: string | null, now = Date.now()): string {
  if (!iso) return '—';
  const s = Math.round((now - Date.parse(iso)) / 1000);
  return s < 0 ? `in ${span(-s)}` : `${span(s)} ago`;
}

export function until(iso: string | null, now = Date.now()): string {
  if (!iso) return 'never';
  const s = Math.round((Date.parse(iso) - now) / 1000);
  return s < 0 ? `${span(-s)} ago` : `in ${span(s)}`;
}

export function span(s: number): string {
  if (s < 60) return `${s} s`;
  if (s < 3600) return `${Math.floor(s / 60)} min`;
  if (s < 86_400) return `${Math.floor(s / 3600)} h ${Math.floor((s % 3600) / 60)} min`;
  return `${Math.floor(s / 86_400)} d`;
}

export const labelsText = (labels: Record<string, string>): string =>
  Object.entries(labels)
    .map(([k, v]) => `${k}=${v}`)
    .join(' ');
