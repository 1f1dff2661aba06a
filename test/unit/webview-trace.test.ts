import { strict as assert } from 'node:assert';
import { test } from 'node:test';
import { eventIndex } from '../../webview/data/events';
import { firstUserFrame, isUserFrame, orderedStack } from '../../webview/data/frames';
import { devicePhases, phaseAtSeq, phaseAxisLines } from '../../webview/data/phases';
import { isWebviewMessage } from '../../common/messages';
import { makeSnapshot } from './snapshotFixture';

test('user frames come first, library frames after, each innermost first', () => {
  const s = makeSnapshot();
  const frames = orderedStack(s, 1);
  assert.deepEqual(frames.map((f) => [f.frame.line, f.user]), [[30, true], [12, true], [1775, false]]);
  assert.equal(firstUserFrame(s, 1)?.line, 30);
  assert.equal(firstUserFrame(s, 0), null);
  assert.deepEqual(orderedStack(s, 42), []);
});

test('which files are library code', () => {
  assert.equal(isUserFrame('/home/me/proj/train.py'), true);
  assert.equal(isUserFrame('/venv/lib/python3.11/site-packages/transformers/models/gpt2.py'), true);
  assert.equal(isUserFrame('/venv/lib/python3.11/site-packages/torch/nn/modules/module.py'), false);
  assert.equal(isUserFrame('/usr/lib/python3.11/runpy.py'), false);
  assert.equal(isUserFrame('<frozen runpy>'), false);
});

test('phases of the summary device, and the phase of an event', () => {
  const s = makeSnapshot();
  const phases = devicePhases(s);
  assert.deepEqual(phases.map((p) => p.index), [0, 1]);
  assert.equal(phaseAtSeq(phases, 0)?.phase.name, 'setup_model_and_optimizer');
  assert.equal(phaseAtSeq(phases, 100)?.phase.name, 'forward_backward_iter_0');
  assert.equal(phaseAtSeq(phases, 199)?.index, 1);
  assert.equal(phaseAtSeq(phases, 200), undefined);
});

test('the event at a seq: its allocation or free, op and module', () => {
  const s = makeSnapshot();
  assert.equal(eventIndex(s).at(5), null);
  s.allocations = {
    devices: ['cuda:0'],
    device: [0, 0, 0],
    bytes: [512, 1024, 2048],
    requested_bytes: [500, 1000, 2000],
    category: [0, 4, 5],
    module: [1, -1, 0],
    op: [0, 1, 2],
    stack: [0, 1, 2],
    stream: [0, 0, 0],
    alloc_seq: [0, 2, 5],
    free_seq: [-1, 3, 6],
  };
  const idx = eventIndex(s);
  assert.deepEqual(idx.at(2), { kind: 'alloc', allocation: 1, bytes: 1024, op: 'addmm', module: null, category: 'activation', stack: 1 });
  assert.equal(idx.at(3)?.kind, 'free');
  assert.equal(idx.at(3)?.allocation, 1);
  assert.equal(idx.at(4)?.allocation, 1);
  assert.equal(idx.at(5)?.module, '');
  assert.equal(idx.at(0)?.module, 'wte');
});

test('messages from the webview are checked before the host acts on them', () => {
  assert.ok(isWebviewMessage({ type: 'openFile', file: '/a.py', line: 3 }));
  assert.ok(!isWebviewMessage({ type: 'openFile', file: 3, line: 3 }));
  assert.ok(!isWebviewMessage({ type: 'openFile', file: '/a.py', line: '3' }));
  assert.ok(!isWebviewMessage({ type: 'runCommand' }));
  assert.ok(!isWebviewMessage(null));
});

test('phase names break into axis lines at the iteration and at "_and_"', () => {
  assert.deepEqual(phaseAxisLines('forward_backward_iter_12'), ['forward_backward', 'iter 12']);
  assert.deepEqual(phaseAxisLines('optimizer_step_iter_0'), ['optimizer_step', 'iter 0']);
  assert.deepEqual(phaseAxisLines('setup_model_and_optimizer'), ['setup_model_and_', 'optimizer']);
  assert.deepEqual(phaseAxisLines('warmup'), ['warmup']);
});
