// The Fit view in Chromium, from a real search's payload (support.fitReportPayload): the rows
// are the server's, in its order, each byte cell its integer and formatBytes of it; the
// configurations that do not fit carry their reasons; a malformed payload shows its error.
import { strict as assert } from 'node:assert';
import { readFileSync, writeFileSync } from 'node:fs';
import * as path from 'node:path';
import { after, before, test } from 'node:test';
import { formatBytes } from '../../common/format';
import type { FitReport } from '../../common/protocol';
import { assertClean, closeBrowser, embedJson, fitReportPayload, gptSnapshot, makeReport, openReport, reportWith, root, screenshot, type Opened } from './support';

const out = path.join(root, 'out/test-webview');
const T = { timeout: 600_000 };

let fit: FitReport;
let page: string;

before(() => {
  fit = fitReportPayload() as FitReport;
  page = readFileSync(makeReport(gptSnapshot(8), path.join(out, 'gpt-b8-for-fit.html')), 'utf8');
}, T);

after(() => closeBrowser());

function fitPage(name: string, payload: unknown): string {
  const file = path.join(out, `${name}.html`);
  writeFileSync(file, reportWith(page, { 'memlens-data': embedJson({ fit: payload }) }));
  return file;
}

type Cell = { text: string; bytes: string | null };
const rowsOf = (o: Opened, table: string) =>
  o.page.$$eval(`#${table} tbody tr`, (rows) =>
    rows.map((r) => ({
      key: r.getAttribute('data-key'),
      cells: [...r.querySelectorAll('td')].map((td) => ({ text: (td.textContent ?? '').trim(), bytes: td.getAttribute('data-bytes') })),
    })),
  );

test('the search found what the formulas say: 2 and 4 fit, 8 does not', () => {
  // (the payload is a real search; its numbers are test_server_fit.py's and test_fit.py's)
  assert.deepEqual(
    fit.frontier.map((r) => [r.values, r.source]),
    [
      [['2', '4', 'full'], 'traced'],
      [['2', '2', 'full'], 'implied'],
    ],
  );
  assert.deepEqual(
    fit.excluded.map((r) => [r.values, r.verdict]),
    [[['2', '8', 'full'], 'oom']],
  );
});

for (const scheme of ['dark', 'light'] as const) {
  test(`the Fit view shows the server's rows in its order, with its numbers (${scheme})`, T, async () => {
    const o = await openReport(fitPage('fit', fit), scheme, 'ready');
    await o.page.waitForSelector('#fit-frontier tbody tr');
    assert.equal(await o.page.getAttribute('body', 'data-tab'), 'fit');
    assert.equal(await o.page.textContent('#fit-summary h2'), 'What fits: fit_gpt');
    assert.equal(Number(await o.page.getAttribute('#fit-device', 'data-bytes')), fit.deviceTotalBytes);
    assert.equal(await o.page.textContent('#fit-device'), `h100-94gb (${formatBytes(fit.deviceTotalBytes)})`);
    assert.equal(await o.page.textContent('[data-fit-tab=fits]'), 'Fits (2)');
    assert.equal(await o.page.textContent('[data-fit-tab=excluded]'), 'Does not fit (1)');
    const headers = await o.page.$$eval('#fit-frontier thead th', (ths) => ths.map((th) => th.textContent));
    assert.deepEqual(headers, ['gpus', 'micro-batch', 'recompute', 'GPUs', 'worst rank', 'peak', 'reserved', 'headroom', 'how known', '']);
    const bytes = (n: number | null): Cell => (n === null ? { text: '–', bytes: null } : { text: formatBytes(n), bytes: String(n) });
    const plain = (text: string): Cell => ({ text, bytes: null });
    const frontier = await rowsOf(o, 'fit-frontier');
    assert.deepEqual(
      frontier,
      fit.frontier.map((r) => ({
        key: r.key,
        cells: [
          ...r.values.map(plain),
          plain(String(r.gpus)),
          plain(r.worstRank === null ? '–' : String(r.worstRank)),
          bytes(r.peakBytes),
          bytes(r.reservedPeakBytes),
          bytes(r.headroomBytes),
          plain(r.by ? `${r.source}: at most as much as ${r.by}` : r.source),
          plain(r.snapshot ? 'Snapshot' : ''),
        ],
      })),
    );
    // the traced point: headroom is the card less reserved and outside-allocator memory
    const traced = fit.frontier[0]!;
    assert.ok(traced.headroomBytes! > 0 && traced.headroomBytes! < fit.deviceTotalBytes - traced.reservedPeakBytes!);
    await screenshot(o.page, `${scheme}-fit`);
    await o.page.click('[data-fit-tab=excluded]');
    await o.page.waitForSelector('#fit-excluded tbody tr', { state: 'visible' });
    const excluded = await rowsOf(o, 'fit-excluded');
    assert.deepEqual(
      excluded,
      fit.excluded.map((r) => ({
        key: r.key,
        cells: [...r.values.map(plain), plain('out of memory'), plain(r.reason), plain(String(r.gpus)), bytes(r.peakBytes), bytes(r.headroomBytes), plain(r.snapshot ? 'Snapshot' : '')],
      })),
    );
    assert.match(fit.excluded[0]!.reason, new RegExp(`^OOM by ${formatBytes(-fit.excluded[0]!.headroomBytes!).replace('.', '\\.')} on rank 0`));
    await screenshot(o.page, `${scheme}-fit-excluded`);
    await assertClean(o);
    await o.context.close();
  });
}

test('a traced point’s Snapshot button asks for its snapshot (copied outside VS Code)', T, async () => {
  const o = await openReport(fitPage('fit-open', fit), 'dark', 'ready');
  await o.page.click('#fit-frontier tbody tr:first-child vscode-button');
  await o.page.waitForSelector('#toast.visible');
  assert.match((await o.page.textContent('#toast')) ?? '', new RegExp(`${fit.frontier[0]!.snapshot!.replace(/[.*+?^${}()|[\]\\/]/g, '\\$&')}$`));
  await o.context.close();
});

test('a malformed payload shows where it is wrong, not a table', T, async () => {
  const bad = JSON.parse(JSON.stringify(fit)) as FitReport;
  (bad.frontier[0] as unknown as Record<string, unknown>)['peakBytes'] = '56 GiB';
  const o = await openReport(fitPage('fit-invalid', bad), 'dark', 'ready');
  assert.equal(await o.page.getAttribute('body', 'data-ready'), 'error');
  assert.equal(await o.page.textContent('#error-message'), 'the search: frontier[0]: peakBytes is not an integer or null');
  assert.equal(await o.page.$('#fit-frontier'), null);
  await o.context.close();
});
