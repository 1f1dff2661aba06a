import { strict as assert } from 'node:assert';
import { test } from 'node:test';
import { TraceTimer } from '../../src/timings';

test('a trace splits into server, worker start, trace and paint', () => {
  let now = 0;
  const t = new TraceTimer(() => now);
  t.begin('model:GPT');
  now = 50;
  t.mark('started');
  now = 3050;
  t.mark('firstProgress');
  now = 3100;
  t.mark('firstProgress'); // once only
  now = 9050;
  t.mark('annotations');
  assert.equal(t.result(), undefined, 'not before the paint');
  now = 9070;
  t.mark('painted');
  assert.deepEqual(t.result(), { targetId: 'model:GPT', serverMs: 50, workerStartMs: 3000, traceMs: 6000, paintMs: 20, totalMs: 9070 });
});

test('marks out of order or before a trace are ignored', () => {
  let now = 0;
  const t = new TraceTimer(() => now);
  t.mark('started');
  assert.equal(t.has('started'), false);
  t.begin('x');
  now = 10;
  t.mark('painted');
  assert.equal(t.has('painted'), false);
  t.begin('y');
  assert.equal(t.has('started'), false, 'a new trace forgets the old marks');
});
