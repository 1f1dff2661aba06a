// What the browser tests of the standalone report share: real snapshots from the engine
// (cached), reports made with `memlens show --html`, and Chromium pages that record every error,
// console message and CSP violation.
import { strict as assert } from 'node:assert';
import { execFileSync } from 'node:child_process';
import { createHash } from 'node:crypto';
import { existsSync, mkdirSync, readFileSync, readdirSync, statSync, writeFileSync } from 'node:fs';
import * as path from 'node:path';
import { chromium, type Browser, type BrowserContext, type Page } from 'playwright-core';
import type { Snapshot } from '../../common/snapshot';
import { CHROMIUM_ARGS } from '../e2e/chromium';

export const root = path.resolve(__dirname, '../../..');
export const artifacts = path.join(root, 'test/e2e/artifacts/webview');
const cache = path.join(root, 'out/test-snapshots');

export const chromiumPath = process.env['CHROMIUM_PATH'] ?? '/usr/bin/chromium';

/** The Python that runs memlens: $MEMLENS_PYTHON, the repository's .venv, or python3. */
export function python(): string {
  const fromEnv = process.env['MEMLENS_PYTHON'];
  if (fromEnv) return fromEnv;
  const venv = path.join(root, '.venv/bin/python');
  return existsSync(venv) ? venv : 'python3';
}

function memlens(args: string[]): string {
  return execFileSync(python(), ['-m', 'memlens', ...args], {
    cwd: root,
    env: { ...process.env, PYTHONPATH: path.join(root, 'python') },
    encoding: 'utf8',
    stdio: ['ignore', 'pipe', 'pipe'],
    maxBuffer: 64 * 1024 * 1024,
  });
}

/** A hash of what decides a traced snapshot: the engine's sources and the example. */
function engineHash(extra: string): string {
  const h = createHash('sha256').update(extra);
  const walk = (dir: string) => {
    for (const name of readdirSync(dir).sort()) {
      const p = path.join(dir, name);
      if (statSync(p).isDirectory()) {
        if (name !== '__pycache__' && name !== 'webview_dist') walk(p);
      } else if (name.endsWith('.py') || name.endsWith('.json')) h.update(p).update(readFileSync(p));
    }
  };
  walk(path.join(root, 'python/memlens'));
  walk(path.join(root, 'examples/gpt'));
  return h.digest('hex').slice(0, 16);
}

/** Traces examples/gpt/train.py with the engine (once per engine version) and returns the path. */
export function gptSnapshot(batch: number, layers = 4): string {
  const args = ['--batch-size', String(batch), '--n-layer', String(layers)];
  const file = path.join(cache, `gpt-b${batch}-l${layers}-${engineHash(args.join(' '))}.json`);
  if (!existsSync(file)) {
    mkdirSync(cache, { recursive: true });
    memlens(['run', '--device', 'cpu', '--progress', 'none', '--snapshot', file, '--', 'examples/gpt/train.py', ...args]);
  }
  return file;
}

/** A trace of a test script on the simulated H100 (once per engine version), for what only a
 * CUDA target shows. */
function simulatedGpuSnapshot(script: string, name: string): string {
  const file = path.join(cache, `${name}-${engineHash(script)}.json`);
  if (!existsSync(file)) {
    mkdirSync(cache, { recursive: true });
    memlens(['run', '--device', 'h100-80gb', '--progress', 'none', '--snapshot', file, '--', script]);
  }
  return file;
}

/** python/tests/scripts/cuda_streams.py: streams, two cuBLAS workspaces. */
export function cudaStreamsSnapshot(): string {
  return simulatedGpuSnapshot('python/tests/scripts/cuda_streams.py', 'cuda-streams');
}

/** python/tests/scripts/compiled_sdpa_kwargs.py: one attention block compiled with
 * fullgraph=True, run as Inductor's program (see test_compiled_cuda.py). */
export function compiledSnapshot(): string {
  return simulatedGpuSnapshot('python/tests/scripts/compiled_sdpa_kwargs.py', 'compiled');
}

/** What the language server answers memlens.fit with (its FitReport), for a real search of
 * python/tests/scripts/fit_gpt.py on 2 GPUs with full recompute, micro-batch 2, 4 and 8, on an
 * h100-94gb: 4 is traced and fits (so 2 fits without a trace), 8 is traced and does not. The
 * CLI's --json turned into the payload by the server's own payloads.fit_report. */
export function fitReportPayload(): unknown {
  const script = 'python/tests/scripts/fit_gpt.py';
  const file = path.join(cache, `fit-report-${engineHash(script)}.json`);
  if (!existsSync(file)) {
    mkdirSync(cache, { recursive: true });
    const runDir = path.join(cache, `fit-run-${engineHash(script)}`);
    const doc = memlens(['fit', '--device', 'h100-94gb', '--gpus', '2', '--micro-batch', '2,4,8', '--recompute', 'full', '--axis', 'micro-batch=--batch-size', '--axis', 'recompute=--recompute', '--jobs', '1', '--json', '--progress', 'none', '--run-dir', runDir, '--', script]);
    const payload = execFileSync(python(), ['-c', 'import json, sys; from memlens.server.payloads import fit_report; print(json.dumps(fit_report(json.load(sys.stdin))))'], {
      cwd: root,
      env: { ...process.env, PYTHONPATH: path.join(root, 'python') },
      input: doc,
      encoding: 'utf8',
    });
    writeFileSync(file, payload);
  }
  return JSON.parse(readFileSync(file, 'utf8')) as unknown;
}

