/** Quotes one word for a POSIX shell. */
export function shellQuote(word: string): string {
  if (/^[A-Za-z0-9_@%+=:,./-]+$/.test(word)) return word;
  return `'${word.replace(/'/g, `'\\''`)}'`;
}

/** The script a session runs for an argv command. */
export function argvToScript(argv: string[]): string {
  return argv.map(shellQuote).join(' ');
}

/** `K=V` strings from env maps, later maps winning. */
export function envList(...maps: Array<Record<string, string> | undefined>): string[] {
  const merged: Record<string, string> = {};
  for (const m of maps) if (m) Object.assign(merged, m);
  return Object.entries(merged).map(([k, v]) => `${k}=${v}`);
}
