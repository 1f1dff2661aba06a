// Benchmark of the VS Code extension (`make bench-ext`, or `npm run bench:ext` once the e2e
// tools are installed and the .vsix is built):
// - bundle sizes (raw and gzip) and the .vsix;
// - loading the bundle: `require('dist/extension.js')` in plain Node with `vscode` stubbed;
// - in code-server (the e2e harness): activation (the extension's own log), and the time from
//   opening the example model to the server being ready (its CodeLens shows);
// - "Trace Memory" to painted annotations on the example (the default device, h100-80gb), RUNS
//   times, split into server (command -> worker spawned), worker start (-> first progress:
//   Python and torch imports), trace (-> annotations arrive) and paint (-> decorations set), as
//   the extension
//   logs them ("timing {...}" lines of the Torch Memory Lens log). Twice in one run: first in a
//   code-server started with MEMLENS_WARM_WORKER=0 (every trace a fresh `python -m memlens`:
//   cold), then in one with the default warm worker (each trace forked from a process that
//   imported torch and memlens once: worker/warm.py), each after the same settle time.
// Prints the tables and writes bench/results/extension.json.
import { execFileSync } from 'node:child_process';
import { existsSync, mkdirSync, readdirSync, readFileSync, statSync, writeFileSync } from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { gzipSync } from 'node:zlib';
import { examplesDir, repoPython, repoRoot } from '../test/e2e/paths';
import { resolveVsix, Session } from '../test/e2e/session';
import { timeouts } from '../test/e2e/timeouts';

const RUNS = Number(process.env.MEMLENS_BENCH_RUNS ?? '3');
// How long an editor is left open before the first trace (the warm worker starts with the
// server and imports torch in the background), as a user opens a file and reads it.
const SETTLE_MS = Number(process.env.MEMLENS_BENCH_SETTLE_MS ?? '15000');

function size(file: string): { bytes: number; gzip: number } {
  const data = readFileSync(file);
  return { bytes: data.length, gzip: gzipSync(data).length };
}

/** Milliseconds to require the bundle in plain Node, `vscode` replaced by an empty stub. */
function requireTimeMs(): number {
  const script = `
    const Module = require('node:module');
    const resolve = Module._resolveFilename;
    Module._resolveFilename = function (request, ...rest) {
      return request === 'vscode' ? 'vscode' : resolve.call(this, request, ...rest);
    };
    require.cache.vscode = { id: 'vscode', filename: 'vscode', loaded: true, exports: new Proxy({}, { get: () => function () {} }) };
    const t = performance.now();
    require(${JSON.stringify(path.join(repoRoot, 'dist/extension.js'))});
    console.log(performance.now() - t);`;
  const samples = [1, 2, 3, 4, 5].map(() => Number(execFileSync(process.execPath, ['-e', script], { encoding: 'utf8' }).trim()));
  return median(samples);
}

function median(xs: number[]): number {
  const s = [...xs].sort((a, b) => a - b);
  const mid = Math.floor(s.length / 2);
  return s.length % 2 ? s[mid]! : (s[mid - 1]! + s[mid]!) / 2;
}

function findLog(root: string): string | undefined {
  for (const e of readdirSync(root, { withFileTypes: true })) {
    const p = path.join(root, e.name);
    if (e.isDirectory()) {
      const found = findLog(p);
      if (found) return found;
    } else if (e.name === 'Torch Memory Lens.log') {
      return p;
    }
  }
  return undefined;
}

interface Timing {
  serverMs: number;
  workerStartMs: number;
  traceMs: number;
  paintMs: number;
  totalMs: number;
}

function logText(session: Session): string {
  const file = findLog(path.join(session.dirs.userData, 'logs'));
  return file ? readFileSync(file, 'utf8') : '';
}

function timings(text: string): Timing[] {
  return [...text.matchAll(/timing (\{.*\})$/gm)].map((m) => JSON.parse(m[1]!) as Timing);
}

interface SessionResult {
  activation: { activateMs: number; serverReadyMs: number };
  openToReadyMs: number;
  runs: Timing[];
  median: Timing;
}

/** One code-server session: open the example, let it settle, trace RUNS times. `warm`: the
 * default warm worker, else MEMLENS_WARM_WORKER=0 in the environment code-server (and so the
 * extension, its language server and the workers) starts with. */
