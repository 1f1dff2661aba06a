// The annotation labels the editor paints, end to end: built by the language server's label
// builder (python/memlens/server/annotations.py: the TypeScript side computes no memory) for
// the widest numbers a label can hold, then painted by annotationModel.ts. Each is at most 40
// characters, most important first, and what an editor cut at 40 characters keeps (VS Code
// truncates an inlay hint or a decoration at its end) still holds the total.
import { strict as assert } from 'node:assert';
import { execFileSync } from 'node:child_process';
import { existsSync } from 'node:fs';
import * as path from 'node:path';
import { test } from 'node:test';
import { toPaint } from '../../src/annotationModel';
import type { Annotation } from '../../common/protocol';

const root = path.resolve(__dirname, '..', '..', '..');
const MAX = 40;

function python(): string {
  if (process.env.MEMLENS_PYTHON) return process.env.MEMLENS_PYTHON;
  const venv = path.join(root, '.venv/bin/python');
  return existsSync(venv) ? venv : 'python3';
}

// 1023.94 MiB: the widest number format_bytes writes ("1023.9 MiB"); a module class with all
// of it in parameters, optimizer state and activations, 1000 blocks, a hot line of 8 categories.
const BUILD = `
import json
from memlens.server.annotations import annotate
from support.digests import CATS, F, digest, module
wide = int(1023.94 * 1024**2)
d = digest([
    module("", "Net", "", source_line=10, parameter=wide, optimizer_state=wide, activation=wide, at_parameter=wide),
    *[module(f"h.{i}", "Block", "h.*", source_line=30, constructed_line=12, parameter=wide // 1000,
             activation=wide // 1000 + 1) for i in range(1000)],
], lines=[{"file": F, "line": 50, "bytesAtPeak": wide, "totalBytes": wide, "allocations": 1,
           "categories": {c: wide // 8 for c in CATS}}], peak=wide)
print(json.dumps([{"line": a.line, "kind": a.kind, "label": a.label, "text": a.text, "bytes": a.bytes,
                   "share": a.share, "stale": False} for a in annotate(d, F, lambda n: False)]))
`;

const annotations = JSON.parse(
  execFileSync(python(), ['-c', BUILD], {
    encoding: 'utf8',
    env: { ...process.env, PYTHONPATH: [path.join(root, 'python'), path.join(root, 'python', 'tests')].join(path.delimiter) },
  }),
) as Annotation[];
const byLine = new Map(annotations.map((a) => [a.line + 1, a]));

test('labels of the widest numbers are at most 40 characters, total first', () => {
  // Net: 1023.9 MiB x 3 (parameters, optimizer state, activations) = 3.0 GiB, then the
  // activations; the blocks: 1/1000 of it each, x 1000; the hot line: its bytes at the peak.
  assert.equal(byLine.get(10)?.text, '≈ 3.0 GiB · 1023.9 MiB act');
  assert.equal(byLine.get(30)?.text, '≈ 2.0 MiB · 1.0 MiB act ×1000');
  assert.equal(byLine.get(50)?.text, '≈ 1023.9 MiB at peak (100.0%) · params');
  for (const a of annotations) {
    assert.ok(a.text.length <= MAX, `${JSON.stringify(a.text)} is ${a.text.length} characters`);
    assert.match(a.text, /^≈ \d+(\.\d)? (B|KiB|MiB|GiB|TiB)\b/, 'the total comes first');
  }
});

test('what a cut at 40 characters keeps still says the total, even marked stale', () => {
  const painted = toPaint({ annotations, stale: true, tracingLines: [], style: 'decorations', threshold: 0, lineCount: 100 });
  assert.deepEqual(painted.map((p) => p.text), annotations.map((a) => a.text)); // painted as built
  for (const a of annotations) {
    const total = /^≈ [^ ]+ [^ ]+/.exec(a.text)![0];
    // the server's stale hint appends " (stale)": a cut at the end loses that, not the total
    assert.ok(`${a.text} (stale)`.slice(0, MAX).startsWith(total), a.text);
    // the activations, where a module has them, survive the cut too
    if (a.text.includes(' act')) assert.ok(a.text.slice(0, MAX).includes(' act'), a.text);
  }
});
