// Bundles the extension host code (Node, CommonJS, `vscode` provided by the host) and, once it
// exists, the webview UI (browser). Type checking is tsc's job (`npm run typecheck`).
// Flags: --watch rebuilds on change; --minify for release builds.
import { existsSync } from 'node:fs';
import * as esbuild from 'esbuild';
import { buildWebview } from './build-webview.mjs';

const watch = process.argv.includes('--watch');
const minify = process.argv.includes('--minify');

/** @type {esbuild.BuildOptions[]} */
const targets = [
  {
    entryPoints: ['src/extension.ts'],
    outfile: 'dist/extension.js',
    platform: 'node',
    format: 'cjs',
    target: 'node20', // VS Code 1.90's extension host runs Node 20
    external: ['vscode'],
  },
];
const common = { bundle: true, sourcemap: true, minify, logLevel: 'info' };
// The webview has its own configuration (always minified: it is also inlined into the
// standalone HTML report, and the Python package ships a copy).
const webview = existsSync('webview/main.ts') ? buildWebview({ watch }) : Promise.resolve();
if (watch) {
  for (const t of targets) await (await esbuild.context({ ...common, ...t })).watch();
  await webview;
} else {
  await Promise.all([...targets.map((t) => esbuild.build({ ...common, ...t })), webview]);
}
