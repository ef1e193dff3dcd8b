import { defineConfig } from 'vite';

// The dashboard's build: one page at /, its hashed scripts and styles under /assets/ (the server
// serves both, packages/server/src/http/dashboard.ts). JSX is Preact's.
export default defineConfig({
  build: { outDir: 'dist', emptyOutDir: true, assetsDir: 'assets', sourcemap: false, chunkSizeWarningLimit: 1024 },
  oxc: { jsx: { runtime: 'automatic', importSource: 'preact' } },
});
