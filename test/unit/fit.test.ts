// Find What Fits without VS Code: the space a user types becomes the words the server takes,
// the command's parameters, and the panel's check of the FitReport it gets back (untrusted JSON:
// every number the Fit view shows must be an integer of bytes from the server).
import { strict as assert } from 'node:assert';
import { test } from 'node:test';
import { validateFitReport } from '../../common/fitReport';
import { isHostMessage, isWebviewMessage } from '../../common/messages';
import { DEFAULTS } from '../../src/config';
import { fitParams, flagPick, parseSpace, shellWords, spaceOfFlags } from '../../src/fitSpace';
import type { FitReport } from '../../common/protocol';

const GiB = 2 ** 30;

/** What the server answered for test_server_fit.py's space (2 GPUs, full recompute, micro-batch
 * 4 and 8 on an h100-94gb): micro-batch 4 fits, 8 is out of memory. */
function report(): FitReport {
  const card = 95830 * 2 ** 20;
  const reserved = 73452748800;
  return {
    target: 'fit_gpt.py',
    device: 'h100-94gb',
    deviceTotalBytes: card,
    sort: 'peak',
    axes: [
      { name: 'gpus', values: ['2'], target: 'world size', direction: 'down' },
      { name: 'micro-batch', values: ['4', '8'], target: '--batch-size', direction: 'up' },
      { name: 'recompute', values: ['full'], target: '--recompute', direction: 'down' },
    ],
    counts: { points: 2, traced: 2, resumed: 0, pruned: 0, implied: 0, notTraced: 0, fits: 1, oom: 1, errors: 0 },
    interrupted: false,
    frontier: [
      {
        key: 'gpus=2,micro-batch=4,recompute=full',
        values: ['2', '4', 'full'],
        gpus: 2,
        verdict: 'fits',
        source: 'traced',
        reason: 'fits with 24.5 GiB headroom',
        by: null,
        worstRank: 0,
        peakBytes: 60432630784,
        reservedPeakBytes: reserved,
        // the card less reserved and 704 MiB outside the allocator
        headroomBytes: card - reserved - 704 * 2 ** 20,
        ranksTraced: 1,
        snapshot: '/ws/.memlens/fit/fit_gpt-1/points/p4/snapshot.json',
      },
    ],
    excluded: [
      {
        key: 'gpus=2,micro-batch=8,recompute=full',
        values: ['2', '8', 'full'],
        gpus: 2,
        verdict: 'oom',
        source: 'traced',
        reason: 'OOM by 42.0 GiB on rank 0 (traced)',
        by: null,
        worstRank: 0,
        peakBytes: 113985930240,
        reservedPeakBytes: 76137103360,
        headroomBytes: -42 * GiB,
        ranksTraced: 1,
        snapshot: null,
      },
    ],
    runDir: '/ws/.memlens/fit/fit_gpt-1',
    html: '/ws/.memlens/fit/fit_gpt-1/fit.html',
  };
}

test('a space is split as a shell splits it, values that start with -- included', () => {
  assert.deepEqual(parseSpace('--micro-batch 1,2,4 --axis micro-batch=--batch-size'), {
    ok: true,
    space: ['--micro-batch', '1,2,4', '--axis', 'micro-batch=--batch-size'],
  });
  assert.deepEqual(parseSpace(`--arg "--lr=1e-4,3e-4" --env 'SEQ=1024,2048' --tp=1,2`), {
    ok: true,
    space: ['--arg', '--lr=1e-4,3e-4', '--env', 'SEQ=1024,2048', '--tp=1,2'],
  });
  assert.deepEqual(shellWords(`a\\ b "c d" ''`), ['a b', 'c d', '']);
  assert.equal(shellWords('"open'), null);
});

test('a space that cannot be one says why', () => {
  assert.deepEqual(parseSpace('   '), { ok: false, error: 'Give at least one axis, e.g. --micro-batch 1,2,4 --axis micro-batch=--batch-size' });
  assert.deepEqual(parseSpace('--micro-batch'), { ok: false, error: '--micro-batch needs its values, e.g. --micro-batch 1,2,4' });
  assert.deepEqual(parseSpace('1,2 --tp 2'), { ok: false, error: '1,2: an option of the space comes first, e.g. --micro-batch 1,2,4' });
  assert.deepEqual(parseSpace('--tp "2'), { ok: false, error: 'A quote is not closed.' });
});

