// Bundles the extension host code (dist/extension.js: Node, CommonJS, `vscode` provided by the
// host) and the report panel (dist/webview.js + dist/webview.css: browser, built by
// build-webview.mjs, which also copies it into the Python package for `memlens show --html`).
// Type checking is tsc's job (`npm run typecheck`).
// Flags: --watch rebuilds on change; --minify minifies the extension bundle (the .vsix, see
// `vscode:prepublish`). The webview is always minified: it is also inlined into the standalone
// HTML report, and the Python package ships a copy.
import * as esbuild from 'esbuild';
import { buildWebview } from './build-webview.mjs';

const watch = process.argv.includes('--watch');
const minify = process.argv.includes('--minify');

/** @type {esbuild.BuildOptions} */
const extension = {
  entryPoints: ['src/extension.ts'],
  outfile: 'dist/extension.js',
  bundle: true,
  platform: 'node',
  format: 'cjs',
  target: 'node20', // VS Code 1.90's extension host runs Node 20
  external: ['vscode'],
  sourcemap: true,
  minify,
  logLevel: 'info',
};

if (watch) {
  await (await esbuild.context(extension)).watch();
  await buildWebview({ watch: true });
} else {
  await Promise.all([esbuild.build(extension), buildWebview()]);
}
