// Bundles the extension host code (Node, CommonJS, `vscode` provided by the host) and, once it
// exists, the webview UI (browser). Type checking is tsc's job (`npm run typecheck`).
// Flags: --watch rebuilds on change; --minify for release builds.
import { existsSync } from 'node:fs';
import * as esbuild from 'esbuild';

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
if (existsSync('webview/main.ts')) {
  targets.push({
    entryPoints: ['webview/main.ts'],
    outfile: 'dist/webview.js',
    platform: 'browser',
    format: 'iife',
    target: 'es2022',
  });
}

const common = { bundle: true, sourcemap: true, minify, logLevel: 'info' };
if (watch) {
  for (const t of targets) await (await esbuild.context({ ...common, ...t })).watch();
} else {
  await Promise.all(targets.map((t) => esbuild.build({ ...common, ...t })));
}
