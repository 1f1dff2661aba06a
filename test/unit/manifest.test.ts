// The manifest (package.json) against the rest of the project: the device list against the
// engine's device table, every command registered in src/ declared (and vice versa) under the
// "Memlens" category, Workspace Trust declared, and a packaging allow-list.
import { strict as assert } from 'node:assert';
import { execFileSync } from 'node:child_process';
import { existsSync, readdirSync, readFileSync } from 'node:fs';
import * as path from 'node:path';
import { test } from 'node:test';
import { formatBytes } from '../../common/format';

const root = path.resolve(__dirname, '..', '..', '..');
interface Manifest {
  activationEvents: string[];
  capabilities: { untrustedWorkspaces: { supported: string | boolean; description: string } };
  contributes: {
    commands: { command: string; title: string; category: string }[];
    keybindings: { command: string; key: string }[];
    configuration: { properties: Record<string, { enum?: string[]; enumDescriptions?: string[] }> }[];
    menus: { commandPalette: { command: string; when: string }[] };
  };
}
const manifest = JSON.parse(readFileSync(path.join(root, 'package.json'), 'utf8')) as Manifest;

function python(): string {
  if (process.env.MEMLENS_PYTHON) return process.env.MEMLENS_PYTHON;
  const venv = path.join(root, '.venv/bin/python');
  return existsSync(venv) ? venv : 'python3';
}

test('the device setting lists the engine’s devices, with their names and memory', () => {
  const table = JSON.parse(
    execFileSync(
      python(),
      ['-c', 'import json; from memlens.devices import all_devices; print(json.dumps([[d.name, d.display_name, d.total_memory_bytes, d.type] for d in all_devices()]))'],
      { encoding: 'utf8', env: { ...process.env, PYTHONPATH: path.join(root, 'python') } },
    ),
  ) as [string, string, number, string][];
  const prop = manifest.contributes.configuration.map((s) => s.properties['memlens.device']).find(Boolean)!;
  assert.deepEqual(prop.enum, table.map(([name]) => name));
  table.forEach(([, display, bytes, type], i) => {
    const description = prop.enumDescriptions![i]!;
    assert.ok(description.startsWith(display), `${description} names ${display}`);
    if (type === 'cuda') assert.ok(description.includes(`(${formatBytes(bytes)},`), `${description} says ${formatBytes(bytes)}`);
  });
});

test('every command in src/ is declared, in the Memlens category, and only those', () => {
  const registered = new Set<string>();
  const visit = (dir: string): void => {
    for (const e of readdirSync(dir, { withFileTypes: true })) {
      const file = path.join(dir, e.name);
      if (e.isDirectory()) {
        visit(file);
        continue;
      }
      const text = readFileSync(file, 'utf8');
      for (const m of text.matchAll(/register(?:Command)?\(\s*'(memlens\.[\w.]+)'/g)) registered.add(m[1]!);
      // registerCommand(SOME_ID, ...) with `const SOME_ID = 'memlens....'` in the same file
      for (const m of text.matchAll(/registerCommand\(\s*([A-Z_]+)\b/g)) {
        const value = new RegExp(`const ${m[1]} = '(memlens\\.[\\w.]+)'`).exec(text)?.[1];
        if (value) registered.add(value);
      }
    }
  };
  visit(path.join(root, 'src'));
  const declared = manifest.contributes.commands.map((c) => c.command);
  assert.deepEqual([...registered].sort(), [...declared].sort());
  for (const c of manifest.contributes.commands) assert.equal(c.category, 'Memlens', c.command);
  const titles = new Set(manifest.contributes.commands.map((c) => c.title));
  for (const t of ['Trace Memory', 'Trace All Ranks', 'Open Memory Report', 'Compare Snapshots', 'Select Device', 'Toggle Annotations', 'Restart Server']) {
    assert.ok(titles.has(t), `the palette has Memlens: ${t}`);
  }
  assert.ok(manifest.contributes.keybindings.some((k) => k.command === 'memlens.traceMemory'));
});

test('the server’s own commands are not shadowed by the extension’s', () => {
  const declared = new Set(manifest.contributes.commands.map((c) => c.command));
  // vscode-languageclient registers the server's executeCommand ids as VS Code commands.
  for (const id of ['memlens.trace', 'memlens.cancelTrace', 'memlens.openReport']) assert.ok(!declared.has(id), id);
});

test('Workspace Trust: limited support, explained', () => {
  assert.equal(manifest.capabilities.untrustedWorkspaces.supported, 'limited');
  assert.ok(manifest.capabilities.untrustedWorkspaces.description.length > 40);
});

test('the .vscodeignore is an allow-list that ships the Python package', () => {
  const lines = readFileSync(path.join(root, '.vscodeignore'), 'utf8')
    .split('\n')
    .filter((l) => l.trim() && !l.startsWith('#'));
  assert.equal(lines[0], '**', 'everything is excluded first');
  for (const l of lines.slice(1)) assert.ok(l.startsWith('!'), `${l} should be an allow rule`);
  for (const needed of ['!dist/extension.js', '!dist/webview.js', '!python/pyproject.toml', '!python/README.md']) {
    assert.ok(lines.includes(needed), needed);
  }
});
