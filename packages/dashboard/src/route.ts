import { useEffect, useState } from 'preact/hooks';

/** The page the hash names (#/sandboxes/ID → ['sandboxes', 'ID']): every view is a link. */
export function useRoute(): string[] {
  const [hash, setHash] = useState(location.hash);
  useEffect(() => {
    const on = (): void => setHash(location.hash);
    addEventListener('hashchange', on);
    return () => removeEventListener('hashchange', on);
  }, []);
  return hash
    .replace(/^#\/?/, '')
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

export const go = (...parts: string[]): void => {
  location.hash = '#/' + parts.map(encodeURIComponent).join('/');
};
