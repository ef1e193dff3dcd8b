import { useEffect, useState } from 'preact/hooks';
import { getKey, setKey, whenUnauthenticated } from './api.js';
import { Catalogue } from './catalogue.js';
import { Login } from './login.js';
import { Nodes } from './nodes.js';
import { SandboxPage } from './sandbox-page.js';
import { Sandboxes } from './sandboxes.js';
import { routeQuery, useRoute } from './route.js';

/** The dashboard: a login gate, then the views the hash names. */
export function App() {
  const [key, setKeyState] = useState(getKey());
  const [why, setWhy] = useState<string | null>(null);
  const route = useRoute();
  useEffect(() => {
    whenUnauthenticated((message) => {
      setKey(null);
      setWhy(`You were logged out: ${message}`);
      setKeyState(null);
    });
  }, []);
  if (!key)
    return (
      <Login
        why={why}
        onLogin={(k) => {
          setKey(k);
          setWhy(null);
          setKeyState(k);
        }}
      />
    );
  const [view, id] = route;
  // A list narrowed by the link that opened it (the catalogue's "used by": ?image=NAME).
  const image = routeQuery().get('image') ?? '';
  return (
    <div class="app">
      <header>
        <strong>Warren</strong>
        <nav>
          <a href="#/sandboxes" class={view !== 'nodes' && view !== 'images' ? 'on' : ''}>
            Sandboxes
          </a>
          <a href="#/images" class={view === 'images' ? 'on' : ''}>
            Images
          </a>
          <a href="#/nodes" class={view === 'nodes' ? 'on' : ''}>
            Nodes
          </a>
        </nav>
        <button
          class="quiet"
          onClick={() => {
            setKey(null);
            setKeyState(null);
          }}
        >
          Log out
        </button>
      </header>
      <main>
        {view === 'nodes' ? (
          <Nodes />
        ) : view === 'images' ? (
          <Catalogue />
        ) : view === 'sandboxes' && id ? (
          <SandboxPage id={id} key={id} />
        ) : (
          <Sandboxes key={image} image={image} />
        )}
      </main>
    </div>
  );
}
