import { strict as assert } from 'node:assert';
import { test } from 'node:test';
import { totalOf } from '../../webview/data/categories';
import {
  groupTree,
  moduleForest,
  overviewPartition,
  rowMeasure,
  tensorMeasure,
  unattributedAtPeak,
  type GroupNode,
} from '../../webview/data/modules';
import { makeSnapshot } from './snapshotFixture';

function find(nodes: GroupNode[], key: string): GroupNode | undefined {
  for (const n of nodes) {
    if (n.key === key) return n;
    const inner = find(n.children, key);
    if (inner) return inner;
  }
  return undefined;
}

test('the forest: the model is the root, a loss module is a second root', () => {
  const s = makeSnapshot();
  const roots = moduleForest(s.modules);
  assert.deepEqual(roots.map((r) => s.modules[r.index]!.fqn).sort(), ['', 'CrossEntropyLoss']);
  const model = roots.find((r) => s.modules[r.index]!.fqn === '')!;
  assert.deepEqual(model.children.map((c) => s.modules[c.index]!.fqn).sort(), ['drop', 'h', 'lm_head', 'wte']);
});

test('repeated layers merge into one group, with per-instance and total bytes', () => {
  const s = makeSnapshot({ layers: 3 });
  const forest = moduleForest(s.modules);
  const roots = groupTree(s.modules, forest, rowMeasure(s.modules, 'at_peak'));
  const blocks = find(roots, 'h.*')!;
  assert.equal(blocks.members.length, 3);
  assert.equal(blocks.className, 'Block');
  // The ModuleList "h" holds nothing of its own: it is folded into "h.*".
  assert.equal(blocks.foldedContainer, 'h');
  assert.equal(blocks.label, 'h.*');
  const perLayer = s.modules.filter((m) => /^h\.\d+$/.test(m.fqn)).map((m) => totalOf(m.at_peak));
  assert.equal(blocks.total, perLayer.reduce((a, b) => a + b, 0));
  assert.equal(blocks.minInstance, Math.min(...perLayer));
  assert.equal(blocks.maxInstance, Math.max(...perLayer));
  const attn = blocks.children.find((c) => c.key === 'h.*.attn')!;
  assert.equal(attn.label, 'attn');
  assert.equal(attn.members.length, 3);
  // Expandable to each instance, named in full.
  const instances = blocks.instances();
  assert.equal(instances.length, 3);
  assert.deepEqual(new Set(instances.map((i) => i.key)), new Set(['h.0', 'h.1', 'h.2']));
  assert.deepEqual(instances[0]!.children.map((c) => c.label).sort(), ['attn', 'mlp']);
});

test('without merging every instance is its own node', () => {
  const s = makeSnapshot({ layers: 2 });
  const roots = groupTree(s.modules, moduleForest(s.modules), rowMeasure(s.modules, 'at_peak'), { merge: false });
  const h = find(roots, 'h')!;
  assert.deepEqual(h.children.map((c) => c.key).sort(), ['h.0', 'h.1']);
});

test("a module's own tensors show as its self bytes", () => {
  const s = makeSnapshot();
  const roots = groupTree(s.modules, moduleForest(s.modules), rowMeasure(s.modules, 'at_peak'));
  const model = roots.find((r) => r.key === '')!;
  assert.equal(model.label, 'GPT');
  assert.equal(model.self?.temporary, 4096);
  const block = find(roots, 'h.*')!;
  assert.equal(block.self?.activation, 2 * 1000);
});

test('the overview partition accounts for every byte at the peak and names one-off modules', () => {
  const s = makeSnapshot({ layers: 4 });
  const roots = groupTree(s.modules, moduleForest(s.modules), rowMeasure(s.modules, 'at_peak'));
  const entries = overviewPartition(roots, unattributedAtPeak(s));
  const sum = entries.reduce((a, e) => a + e.total, 0);
  assert.equal(sum, s.summary.peak_bytes);
  const labels = entries.map((e) => e.label);
  for (const expected of ['h.* ×4', 'lm_head', 'wte', 'CrossEntropyLoss', '(no module)', 'GPT (own tensors)']) {
    assert.ok(labels.includes(expected), `${expected} in ${labels.join(', ')}`);
  }
  for (let i = 1; i < entries.length; i++) assert.ok(entries[i - 1]!.total >= entries[i]!.total);
});

test('past the limit the smallest entries fold into one, still adding up', () => {
  const s = makeSnapshot({ layers: 2 });
  const roots = groupTree(s.modules, moduleForest(s.modules), rowMeasure(s.modules, 'at_peak'), { merge: false });
  const entries = overviewPartition(roots, unattributedAtPeak(s), 3);
  assert.equal(entries.length, 3);
  assert.equal(entries[2]!.kind, 'rest');
  assert.equal(entries.reduce((a, e) => a + e.total, 0), s.summary.peak_bytes);
});

test('the tensor measure sums the tensors of one phase up the tree', () => {
  const s = makeSnapshot();
  const forest = moduleForest(s.modules);
  const setup = tensorMeasure(s, forest, (i) => s.tensors[i]!.phase === 0);
  const model = s.modules.findIndex((m) => m.fqn === '');
  const expected = s.tensors.filter((t) => t.phase === 0 && t.module >= 0 && s.modules[t.module]!.fqn !== 'CrossEntropyLoss').reduce((a, t) => a + t.bytes, 0);
  assert.equal(totalOf(setup.valueOf(model)), expected);
  assert.equal(totalOf(setup.unattributed), 0);
  const all = tensorMeasure(s, forest, () => true);
  assert.deepEqual(all.valueOf(model), s.modules[model]!.at_peak);
  assert.equal(all.unattributed.input, 512);
});
