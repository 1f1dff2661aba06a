// The standalone HTML report in Chromium: every tab renders in both themes, the numbers on
// screen are the snapshot's, a phase click filters, selection totals add up, state survives a
// reload, a hostile snapshot stays text, an invalid one shows its error, 100,000 rows scroll.
// Screenshots of every tab land in test/e2e/artifacts/webview/.
import { strict as assert } from 'node:assert';
import { readFileSync, writeFileSync } from 'node:fs';
import * as path from 'node:path';
import { after, before, test } from 'node:test';
import { formatBytes } from '../../common/format';
import { CATEGORIES, type Snapshot } from '../../common/snapshot';
import { compareSnapshots } from '../../webview/data/compare';
import {
  assertClean,
  closeBrowser,
  cudaStreamsSnapshot,
  embedJson,
  gptSnapshot,
  makeReport,
  openReport,
  readSnapshot,
  reportWith,
  root,
  screenshot,
  showTab,
  writeJson,
  type Opened,
} from './support';

const out = path.join(root, 'out/test-webview');
const TABS = ['phases', 'timeline', 'modules', 'table', 'details', 'compare'] as const;
const T = { timeout: 240_000 };

let a: Snapshot;
let b: Snapshot;
let aPath: string;
let report: string;
let compareReport: string;

before(() => {
  aPath = gptSnapshot(8);
  const bPath = gptSnapshot(16);
  a = readSnapshot(aPath);
  b = readSnapshot(bPath);
  report = makeReport(aPath, path.join(out, 'gpt-b8.html'));
  compareReport = makeReport(aPath, path.join(out, 'gpt-b8-vs-b16.html'), bPath);
}, T);

after(() => closeBrowser());

async function clean(o: Opened): Promise<void> {
  await assertClean(o);
  assert.deepEqual(o.log.dialogs, [], 'dialogs');
}

test('the phase chart renders in a narrow panel (names on two lines), with no page error', T, async () => {
  // 520 px: the panel beside an editor on a laptop. The chart's axis labels are drawn on the
  // canvas; the screenshot shows that neighbouring phase names do not overlap.
  const o = await openReport(report, 'dark', 'validated', 520);
  await o.page.waitForSelector('#view-phases #phases-chart');
  const box = (await o.page.locator('#phases-chart').boundingBox())!;
  assert.ok(box.width > 300 && box.width < 520, `chart width ${box.width}`);
  await screenshot(o.page, 'dark-phases-narrow');
  await clean(o);
});

const bytesOf = async (o: Opened, selector: string) => Number(await o.page.getAttribute(selector, 'data-bytes'));
const sum = (xs: number[]) => xs.reduce((x, y) => x + y, 0);
const total = (c: Record<string, number>) => sum(Object.values(c));

for (const scheme of ['dark', 'light'] as const) {
  test(`every tab renders (${scheme} theme), with no error, console message or CSP violation`, T, async () => {
    const o = await openReport(compareReport, scheme);
    const expect: Record<(typeof TABS)[number], string> = {
      phases: '#phases-chart',
      timeline: '#timeline-chart',
      modules: '#modules-tree tbody tr',
      table: '.virtual-layer .trow',
      details: '#stack-frames li.frame',
      compare: '#compare-peak-delta',
    };
    for (const tab of TABS) {
      await showTab(o.page, tab);
      await o.page.waitForSelector(`#view-${tab} ${expect[tab]}`);
      await o.page.mouse.move(0, 0);
      if (tab === 'timeline') {
        // The hover names the event's op and module (drawn on the canvas: seen in the screenshot).
        const box = (await o.page.locator('#timeline-chart').boundingBox())!;
        await o.page.mouse.move(box.x + box.width * 0.57, box.y + box.height * 0.5);
      }
      await screenshot(o.page, `${scheme}-${tab}`);
    }
    await clean(o);
    await o.context.close();
  });
}

