import { strict as assert } from 'node:assert';
import { existsSync, readFileSync } from 'node:fs';
import * as path from 'node:path';
import { test } from 'node:test';

const root = path.resolve(__dirname, '..', '..', '..');
const manifest = JSON.parse(readFileSync(path.join(root, 'package.json'), 'utf8')) as {
  contributes: {
    commands: { command: string }[];
    walkthroughs: { id: string; steps: { id: string; description: string; media: { markdown?: string }; completionEvents?: string[] }[] }[];
  };
};

test('the walkthrough: interpreter, trace, report, what fits, each step a declared command', () => {
  const [walk] = manifest.contributes.walkthroughs;
  assert.ok(walk);
  assert.deepEqual(walk.steps.map((s) => s.id), ['interpreter', 'trace', 'report', 'fit']);
  const declared = new Set(manifest.contributes.commands.map((c) => c.command));
  for (const step of walk.steps) {
    const links = [...step.description.matchAll(/\(command:([\w.]+)\)/g)].map((m) => m[1]!);
    assert.equal(links.length, 1, `${step.id} has one button`);
    assert.ok(declared.has(links[0]!), `${step.id}: ${links[0]} is declared`);
    assert.deepEqual(step.completionEvents, [`onCommand:${links[0]}`]);
  }
});

test("each step's page exists and ships in the .vsix", () => {
  const shipped = readFileSync(path.join(root, '.vscodeignore'), 'utf8').split('\n');
  for (const step of manifest.contributes.walkthroughs[0]!.steps) {
    const md = step.media.markdown!;
    assert.ok(existsSync(path.join(root, md)), md);
    assert.ok(shipped.includes(`!${path.dirname(md)}/*.md`), `${md} is allowed by .vscodeignore`);
  }
});
