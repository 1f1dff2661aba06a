import { strict as assert } from 'node:assert';
import { test } from 'node:test';
import { levelOf } from '../../src/logLines';

test('the client’s prefixes become levels', () => {
  assert.deepEqual(levelOf('[Error - 10:41:00 AM] Request textDocument/hover failed.'), { level: 'error', text: 'Request textDocument/hover failed.' });
  assert.deepEqual(levelOf('[Warn  - 10:41:00] careful'), { level: 'warn', text: 'careful' });
  assert.deepEqual(levelOf('[Trace - 10:41:00] Sending request'), { level: 'trace', text: 'Sending request' });
});

test('a clean exit of the server is not an error', () => {
  assert.equal(levelOf('[Error - 11:39:51] Server process exited with code 0.').level, 'info');
  assert.equal(levelOf('[Error - 11:39:51] Server process exited with code 1.').level, 'error');
});

test('the server’s Python logging keeps its level; anything else is info', () => {
  assert.equal(levelOf('memlens-server WARNING pygls.protocol: slow').level, 'warn');
  assert.equal(levelOf('memlens-server ERROR memlens.server: boom').level, 'error');
  assert.deepEqual(levelOf('[GPT] step 1'), { level: 'info', text: '[GPT] step 1' });
});
