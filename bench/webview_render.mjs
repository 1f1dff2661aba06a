// The panel with 1,000, 10,000 and 100,000 live tensors, in headless Chromium: time to first
// render and to switch tabs. Snapshots are synthetic (bench/synthetic-snapshot.mjs), reports are
// made by python/memlens/reports/html.py from the built bundle (npm run build:webview first).
//   node bench/webview_render.mjs [--runs 5] [--sizes 1000,10000,100000]
// Prints a table and writes bench/results/webview-render.json.
//
// Measured per run, in a fresh browser context:
//   load → render   navigation start to the first rendered view (reads and parses the page too)
//   data → render   from the embedded JSON being parsed to the first rendered view (what a
//                   snapshot sent by VS Code would take)
//   checked         navigation start to the end of the deep checks (tensors, allocations)
//   tab switches    click on a tab header to the next frame after its view rendered
import { execFileSync } from 'node:child_process';
import { existsSync, mkdirSync, writeFileSync } from 'node:fs';
import { cpus, loadavg } from 'node:os';
import { fileURLToPath } from 'node:url';
import { chromium } from 'playwright-core';
import { syntheticSnapshot } from './synthetic-snapshot.mjs';

const root = fileURLToPath(new URL('..', import.meta.url));
const args = process.argv.slice(2);
const opt = (name, fallback) => {
  const i = args.indexOf(`--${name}`);
  return i >= 0 ? args[i + 1] : fallback;
};
const runs = Number(opt('runs', '5'));
const sizes = opt('sizes', '1000,10000,100000').split(',').map(Number);
const TABS = ['timeline', 'modules', 'table', 'details', 'compare', 'phases'];
const work = `${root}out/bench-webview`;
const python = process.env.MEMLENS_PYTHON ?? (existsSync(`${root}.venv/bin/python`) ? `${root}.venv/bin/python` : 'python3');

function makeReport(n) {
  mkdirSync(work, { recursive: true });
  const json = `${work}/synthetic-${n}.json`;
  const html = `${work}/synthetic-${n}.html`;
  writeFileSync(json, JSON.stringify(syntheticSnapshot(n)));
  // The report as `memlens show --html` writes it, minus the (slow, Python) schema check.
  execFileSync(python, ['-c', 'import json, sys\nfrom memlens.reports.html import write_html_report\nwrite_html_report(json.load(open(sys.argv[1])), sys.argv[2], source=sys.argv[1].rsplit("/", 1)[-1])', json, html], {
    env: { ...process.env, PYTHONPATH: `${root}python` },
  });
  return html;
}

const median = (xs) => {
  const s = [...xs].sort((a, b) => a - b);
  return s.length % 2 ? s[(s.length - 1) / 2] : (s[s.length / 2 - 1] + s[s.length / 2]) / 2;
};

const browser = await chromium.launch({
  executablePath: process.env.CHROMIUM_PATH ?? '/usr/bin/chromium',
  headless: true,
  args: ['--headless', '--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run', '--disable-background-networking', '--disable-component-update', '--disable-sync'],
});

const results = [];
for (const n of sizes) {
  const html = makeReport(n);
  const samples = [];
  for (let r = 0; r < runs + 1; r++) {
    const context = await browser.newContext({ viewport: { width: 1400, height: 900 }, colorScheme: 'dark' });
    const page = await context.newPage();
    const errors = [];
    page.on('pageerror', (e) => errors.push(e.message));
    await page.goto(`file://${html}`);
    await page.waitForSelector('body[data-validated]', { timeout: 60_000 });
    const marks = await page.evaluate(() => Object.fromEntries(performance.getEntriesByType('mark').map((m) => [m.name, m.startTime])));
    const tabs = {};
    for (const tab of TABS) {
      tabs[tab] = await page.evaluate(async (t) => {
        const t0 = performance.now();
        document.querySelector(`vscode-tab-header[data-tab=${t}]`).click();
        await new Promise((resolve) => requestAnimationFrame(() => setTimeout(resolve, 0)));
        return performance.now() - t0;
      }, tab);
    }
    if (errors.length) throw new Error(`page errors: ${errors.join('; ')}`);
    await context.close();
    if (r === 0) continue; // the first load warms the browser and the file cache
    samples.push({
      loadToRender: marks['memlens:rendered'],
      dataToRender: marks['memlens:rendered'] - marks['memlens:parse-start'],
      checked: marks['memlens:validated'],
      tabs,
    });
  }
  const row = {
    tensors: n,
    htmlBytes: Number(execFileSync('stat', ['-c', '%s', html], { encoding: 'utf8' })),
    loadToRender: median(samples.map((s) => s.loadToRender)),
    dataToRender: median(samples.map((s) => s.dataToRender)),
    checked: median(samples.map((s) => s.checked)),
    tabs: Object.fromEntries(TABS.map((t) => [t, median(samples.map((s) => s.tabs[t]))])),
  };
  results.push(row);
  const f = (x) => `${Math.round(x)} ms`.padStart(8);
  console.log(
    `${String(n).padStart(7)} tensors  ${(row.htmlBytes / 2 ** 20).toFixed(1).padStart(5)} MiB  load→render ${f(row.loadToRender)}  data→render ${f(row.dataToRender)}  checked ${f(row.checked)}  ` +
      TABS.map((t) => `${t} ${f(row.tabs[t]).trim()}`).join('  '),
  );
}
await browser.close();

const env = { cpus: cpus().length, cpu: cpus()[0]?.model, loadavg: loadavg().map((x) => +x.toFixed(2)), chromium: browser.version?.() ?? undefined, runs };
mkdirSync(`${root}bench/results`, { recursive: true });
writeFileSync(`${root}bench/results/webview-render.json`, JSON.stringify({ date: new Date().toISOString(), env, results }, null, 2));
console.log(`machine: ${env.cpus} CPUs (${env.cpu}), load average ${env.loadavg.join(' ')}; median of ${runs} runs`);
