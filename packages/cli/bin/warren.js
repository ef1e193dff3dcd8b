#!/usr/bin/env node
// The `warren` command. A committed file, so npm can link it before the TypeScript is built.
import '../dist/main.js';
