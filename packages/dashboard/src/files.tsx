import { useEffect, useRef, useState } from 'preact/hooks';
import { call, callBytes, sandboxPath } from './api.js';
import { ago } from './format.js';

interface FileEntry {
  name: string;
  path: string;
  type: 'file' | 'dir' | 'symlink' | 'other';
  size: number;
  mtime: string;
  target?: string;
}

const parent = (dir: string): string => dir.replace(/\/[^/]+\/?$/, '') || '/';
const join = (dir: string, name: string): string => (dir.endsWith('/') ? dir + name : `${dir}/${name}`);
const query = (path: string): string => `?path=${encodeURIComponent(path)}`;

/** A sandbox's files: a directory listed, its files downloaded, files uploaded into it (the file calls of the API). */
export function Files(p: { id: string }) {
  const [dir, setDir] = useState('/');
  const [entries, setEntries] = useState<FileEntry[] | null>(null);
  const [status, setStatus] = useState<{ error: boolean; text: string } | null>(null);
  const picker = useRef<HTMLInputElement>(null);
  const list = async (d: string): Promise<void> => {
    try {
      const r = await call<{ entries: FileEntry[] }>('GET', `${sandboxPath(p.id)}/files/list${query(d)}`);
      setEntries(r.entries.sort((a, b) => ((a.type === 'dir') === (b.type === 'dir') ? a.name.localeCompare(b.name) : a.type === 'dir' ? -1 : 1)));
      setDir(d);
    } catch (e) {
      setStatus({ error: true, text: (e as Error).message });
    }
  };
  useEffect(() => void list('/'), [p.id]);
  const download = async (f: FileEntry): Promise<void> => {
    try {
      const url = URL.createObjectURL(await callBytes('GET', `${sandboxPath(p.id)}/files${query(f.path)}`));
      const a = document.createElement('a');
      a.href = url;
      a.download = f.name;
      a.click();
      setTimeout(() => URL.revokeObjectURL(url), 10_000);
    } catch (e) {
      setStatus({ error: true, text: (e as Error).message });
    }
  };
  const upload = async (files: FileList | null): Promise<void> => {
    for (const f of Array.from(files ?? [])) {
      try {
        await callBytes('PUT', `${sandboxPath(p.id)}/files${query(join(dir, f.name))}`, f);
        setStatus({ error: false, text: `uploaded ${join(dir, f.name)} (${f.size} bytes)` });
      } catch (e) {
        setStatus({ error: true, text: `${f.name}: ${(e as Error).message}` });
      }
    }
    if (picker.current) picker.current.value = '';
    await list(dir);
  };
  return (
    <div class="files">
      <div class="filebar">
        <code class="cwd">{dir}</code>
        <button disabled={dir === '/'} onClick={() => void list(parent(dir))}>
          Up
        </button>
        <button name="refresh-files" onClick={() => void list(dir)}>
          Refresh
        </button>
        <label class="upload">
          Upload here <input ref={picker} type="file" name="upload" multiple onChange={(e) => void upload(e.currentTarget.files)} />
        </label>
      </div>
      {status && <p class={status.error ? 'error' : 'status'}>{status.text}</p>}
      <table class="listing">
        <tbody>
          {(entries ?? []).map((f) => (
            <tr key={f.path} data-path={f.path}>
              <td>
                {f.type === 'dir' ? (
                  <a href="#" onClick={(e) => (e.preventDefault(), void list(f.path))}>
                    {f.name}/
                  </a>
                ) : f.type === 'file' ? (
                  <a href="#" class="download" onClick={(e) => (e.preventDefault(), void download(f))}>
                    {f.name}
                  </a>
                ) : (
                  <span>
                    {f.name}
                    {f.target ? ` → ${f.target}` : ''}
                  </span>
                )}
              </td>
              <td class="num">{f.type === 'file' ? `${f.size} B` : ''}</td>
              <td class="sub">{ago(f.mtime)}</td>
            </tr>
          ))}
        </tbody>
      </table>
    </div>
  );
}
