import { useState } from 'preact/hooks';
import { ApiError, checkKey } from './api.js';

/** Asks for an API key and checks it with the server before keeping it (for this tab only). */
export function Login(p: { why: string | null; onLogin: (key: string) => void }) {
  const [key, setKey] = useState('');
  const [error, setError] = useState<string | null>(p.why);
  const [busy, setBusy] = useState(false);
  const submit = async (e: Event): Promise<void> => {
    e.preventDefault();
    setBusy(true);
    setError(null);
    try {
      await checkKey(key.trim());
      p.onLogin(key.trim());
    } catch (err) {
      setError(err instanceof ApiError && err.code === 'unauthenticated' ? `That key is not valid: ${err.message}` : String((err as Error).message));
    } finally {
      setBusy(false);
    }
  };
  return (
    <form class="login" onSubmit={(e) => void submit(e)}>
      <h1>Warren</h1>
      <label>
        API key
        <input type="password" name="key" autocomplete="off" value={key} onInput={(e) => setKey(e.currentTarget.value)} autofocus />
      </label>
      <button type="submit" disabled={busy || !key.trim()}>
        Log in
      </button>
      {error && (
        <p class="error" role="alert">
          {error}
        </p>
      )}
      <p class="hint">The key is kept in this tab only, and sent to this server only.</p>
    </form>
  );
}