test('the numbers shown are the snapshot’s', T, async () => {
  const o = await openReport(compareReport);
  const s = a.summary;
  assert.equal(await bytesOf(o, '#summary-peak'), s.peak_bytes);
  assert.equal(await o.page.textContent('#summary-peak'), formatBytes(s.peak_bytes));
  // The verdict is the snapshot's headroom (common/headroom.ts), the number memlens show prints.
  const verdict = (await o.page.textContent('.peak-row .verdict')) ?? '';
  assert.ok(s.fits && verdict.endsWith(`· fits, ${formatBytes(s.headroom_bytes!)} headroom`), verdict);
  for (const c of CATEGORIES) {
    assert.equal(await bytesOf(o, `#category-legend [data-category=${c}]`), s.categories_at_peak[c], c);
  }

  // Phases: before, peak and after of every row.
  const phaseCells = await o.page.$$eval('#phases-table tbody tr', (rows) => rows.map((r) => [...r.querySelectorAll('td[data-bytes]')].map((td) => Number(td.getAttribute('data-bytes')))));
  assert.deepEqual(phaseCells, a.phases.map((p) => [p.current_before_bytes, p.peak_bytes, p.current_after_bytes]));

  // Modules: the model, the merged blocks, one-off modules, tensors of no module.
  await showTab(o.page, 'modules');
  const row = (key: string) => `#modules-tree tr.module-row[data-key="${key}"]`;
  const model = a.modules.find((m) => m.fqn === '')!;
  assert.equal(await bytesOf(o, row('')), total(model.at_peak));
  const blocks = a.modules.filter((m) => /^h\.\d+$/.test(m.fqn));
  assert.equal(await o.page.getAttribute(row('h.*'), 'data-count'), String(blocks.length));
  assert.equal(await bytesOf(o, row('h.*')), sum(blocks.map((m) => total(m.at_peak))));
  for (const oneOff of ['lm_head', 'wpe', 'ln_f']) {
    assert.equal(await bytesOf(o, row(oneOff)), total(a.modules.find((m) => m.fqn === oneOff)!.at_peak), oneOff);
  }
  // Expanded: the merged group, then each instance with its own bytes.
  await o.page.click(row('h.*'));
  await o.page.click('#modules-tree tr.module-row.instances');
  for (const m of blocks) assert.equal(await bytesOf(o, `#modules-tree tr.module-row.instance[data-key="${m.fqn}"]`), total(m.at_peak), m.fqn);
  const none = sum(a.tensors.filter((t) => t.module < 0).map((t) => t.bytes));
  assert.equal(await bytesOf(o, row('(no module)')), none);
  assert.equal(total(model.at_peak) + none, s.peak_bytes, 'the tree accounts for the whole peak');

  // Table: every tensor alive at the peak, adding up to the peak.
  await showTab(o.page, 'table');
  assert.equal(await o.page.getAttribute('#table-count', 'data-rows'), String(a.tensors.length));
  assert.equal(Number(await o.page.getAttribute('#table-count', 'data-bytes')), s.peak_bytes);
  assert.ok((await o.page.$$('.virtual-layer .trow')).length < 80, 'only the visible rows are in the DOM');

  // Compare: the peak delta and the category deltas, largest change first.
  await showTab(o.page, 'compare');
  const c = compareSnapshots(a, b);
  assert.equal(await bytesOf(o, '#compare-peak-delta'), b.summary.peak_bytes - a.summary.peak_bytes);
  const deltas = await o.page.$$eval('#compare-categories tbody tr', (rows) => rows.map((r) => [r.getAttribute('data-key'), Number(r.getAttribute('data-delta'))]));
  assert.deepEqual(deltas, c.categoriesAtPeak.filter((d) => d.a || d.b).map((d) => [d.key, d.delta]));
  const moduleDeltas = await o.page.$$eval('#compare-modules tbody tr', (rows) => rows.map((r) => Math.abs(Number(r.getAttribute('data-delta')))));
  assert.deepEqual(moduleDeltas, [...moduleDeltas].sort((x, y) => y - x), 'modules sorted by absolute change');
  await clean(o);
  await o.context.close();
});

