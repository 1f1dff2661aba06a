// Bundles the panel (webview/main.ts) for the browser: dist/webview.js + dist/webview.css,
// one minified IIFE with a source map, the same bundle for the VS Code webview and for the
// standalone HTML report. The Python package ships a copy (python/memlens/webview_dist/, a
// build output) that `memlens show --html` inlines.
//   node scripts/build-webview.mjs [--watch] [--no-minify]
// scripts/build.mjs may import { webviewBuildOptions, buildWebview } instead of its own config.
import { copyFileSync, mkdirSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import * as esbuild from 'esbuild';
import { updateValidator } from './gen-snapshot-validator.mjs';

const root = fileURLToPath(new URL('..', import.meta.url));
const pythonCopy = `${root}python/memlens/webview_dist`;

/** @returns {esbuild.BuildOptions} */
export function webviewBuildOptions({ minify = true } = {}) {
  return {
    absWorkingDir: root,
    entryPoints: { webview: 'webview/main.ts' },
    outdir: 'dist',
    bundle: true,
    platform: 'browser',
    format: 'iife',
    target: ['es2022', 'chrome114'],
    minify,
    sourcemap: true,
    legalComments: 'eof',
    logLevel: 'info',
    // No code may need eval (the webview's CSP forbids it) or fetch anything at run time.
    supported: { 'dynamic-import': false },
  };
}

/** Copies the bundle to where the Python package finds it. */
export function copyToPython() {
  mkdirSync(pythonCopy, { recursive: true });
  for (const f of ['webview.js', 'webview.css']) copyFileSync(`${root}dist/${f}`, `${pythonCopy}/${f}`);
}

export async function buildWebview({ watch = false, minify = true } = {}) {
  updateValidator();
  const options = webviewBuildOptions({ minify });
  if (watch) {
    const ctx = await esbuild.context({
      ...options,
      plugins: [{ name: 'copy-to-python', setup: (b) => b.onEnd((r) => r.errors.length || copyToPython()) }],
    });
    await ctx.watch();
    return;
  }
  await esbuild.build(options);
  copyToPython();
}

if (process.argv[1] && fileURLToPath(import.meta.url) === process.argv[1]) {
  await buildWebview({ watch: process.argv.includes('--watch'), minify: !process.argv.includes('--no-minify') });
}