test('the command sends the target, the device and iterations of the settings, and the space', () => {
  const space = ['--micro-batch', '4,8'];
  assert.deepEqual(fitParams('script:fit_gpt.py', { ...DEFAULTS, device: 'h100-94gb', iterations: 3 }, space), {
    targetId: 'script:fit_gpt.py',
    device: 'h100-94gb',
    iterations: 3,
    space,
  });
  // no space: the workspace's [tool.memlens.fit] alone; no iterations: the recipe's
  assert.deepEqual(fitParams('launch:a', DEFAULTS, []), { targetId: 'launch:a' }); // the recipe's device, else the default
});

test('a FitReport as the server sends it passes the panel’s check', () => {
  const r = report();
  const checked = validateFitReport(r);
  assert.ok(checked.ok);
  assert.equal(checked.report.frontier[0]!.headroomBytes, 95830 * 2 ** 20 - 73452748800 - 704 * 2 ** 20);
});

test('a malformed FitReport is refused with the place of the fault', () => {
  const cases: [(r: FitReport) => void, string][] = [
    [(r) => (r.frontier[0]!.peakBytes = 1.5 * GiB + 0.5), 'the search: frontier[0]: peakBytes is not an integer or null'],
    [(r) => (r.excluded[0]!.headroomBytes = '42 GiB' as unknown as number), 'the search: excluded[0]: headroomBytes is not an integer or null'],
    [(r) => (r.frontier[0]!.values = ['2', '4']), 'the search: frontier[0]: values must be 3 strings, one per axis'],
    [(r) => ((r as unknown as Record<string, unknown>)['sort'] = 'memory'), 'the search: sort "memory" is not one of gpus, micro-batch, recompute, peak'],
    [(r) => ((r.excluded[0] as unknown as Record<string, unknown>)['verdict'] = 'maybe'), 'the search: excluded[0]: verdict "maybe" is not fits, oom, error or null'],
    [(r) => (r.deviceTotalBytes = 0), 'the search: deviceTotalBytes is not a positive integer'],
    [(r) => delete (r.counts as Partial<FitReport['counts']>).notTraced, 'the search: counts.notTraced is not an integer'],
  ];
  for (const [mutate, error] of cases) {
    const r = report();
    mutate(r);
    assert.deepEqual(validateFitReport(r), { ok: false, error });
  }
  assert.deepEqual(validateFitReport(null), { ok: false, error: 'the search: not an object' });
});

test('the fit message and the snapshot request pass the message checks', () => {
  assert.ok(isHostMessage({ type: 'fit', fit: report() }));
  assert.ok(isWebviewMessage({ type: 'openSnapshot', path: '/ws/p4/snapshot.json' }));
  assert.ok(!isWebviewMessage({ type: 'openSnapshot', path: 4 }));
});

test("the script's flags picked as axes fill the space box in memlens fit's syntax", () => {
  const batch = { flag: '--batch-size', default: 8, help: 'per GPU', axis: 'micro-batch', space: ['--micro-batch', '8,16,32', '--axis', 'micro-batch=--batch-size'] };
  const layers = { flag: '--n-layer', default: 4, help: '', axis: null, space: ['--arg', '--n-layer=4,8,16'] };
  const text = spaceOfFlags([batch, layers]);
  assert.equal(text, '--micro-batch 8,16,32 --axis micro-batch=--batch-size --arg --n-layer=4,8,16');
  const parsed = parseSpace(text);
  assert.ok(parsed.ok && parsed.space.length === 6);
  assert.equal(spaceOfFlags([{ ...layers, space: ['--arg', '--name=a b'] }]), "--arg '--name=a b'");
  assert.deepEqual(flagPick(batch), { label: '--batch-size', description: 'default 8 · the micro-batch axis: 8,16,32', detail: 'per GPU' });
  assert.equal(flagPick(layers).description, 'default 4 · an axis of its own: 4,8,16');
});