test('clicking a phase filters the other views to it', T, async () => {
  const o = await openReport(report);
  const phases = a.phases.map((p, i) => ({ p, i })).filter(({ p }) => p.device === a.meta.device_key);
  const target = phases.find(({ p }) => p.name === a.summary.peak_phase)!;

  // A click on the chart, in the column of the phase.
  const box = (await o.page.locator('#phases-chart').boundingBox())!;
  const axis = 70; // the y axis labels
  const x = box.x + axis + ((target.i + 0.5) * (box.width - axis)) / phases.length;
  await o.page.mouse.click(x, box.y + box.height * 0.6);
  await o.page.waitForSelector('#phase-filter');
  assert.match((await o.page.textContent('#phase-filter')) ?? '', new RegExp(target.p.name));
  assert.ok(await o.page.$(`#phases-table tr.selected[data-phase="${target.i}"]`));

  const inPhase = a.tensors.filter((t) => t.phase === target.i);
  await showTab(o.page, 'table');
  assert.equal(await o.page.getAttribute('#table-count', 'data-rows'), String(inPhase.length));
  const phaseCells = await o.page.$$eval('.virtual-layer .trow:not([hidden]) .col-phase', (cells) => cells.map((c) => c.textContent));
  assert.ok(phaseCells.length > 0 && phaseCells.every((p) => p === target.p.name));

  await showTab(o.page, 'modules');
  assert.equal(await bytesOf(o, '#modules-tree tr.module-row[data-key=""]'), sum(inPhase.filter((t) => t.module >= 0).map((t) => t.bytes)));

  await showTab(o.page, 'timeline');
  assert.match((await o.page.textContent('#timeline-range')) ?? '', /^events /);

  // Clearing the filter brings every tensor back.
  await o.page.click('#phase-filter .chip-clear');
  await showTab(o.page, 'table');
  assert.equal(await o.page.getAttribute('#table-count', 'data-rows'), String(a.tensors.length));
  // The table row click filters too.
  await showTab(o.page, 'phases');
  await o.page.click(`#phases-table tr[data-phase="${phases[0]!.i}"]`);
  await showTab(o.page, 'table');
  assert.equal(await o.page.getAttribute('#table-count', 'data-rows'), String(a.tensors.filter((t) => t.phase === phases[0]!.i).length));
  await clean(o);
  await o.context.close();
});

test('selected rows add up, with ranges, select-all and clear', T, async () => {
  const o = await openReport(report);
  await showTab(o.page, 'table');
  const rowBytes = async (pos: number) => Number(await o.page.getAttribute(`.virtual-layer .trow[data-pos="${pos}"]`, 'data-bytes'));
  const check = (pos: number, shift = false) => o.page.click(`.virtual-layer .trow[data-pos="${pos}"] input`, shift ? { modifiers: ['Shift'] } : {});

  await check(0);
  await check(2);
  await check(5);
  let expected = (await rowBytes(0)) + (await rowBytes(2)) + (await rowBytes(5));
  assert.equal(await bytesOf(o, '#selection-total'), expected);
  assert.equal(await bytesOf(o, '#selection-without'), a.summary.peak_bytes - expected);
  assert.equal(await o.page.textContent('#selection-total'), formatBytes(expected));

  await check(9, true); // 5..9
  for (const p of [6, 7, 8, 9]) expected += await rowBytes(p);
  assert.equal(await bytesOf(o, '#selection-total'), expected);
  assert.equal(await o.page.getAttribute('#selection-bar', 'data-count'), '7');
  await screenshot(o.page, 'dark-table-selection');

  // Every parameter tensor: their total is the snapshot's parameter bytes at the peak.
  await o.page.click('#selection-clear');
  assert.equal(await o.page.getAttribute('#selection-bar', 'data-count'), '0');
  await o.page.evaluate(() => {
    const select = document.querySelector('#table-category') as HTMLElement & { value: string };
    select.value = 'parameter';
    select.dispatchEvent(new Event('change'));
  });
  await o.page.waitForFunction((n) => document.querySelector('#table-count')?.getAttribute('data-rows') === String(n), a.tensors.filter((t) => t.category === 'parameter').length);
  await o.page.click('.trow.thead input');
  assert.equal(await bytesOf(o, '#selection-total'), a.summary.categories_at_peak.parameter);
  await clean(o);
  await o.context.close();
});

