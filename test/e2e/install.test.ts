// The .vsix installs into a clean VS Code (an empty extensions folder), holding exactly what the
// allow-list (.vscodeignore) lets through; and the Python package it ships builds, which is
// what "Install memlens into this interpreter" pip-installs. No browser needed.
import { strict as assert } from 'node:assert';
import { execFileSync } from 'node:child_process';
import { mkdtempSync, readdirSync, readFileSync, rmSync, statSync } from 'node:fs';
import { tmpdir } from 'node:os';
import * as path from 'node:path';
import { after, test } from 'node:test';
import { installExtension, prepareDirs } from './codeServer';
import { repoPython } from './paths';
import { resolveVsix } from './session';
import { timeouts } from './timeouts';

const scratch = mkdtempSync(path.join(tmpdir(), 'memlens-install-'));
after(() => rmSync(scratch, { recursive: true, force: true }));

function files(root: string, dir = ''): string[] {
  const out: string[] = [];
  for (const e of readdirSync(path.join(root, dir), { withFileTypes: true })) {
    const rel = path.posix.join(dir, e.name);
    if (e.isDirectory()) out.push(...files(root, rel));
    else out.push(rel);
  }
  return out;
}

let installed = '';

test('the .vsix installs into a clean VS Code', { timeout: timeouts.test }, async () => {
  const dirs = prepareDirs(scratch, {});
  const output = await installExtension(dirs, resolveVsix());
  assert.match(output, /successfully installed/i);
  const folder = readdirSync(dirs.extensions).find((d) => d.startsWith('memlens.torch-memory-lens-'));
  assert.ok(folder, `installed as a folder of ${dirs.extensions}: ${readdirSync(dirs.extensions).join(', ')}`);
  installed = path.join(dirs.extensions, folder);
  const manifest = JSON.parse(readFileSync(path.join(installed, 'package.json'), 'utf8')) as { main: string };
  assert.ok(statSync(path.join(installed, manifest.main)).size > 10_000, 'the extension bundle is there');
});

test('it holds the bundles and the Python package, and nothing else', () => {
  assert.ok(installed, 'installed by the previous test');
  const all = files(installed);
  for (const needed of [
    'package.json',
    'dist/extension.js',
    'dist/webview.js',
    'dist/webview.css',
    'media/memlens.svg',
    'python/pyproject.toml',
    'python/README.md',
    'python/memlens/__init__.py',
    'python/memlens/server/__main__.py',
    'python/memlens/server/protocol.py',
    'python/memlens/snapshot/schema.json',
  ]) {
    assert.ok(all.includes(needed), `${needed} is shipped`);
  }
  const unwanted = all.filter((f) => /(^|\/)(src|test|node_modules|webview|scripts|bench|examples|tests)\//.test(f) || /\.(ts|map)$|__pycache__|\.pyc$/.test(f));
  assert.deepEqual(unwanted, [], 'sources, tests, maps and caches stay out');
});

test('the shipped Python package builds (what "Install memlens" pip-installs)', { timeout: timeouts.test }, () => {
  assert.ok(installed, 'installed by the first test');
  const wheels = path.join(scratch, 'wheels');
  const copy = path.join(scratch, 'python-copy');
  // Build from a copy: a build writes into its source folder.
  execFileSync('cp', ['-r', path.join(installed, 'python'), copy]);
  execFileSync(repoPython(), ['-m', 'pip', 'wheel', '--no-deps', '--disable-pip-version-check', '-q', '-w', wheels, copy], { stdio: 'pipe' });
  const wheel = readdirSync(wheels).find((f) => /^memlens-.*\.whl$/.test(f));
  assert.ok(wheel, `a memlens wheel: ${readdirSync(wheels).join(', ')}`);
  const listing = execFileSync(repoPython(), ['-m', 'zipfile', '-l', path.join(wheels, wheel)], { encoding: 'utf8' });
  for (const f of ['memlens/server/__main__.py', 'memlens/snapshot/schema.json', 'memlens/webview_dist/webview.js']) {
    assert.ok(listing.includes(f), `the wheel has ${f}`);
  }
});
