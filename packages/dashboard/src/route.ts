import { useEffect, useState } from 'preact/hooks';

/** The page the hash names (#/sandboxes/ID → ['sandboxes', 'ID']; a `?query` after it aside): every view is a link. */
export function useRoute(): string[] {
  const [hash, setHash] = useState(location.hash);
  useEffect(() => {
    const on = (): void => setHash(location.hash);
    addEventListener('hashchange', on);
    return () => removeEventListener('hashchange', on);
  }, []);
  return hash
    .replace(/^#\/?/, '')
    .replace(/\?.*$/, '')
    .split('/')
    .filter(Boolean)
    .map((s) => {
      try {
        return decodeURIComponent(s);
      } catch {
        return s;
      }
    });
}

/** The query of the hash (#/sandboxes?image=NAME → image=NAME). */
export const routeQuery = (): URLSearchParams => new URLSearchParams(/\?(.*)$/.exec(location.hash)?.[1] ?? '');

export const go = (...parts: string[]): void => {
  location.hash = '#/' + parts.map(encodeURIComponent).join('/');
};