async function measure(warm: boolean): Promise<SessionResult> {
  const saved = process.env.MEMLENS_WARM_WORKER;
  if (warm) delete process.env.MEMLENS_WARM_WORKER;
  else process.env.MEMLENS_WARM_WORKER = '0';
  let session: Session;
  try {
    session = await Session.start({
      name: warm ? 'bench-warm' : 'bench-cold',
      fixture: examplesDir,
      // The default device (a simulated H100): a CPU target runs in a cold worker by design
      // (the warm process has the fake-CUDA shim loaded, which a CPU target must not see).
      settings: { 'memlens.python': repoPython(), 'memlens.traceTimeout': 600 },
    });
  } finally {
    if (saved === undefined) delete process.env.MEMLENS_WARM_WORKER;
    else process.env.MEMLENS_WARM_WORKER = saved;
  }
  const runs: Timing[] = [];
  let readyMs = 0;
  let activation = { activateMs: NaN, serverReadyMs: NaN };
  try {
    const gptLine = readFileSync(path.join(examplesDir, 'gpt/model.py'), 'utf8').split('\n').findIndex((l) => /^class GPT\b/.test(l)) + 1;
    const t0 = performance.now();
    await session.step('open', (wb) => wb.openFile('model.py'));
    await session.step('line', (wb) => wb.goToLine(gptLine));
    await session.step('ready', (wb) => wb.waitForCodeLens('Trace Memory'));
    readyMs = performance.now() - t0;
    const log = logText(session);
    activation = {
      activateMs: Number(/activated in (\d+) ms/.exec(log)?.[1] ?? NaN),
      serverReadyMs: Number(/server ready in (\d+) ms/.exec(log)?.[1] ?? NaN),
    };
    await new Promise((r) => setTimeout(r, SETTLE_MS));
    for (let i = 0; i < RUNS; i++) {
      await session.step(`trace-${i}`, async (wb) => {
        await wb.runCommand('Memlens: Trace Memory');
        await wb.waitForNotification(/Tracing GPT/);
        await wb.waitForNoNotification(/Tracing GPT/, timeouts.trace);
      });
      const deadline = Date.now() + timeouts.ui;
      while (timings(logText(session)).length <= i) {
        if (Date.now() > deadline) throw new Error(`no timing line for run ${i + 1} in the log`);
        await new Promise((r) => setTimeout(r, 200));
      }
      runs.push(timings(logText(session))[i]!);
    }
  } finally {
    await session.close();
  }

  const med = (k: keyof Timing): number => median(runs.map((r) => r[k]));
  return {
    activation,
    openToReadyMs: Math.round(readyMs),
    runs,
    median: { serverMs: med('serverMs'), workerStartMs: med('workerStartMs'), traceMs: med('traceMs'), paintMs: med('paintMs'), totalMs: med('totalMs') },
  };
}

function printRuns(title: string, r: SessionResult): void {
  console.log(`\n  ${title}, ${RUNS} runs (ms):`);
  console.log('    run   server  worker-start   trace   paint   total');
  r.runs.forEach((t, i) =>
    console.log(`    ${String(i + 1).padEnd(5)} ${String(t.serverMs).padStart(6)} ${String(t.workerStartMs).padStart(13)} ${String(t.traceMs).padStart(7)} ${String(t.paintMs).padStart(7)} ${String(t.totalMs).padStart(7)}`),
  );
  const m = r.median;
  console.log(`    med.  ${String(m.serverMs).padStart(6)} ${String(m.workerStartMs).padStart(13)} ${String(m.traceMs).padStart(7)} ${String(m.paintMs).padStart(7)} ${String(m.totalMs).padStart(7)}`);
}

async function main(): Promise<void> {
  const vsix = resolveVsix();
  const sizes = {
    'dist/extension.js': size(path.join(repoRoot, 'dist/extension.js')),
    'dist/webview.js': size(path.join(repoRoot, 'dist/webview.js')),
    'dist/webview.css': size(path.join(repoRoot, 'dist/webview.css')),
    '.vsix': { bytes: statSync(vsix).size, gzip: statSync(vsix).size },
  };
  const requireMs = requireTimeMs();
  const cold = await measure(false);
  const warm = await measure(true);
  const result = {
    date: new Date().toISOString().slice(0, 10),
    machine: `${os.cpus().length} vCPU, ${Math.round(os.totalmem() / 2 ** 30)} GiB, load ${os.loadavg()[0]!.toFixed(1)}`,
    sizes,
    requireMs,
    settleMs: SETTLE_MS,
    cold,
    warm,
    warmOverCold: warm.median.totalMs / cold.median.totalMs,
  };
  const dir = path.join(repoRoot, 'bench/results');
  mkdirSync(dir, { recursive: true });
  writeFileSync(path.join(dir, 'extension.json'), `${JSON.stringify(result, null, 2)}\n`);

  const kib = (b: number): string => `${(b / 1024).toFixed(1)} KiB`;
  console.log(`\nTorch Memory Lens extension benchmark (${result.machine})\n`);
  for (const [name, s] of Object.entries(sizes)) console.log(`  ${name.padEnd(18)} ${kib(s.bytes).padStart(10)}  (gzip ${kib(s.gzip)})`);
  console.log(`  require(dist/extension.js)   ${requireMs.toFixed(1)} ms (plain Node, median of 5)`);
  console.log(`  activate()                   ${warm.activation.activateMs} ms`);
  console.log(`  server ready after start     ${warm.activation.serverReadyMs} ms (probe + python -m memlens.server + initialize)`);
  console.log(`  open model.py -> CodeLens    ${warm.openToReadyMs} ms`);
  printRuns('Trace Memory -> painted annotations, cold workers (MEMLENS_WARM_WORKER=0)', cold);
  printRuns('Trace Memory -> painted annotations, warm worker (the default)', warm);
  console.log(`\n  warm / cold (median totals): ${result.warmOverCold.toFixed(2)}`);
  console.log(`\n  written: ${path.relative(repoRoot, path.join(dir, 'extension.json'))}`);
  if (!existsSync(path.join(dir, 'extension.json'))) process.exitCode = 1;
}

main().catch((e: unknown) => {
  console.error(e);
  process.exit(1);
});
