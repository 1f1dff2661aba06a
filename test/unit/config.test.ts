import { strict as assert } from 'node:assert';
import { readFileSync } from 'node:fs';
import * as path from 'node:path';
import { test } from 'node:test';
import { DEFAULTS, KEYS, SERVER_OWNED, readConfig, serverLogLevel, serverSettings, traceParams, type Config } from '../../src/config';

const config = (over: Partial<Config> = {}): Config => ({ ...DEFAULTS, ...over });

test('missing and malformed values take their defaults', () => {
  assert.deepEqual(readConfig(() => undefined), DEFAULTS);
  const bad: Record<string, unknown> = {
    device: 42,
    worldSize: 0,
    rank: -1,
    iterations: 1.5,
    'annotations.style': 'neon',
    'annotations.threshold': 2,
    logLevel: 'loud',
  };
  assert.deepEqual(readConfig((k) => bad[k]), DEFAULTS);
});

test('values are read from their setting keys and trimmed', () => {
  const raw: Record<string, unknown> = {
    device: ' a100-80gb ',
    budget: '70GiB',
    worldSize: 8,
    rank: 3,
    'annotations.style': 'inlayHints',
    'annotations.threshold': 0.05,
    python: ' /x/python ',
  };
  const c = readConfig((k) => raw[k]);
  assert.equal(c.device, 'a100-80gb');
  assert.deepEqual(c.server, { budget: '70GiB' });
  assert.equal(c.worldSize, 8);
  assert.equal(c.rank, 3);
  assert.equal(c.annotationStyle, 'inlayHints');
  assert.equal(c.annotationThreshold, 0.05);
  assert.equal(c.python, '/x/python');
});

test('the server gets the settings only it reads as written (it validates them); inlay hints only in the inlay-hint style', () => {
  const raw: Record<string, unknown> = {
    budget: '70GiB',
    traceTimeout: -3, // the server says it replaced this one by its default
    'annotations.hotLines': 3,
    traceOnSave: true,
  };
  assert.deepEqual(serverSettings(readConfig((k) => raw[k])), {
    budget: '70GiB',
    traceTimeout: -3,
    hotLines: 3,
    traceOnSave: true,
    iterations: null,
    inlayHints: false,
    python: null,
  });
  assert.equal(serverSettings(config({ annotationStyle: 'inlayHints' })).inlayHints, true);
  assert.equal('budget' in serverSettings(config()), false);
});

test("the device is sent only when the user set it: a recipe's device wins over the default", () => {
  assert.equal(readConfig(() => undefined).device, '');
  assert.equal(readConfig((k) => (k === 'device' ? '' : undefined)).device, '');
  assert.equal('device' in serverSettings(config()), false);
  assert.equal(serverSettings(config({ device: 'a100-40gb' })).device, 'a100-40gb');
  assert.equal('device' in traceParams('model:GPT', config()), false);
  assert.equal(traceParams('t', config(), { device: 'h200' }).device, 'h200');
});

test('trace parameters carry distributed options only when something asks for them', () => {
  assert.deepEqual(traceParams('model:GPT', config({ device: 'h100-80gb' })), { targetId: 'model:GPT', device: 'h100-80gb' });
  assert.deepEqual(traceParams('t', config({ iterations: 3, device: 'cpu' })), { targetId: 't', device: 'cpu', iterations: 3 });
  assert.deepEqual(traceParams('t', config({ worldSize: 8, rank: 2 })), { targetId: 't', worldSize: 8, rank: 2 });
  assert.deepEqual(traceParams('t', config({ rank: 2 })), { targetId: 't', rank: 2 });
  assert.deepEqual(traceParams('t', config({ rank: 2 }), { allRanks: true, worldSize: 4 }), {
    targetId: 't',
    worldSize: 4,
    allRanks: true,
  });
});

test('every Config field and server-owned setting is a setting of the manifest, in a titled section, described', () => {
  const root = path.resolve(__dirname, '..', '..', '..');
  const manifest = JSON.parse(readFileSync(path.join(root, 'package.json'), 'utf8')) as {
    contributes: { configuration: { title: string; properties: Record<string, Record<string, unknown>> }[] };
  };
  const sections = manifest.contributes.configuration;
  assert.ok(Array.isArray(sections) && sections.length >= 4, 'settings are grouped into sections');
  const props = new Map<string, Record<string, unknown>>();
  for (const s of sections) {
    assert.ok(s.title, 'every section has a title');
    for (const [k, v] of Object.entries(s.properties)) props.set(k, v);
  }
  for (const [field, key] of Object.entries(KEYS)) {
    const p = props.get(`memlens.${key}`);
    assert.ok(p, `memlens.${key} (${field}) is not contributed`);
    assert.ok(typeof p['markdownDescription'] === 'string' || typeof p['description'] === 'string', `memlens.${key} is not described`);
    // A string setting whose unset value means something ("" for the device: the recipe's)
    // declares no default; VS Code then reads it as "".
    const expected = DEFAULTS[field as keyof Config];
    assert.deepEqual(p['default'] ?? (expected === '' && p['type'] === 'string' ? '' : null), expected, `default of memlens.${key}`);
    if (Array.isArray(p['enum'])) {
      assert.equal((p['enumDescriptions'] as unknown[] | undefined)?.length, p['enum'].length, `memlens.${key} describes each value`);
    }
  }
  for (const key of Object.values(SERVER_OWNED)) {
    const p = props.get(`memlens.${key}`);
    assert.ok(p && (p['markdownDescription'] || p['description']), `memlens.${key} is contributed and described`);
  }
  assert.equal(props.size, Object.keys(KEYS).length + Object.keys(SERVER_OWNED).length, 'no setting that nobody reads');
});

test('the server logs its Python logging only from the debug level on', () => {
  assert.equal(serverLogLevel('info'), 'WARNING');
  assert.equal(serverLogLevel('debug'), 'INFO');
  assert.equal(serverLogLevel('trace'), 'DEBUG');
  assert.equal(serverLogLevel('error'), 'ERROR');
});
