// Memlens: Choose Trace's items: "Newest trace" first, then each trace covering the file,
// the one the editor shows marked, named by target, device and time.
import { strict as assert } from 'node:assert';
import { test } from 'node:test';
import { traceItems } from '../../src/traceChoice';
import { GiB, snapshotInfo } from './snapshotInfoFixture';

const recipe = snapshotInfo({ path: '/ws/.memlens/model-GPT/a.json', targetName: 'GPT', kind: 'model', device: 'a100-40gb', peakBytes: 2 * GiB });
const script = snapshotInfo(); // train.py, 7.8 GiB on h100-80gb

test('the newest is shown: it is marked, and "Newest trace" is the choice', () => {
  const items = traceItems({ traces: [script, recipe], shown: script.path, chosen: null }, (p) => p.replace('/ws/', ''));
  assert.deepEqual(items.map((i) => [i.label, i.snapshot, i.picked]), [
    ['$(check) Newest trace', null, true],
    ['$(check) train.py · 7.8 GiB peak', script.path, true],
    ['GPT · 2.0 GiB peak', recipe.path, false],
  ]);
  assert.match(items[2]!.description, /^model · a100-40gb · \d{4}-\d\d-\d\d \d\d:\d\d$/);
  assert.equal(items[2]!.detail, '.memlens/model-GPT/a.json');
});

test('a chosen trace is marked instead of the newest', () => {
  const items = traceItems({ traces: [script, recipe], shown: recipe.path, chosen: recipe.path }, (p) => p);
  assert.deepEqual(items.map((i) => i.label), ['Newest trace', 'train.py · 7.8 GiB peak', '$(check) GPT · 2.0 GiB peak']);
});