test('a tensor’s stack shows user frames first; a frame click gives its file:line', T, async () => {
  const o = await openReport(report);
  await showTab(o.page, 'table');
  // The largest tensor with a user stack.
  const pos = a.tensors.findIndex((t) => (a.stacks[t.stack] ?? []).length > 0);
  await o.page.dblclick(`.virtual-layer .trow[data-pos="${pos}"] .col-op`);
  await o.page.waitForSelector('body[data-tab=details] #stack-frames');
  const t = a.tensors[pos]!;
  assert.equal(await o.page.getAttribute('.tensor-details', 'data-id'), String(t.id));
  const frames = await o.page.$$eval('#stack-frames li.frame a', (links) => links.map((l) => [l.getAttribute('data-file'), Number(l.getAttribute('data-line'))]));
  assert.deepEqual(frames, (a.stacks[t.stack] ?? []).map((f) => [a.frames[f]!.file, a.frames[f]!.line]));
  await o.page.click('#stack-frames li.frame a');
  await o.page.waitForSelector('#toast.visible');
  const [file, line] = frames[0]!;
  assert.ok(((await o.page.textContent('#toast')) ?? '').endsWith(`${file}:${line}`));
  await screenshot(o.page, 'dark-details-frame-click');

  // A source line lists the tensors it left alive at the peak.
  await o.page.click('#lines-list .line-item');
  await o.page.waitForSelector('.line-details');
  await clean(o);
  await o.context.close();
});

test('the charts follow a theme change', T, async () => {
  const o = await openReport(report, 'dark');
  await showTab(o.page, 'timeline');
  assert.equal(await o.page.getAttribute('body', 'data-theme'), 'dark');
  const dark = await o.page.evaluate(() => getComputedStyle(document.body).getPropertyValue('--memlens-activation').trim());
  await o.page.emulateMedia({ colorScheme: 'light' });
  await o.page.waitForSelector('body[data-theme=light]');
  const light = await o.page.evaluate(() => getComputedStyle(document.body).getPropertyValue('--memlens-activation').trim());
  assert.notEqual(light, dark);
  await o.page.waitForSelector('#timeline-chart');
  await screenshot(o.page, 'light-after-theme-change-timeline');
  await clean(o);
  await o.context.close();
});

test('tab, filters and selection survive a reload', T, async () => {
  const o = await openReport(report);
  await showTab(o.page, 'table');
  await o.page.fill('#table-search input', 'mlp').catch(async () => {
    await o.page.evaluate(() => {
      const f = document.querySelector('#table-search') as HTMLElement & { value: string };
      f.value = 'mlp';
      f.dispatchEvent(new Event('input'));
    });
  });
  const mlp = a.tensors.filter((t) => t.module >= 0 && a.modules[t.module]!.fqn.includes('mlp')).length;
  await o.page.waitForFunction((n) => document.querySelector('#table-count')?.getAttribute('data-rows') === String(n), mlp);
  await o.page.click('.virtual-layer .trow[data-pos="0"] input');
  await o.page.click('.virtual-layer .trow[data-pos="1"] input');
  await o.page.click('.cell[data-column=op]');
  const selected = await bytesOf(o, '#selection-total');

  await o.page.reload();
  await o.page.waitForSelector('body[data-validated]');
  assert.equal(await o.page.getAttribute('body', 'data-tab'), 'table');
  assert.equal(await o.page.getAttribute('#table-count', 'data-rows'), String(mlp));
  assert.equal(await o.page.getAttribute('#selection-bar', 'data-count'), '2');
  assert.equal(await bytesOf(o, '#selection-total'), selected);
  assert.equal(await o.page.getAttribute('.cell[data-column=op]', 'aria-sort'), 'ascending');
  await clean(o);
  await o.context.close();
});