export function readSnapshot(file: string): Snapshot {
  return JSON.parse(readFileSync(file, 'utf8')) as Snapshot;
}

/** `memlens show SNAPSHOT --html OUT [--compare OTHER]`; returns OUT. */
export function makeReport(snapshot: string, out: string, compare?: string): string {
  mkdirSync(path.dirname(out), { recursive: true });
  memlens(['show', snapshot, '--html', out, ...(compare ? ['--compare', compare] : [])]);
  return out;
}

export function writeJson(file: string, value: unknown): string {
  mkdirSync(path.dirname(file), { recursive: true });
  writeFileSync(file, JSON.stringify(value));
  return file;
}

export interface PageLog {
  errors: string[];
  console: string[];
  csp: string[];
  dialogs: string[];
}

export interface Opened {
  browser: Browser;
  context: BrowserContext;
  page: Page;
  log: PageLog;
}

let shared: Browser | null = null;

export async function browser(): Promise<Browser> {
  if (!existsSync(chromiumPath)) throw new Error(`no Chromium at ${chromiumPath}: apt-get install -y chromium (or set CHROMIUM_PATH)`);
  shared ??= await chromium.launch({ executablePath: chromiumPath, headless: true, args: CHROMIUM_ARGS });
  return shared;
}

export async function closeBrowser(): Promise<void> {
  await shared?.close();
  shared = null;
}

/** Opens a report file in a fresh context (light or dark) and waits for its first render. */
export async function openReport(file: string, colorScheme: 'light' | 'dark' = 'dark', wait: 'validated' | 'ready' = 'validated', width = 1400): Promise<Opened> {
  const b = await browser();
  const context = await b.newContext({ viewport: { width, height: 900 }, colorScheme });
  const page = await context.newPage();
  const log: PageLog = { errors: [], console: [], csp: [], dialogs: [] };
  page.on('pageerror', (e) => log.errors.push(`${e.name}: ${e.message}`));
  page.on('console', (m) => {
    if (m.type() === 'error' || m.type() === 'warning') log.console.push(`[${m.type()}] ${m.text()}`);
  });
  page.on('dialog', (d) => {
    log.dialogs.push(d.message());
    void d.dismiss();
  });
  await page.addInitScript(() => {
    document.addEventListener('securitypolicyviolation', (e) => {
      (window as unknown as { __csp: string[] }).__csp ??= [];
      (window as unknown as { __csp: string[] }).__csp.push(`${e.violatedDirective} ${e.blockedURI}`);
    });
  });
  await page.goto(`file://${file}`);
  await page.waitForSelector(wait === 'validated' ? 'body[data-validated], body[data-ready=error]' : 'body[data-ready]');
  return { browser: b, context, page, log };
}

/** CSP violations the page saw (collected in the page, as they may come before any listener). */
export async function cspViolations(page: Page): Promise<string[]> {
  return page.evaluate(() => (window as unknown as { __csp?: string[] }).__csp ?? []);
}

export async function showTab(page: Page, tab: string): Promise<void> {
  await page.click(`vscode-tab-header[data-tab=${tab}]`);
  await page.waitForSelector(`body[data-tab=${tab}]`);
}

export async function screenshot(page: Page, name: string): Promise<void> {
  mkdirSync(artifacts, { recursive: true });
  await page.screenshot({ path: path.join(artifacts, `${name}.png`) });
}

/** JSON for a <script type="application/json"> block, escaped as reports/html.py does. */
export function embedJson(value: unknown): string {
  return JSON.stringify(value).replace(/</g, '\\u003c').replace(/>/g, '\\u003e').replace(/&/g, '\\u0026');
}

/**
 * A copy of a report page with other data: `blocks` (raw block contents by id, the first being
 * memlens-data), or a snapshot split as reports/html.py splits it.
 */
export function reportWith(page: string, data: { snapshot: Snapshot; source?: string } | Record<string, string>): string {
  let blocks: Record<string, string>;
  if ('snapshot' in data && typeof data.snapshot === 'object') {
    const { snapshot, ...rest } = data as { snapshot: Snapshot; source?: string };
    const main = { ...snapshot, tensors: [], allocations: null };
    const deferred: Record<string, string> = { tensors: 'memlens-data-tensors' };
    if (snapshot.allocations) deferred['allocations'] = 'memlens-data-allocations';
    blocks = {
      'memlens-data': embedJson({ ...rest, snapshot: main, deferred }),
      'memlens-data-tensors': embedJson(snapshot.tensors),
      ...(snapshot.allocations ? { 'memlens-data-allocations': embedJson(snapshot.allocations) } : {}),
    };
  } else blocks = data as Record<string, string>;
  const html = Object.entries(blocks)
    .map(([id, text]) => `<script type="application/json" id="${id}">${text}</script>\n`)
    .join('');
  // The JSON blocks run from the first one up to the bundle's plain <script>.
  return page.replace(/<script type="application\/json" id="memlens-data">[\s\S]*?(?=<script>)/, () => html);
}

/** The page ran cleanly: no page errors, no console errors or warnings, no CSP violations. */
export async function assertClean(o: Opened): Promise<void> {
  assert.deepEqual(o.log.errors, [], 'page errors');
  assert.deepEqual(o.log.console, [], 'console errors and warnings');
  assert.deepEqual(await cspViolations(o.page), [], 'CSP violations');
}