const PAYLOADS = ['<img src=x onerror="window.__pwned=1;alert(1)">', '</script><script>window.__pwned=2;alert(2)</script>', '<b>bold</b>&amp;'];

function hostile(s: Snapshot): Snapshot {
  const h = JSON.parse(JSON.stringify(s)) as Snapshot;
  const evil = (text: string, k: number) => `${text}${PAYLOADS[k % PAYLOADS.length]}`;
  h.modules.forEach((m, k) => {
    if (m.fqn) m.fqn = evil(m.fqn, k);
    m.class = evil(m.class, k + 1);
    m.group = evil(m.group, 0);
  });
  h.frames.forEach((f, k) => {
    f.file = `/tmp/${PAYLOADS[k % PAYLOADS.length]}/model.py`;
    f.name = evil(f.name, k + 1);
  });
  h.lines.forEach((l, k) => (l.file = `/tmp/${PAYLOADS[k % PAYLOADS.length]}/model.py`));
  h.tensors.forEach((t, k) => {
    t.op = evil(t.op, k);
    t.dtype = evil(t.dtype, k + 2);
  });
  h.ops = h.ops.map((op, k) => evil(op, k));
  h.phases.forEach((p, k) => (p.name = evil(p.name, k)));
  h.summary.peak_phase = h.phases.find((p) => p.name.startsWith('forward_backward_iter_1'))?.name ?? null;
  h.meta.target = { ...h.meta.target!, name: PAYLOADS[1]!, args: [PAYLOADS[0]!] };
  h.meta.notes = [PAYLOADS[0]!];
  return h;
}

test('a hostile snapshot renders as text and runs nothing', T, async () => {
  const h = hostile(a);
  const file = writeJson(path.join(out, 'hostile.json'), h);
  const page = makeReport(file, path.join(out, 'hostile.html'), file);
  const o = await openReport(page);
  for (const tab of TABS) {
    await showTab(o.page, tab);
    await o.page.mouse.move(700, 500); // hover the charts: tooltips draw the names too
    await o.page.waitForTimeout(50);
    assert.equal(await o.page.evaluate(() => (window as unknown as { __pwned?: number }).__pwned), undefined, tab);
    assert.equal(await o.page.$$eval('img, iframe, object, embed, b, body script:not([type="application/json"])', (els) => els.length), 1, `${tab}: only our bundle script`);
  }
  await showTab(o.page, 'modules');
  const names = await o.page.$$eval('#modules-tree .module-name', (els) => els.map((e) => e.textContent ?? ''));
  assert.ok(names.some((n) => n.includes('<img src=x onerror=')), 'module names show the markup as text');
  await showTab(o.page, 'details');
  const paths = await o.page.$$eval('#stack-frames .frame-path', (els) => els.map((e) => e.textContent ?? ''));
  assert.ok(paths.length > 0 && paths.every((p) => h.frames.some((f) => f.file === p) && /<(img|\/script)/.test(p)), 'frames show the markup as text');
  assert.match((await o.page.textContent('#summary')) ?? '', /<\/script><script>window.__pwned=2/);
  await screenshot(o.page, 'dark-hostile-details');
  await clean(o);
  await o.context.close();
});

test('a snapshot that fails validation shows the error, not a blank page', T, async () => {
  const page = readFileSync(report, 'utf8');
  const embed = embedJson;
  const variant = (name: string, data: string) => {
    const file = path.join(out, `invalid-${name}.html`);
    writeFileSync(file, reportWith(page, { 'memlens-data': data }));
    return file;
  };
  const badTensor = JSON.parse(JSON.stringify(a)) as Snapshot;
  (badTensor.tensors[3] as unknown as Record<string, unknown>)['category'] = 'weights<script>';
  const cases: [string, string, RegExp][] = [
    ['version', embed({ snapshot: { ...a, version: 2 } }), /snapshot version 2 is not supported/],
    ['tensor', embed({ snapshot: badTensor }), /invalid snapshot at tensors\/3\/category: must be equal to one of the allowed values/],
    ['json', '{"snapshot": {"format": "memlens.snap', /not valid JSON/],
    ['format', embed({ snapshot: { hello: 'world' } }), /not a memlens snapshot/],
    ['deferred', embed({ snapshot: { ...a, tensors: [], allocations: null }, deferred: { tensors: 'memlens-data-nowhere' } }), /its tensors block is missing/],
  ];
  for (const [name, data, message] of cases) {
    const o = await openReport(variant(name, data), 'dark', 'ready');
    await o.page.waitForSelector('body[data-ready=error] #error-message');
    assert.match((await o.page.textContent('#error-message')) ?? '', message, name);
    if (name === 'tensor') await screenshot(o.page, 'dark-invalid-snapshot');
    assert.deepEqual(o.log.errors, [], name);
    await o.context.close();
  }
});

test('the rows next to the allocator’s memory are the snapshot’s, with their basis', T, async () => {
  const file = cudaStreamsSnapshot();
  const s = readSnapshot(file).summary;
  const o = await openReport(makeReport(file, path.join(out, 'cuda-streams.html')));
  const rows = await o.page.$$eval('#outside-allocator .outside-item', (items) =>
    items.map((r) => [r.firstElementChild?.textContent ?? '', Number(r.getAttribute('data-bytes')), r.getAttribute('title') ?? '']),
  );
  const items = s.outside_allocator ?? [];
  assert.deepEqual(rows, items.map((i) => [i.label, i.bytes, i.basis]));
  // The CUDA context, and a cuBLAS workspace for each stream that ran a matmul.
  assert.deepEqual(rows.map((r) => r[0]), ['CUDA context (h100-80gb)', 'cuBLAS workspace x1', 'cuBLAS workspace x1 (stream 1)']);
  assert.match((await o.page.textContent('#outside-allocator')) ?? '', new RegExp(`reserved peak ${formatBytes(s.reserved_peak_bytes ?? -1)}`));
  await o.context.close();
});

test('100,000 tensors: the table stays virtual and scrolls to the last row', T, async () => {
  const synth = (await import(path.join(root, 'bench/synthetic-snapshot.mjs'))) as { syntheticSnapshot(n: number): Snapshot };
  const big = synth.syntheticSnapshot(100_000);
  const file = path.join(out, 'synthetic-100000.html');
  writeFileSync(file, reportWith(readFileSync(report, 'utf8'), { snapshot: big, source: 'synthetic-100000.json' }));
  const o = await openReport(file);
  const rendered = await o.page.evaluate(() => performance.getEntriesByName('memlens:rendered')[0]?.startTime ?? -1);
  assert.ok(rendered > 0 && rendered < 5000, `first render at ${rendered} ms`);
  await showTab(o.page, 'table');
  assert.equal(await o.page.getAttribute('#table-count', 'data-rows'), '100000');
  assert.ok((await o.page.$$('.virtual-layer .trow')).length < 80);
  await o.page.evaluate(() => {
    const v = document.querySelector('.virtual-viewport')!;
    v.scrollTop = v.scrollHeight;
  });
  await o.page.waitForSelector('.virtual-layer .trow[data-pos="99999"]');
  await o.page.click('.cell[data-column=module]');
  await o.page.waitForSelector('.cell[data-column=module][aria-sort=ascending]');
  await screenshot(o.page, 'dark-table-100k');
  await clean(o);
  await o.context.close();
});
