// The commands (category "Memlens" in the palette) and the Snapshots view's context actions.
// Each is a thin handler over Ctx; a failure is logged and shown, never thrown into VS Code
// (an exception there is a modal dialog).
import * as path from 'node:path';
import * as vscode from 'vscode';
import { ExecuteCommandRequest, type LanguageClient } from 'vscode-languageclient/node';
import { uriKey } from './annotations';
import { traceParams, type TraceOptions } from './config';
import type { Ctx } from './ctx';
import { formatBytes } from '../common/format';
import { fitParams, flagPick, parseSpace, spaceOfFlags } from './fitSpace';
import { groupTargets, targetAtLine } from './grouping';
import * as P from '../common/protocol';
import { FitPanel } from './panel/fitPanel';
import { openSettings, updateSetting } from './settings';
import { isSnapshotPath } from './snapshotFile';
import { nodePath, type Node } from './snapshotTree';
import { requireTrust } from './trust';
import { traceItems } from './traceChoice';

export function registerCommands(ctx: Ctx): void {
  const register = (id: string, fn: (...args: never[]) => unknown): void => {
    ctx.subscriptions.push(
      vscode.commands.registerCommand(id, async (...args: never[]) => {
        try {
          return await fn(...args);
        } catch (e) {
          const why = e instanceof Error ? e.message : String(e);
          ctx.log.error(`${id}: ${why}`);
          void vscode.window.showErrorMessage(`Memlens: ${why}`);
          return undefined;
        }
      }),
    );
  };

  register('memlens.traceMemory', (arg?: unknown) => traceMemory(ctx, arg, {}));
  register('memlens.traceAllRanks', (arg?: unknown) => traceMemory(ctx, arg, { allRanks: true }));
  register('memlens.findWhatFits', (arg?: unknown) => findWhatFits(ctx, arg));
  register('memlens.openMemoryReport', (arg?: unknown) => openReport(ctx, arg));
  register('memlens.compareSnapshots', () => compareSnapshots(ctx));
  register('memlens.pickTrace', () => pickTrace(ctx));
  register('memlens.selectDevice', () => selectDevice(ctx));
  register('memlens.toggleAnnotations', () => {
    const shown = ctx.toggleAnnotations();
    vscode.window.setStatusBarMessage(shown ? 'Memlens: annotations shown' : 'Memlens: annotations hidden', 3000);
  });
  register('memlens.restartServer', async () => {
    if (!requireTrust('Restarting the language server')) return;
    await ctx.restart();
  });
  register('memlens.showLog', () => ctx.log.show());
  register('memlens.selectInterpreter', async () => {
    if (await ctx.interpreters.select(ctx.python)) await ctx.restart();
  });
  register('memlens.installMemlens', async () => {
    if (!requireTrust('Installing memlens')) return;
    await ctx.installMemlens();
  });
  register('memlens.snapshots.refresh', () => ctx.tree.refresh());
  register('memlens.snapshot.open', (node?: Node) => openReport(ctx, nodePath(node)));
  register('memlens.snapshot.compareWith', async (node?: Node) => {
    const first = nodePath(node) ?? (await ctx.pickSnapshot('Compare snapshots: choose the first'));
    if (!first) return;
    const second = await ctx.pickSnapshot(`Compare ${path.basename(path.dirname(first))} with…`, first);
    if (second) ctx.showReport(first, second);
  });
  register('memlens.snapshot.reveal', async (node?: Node) => {
    const file = nodePath(node);
    if (file) await vscode.commands.executeCommand('revealInExplorer', vscode.Uri.file(file));
  });
  register('memlens.snapshot.delete', (node?: Node) => deleteSnapshot(ctx, nodePath(node)));
}

// -- which trace the editors show ------------------------------------------------------------

/** Memlens: Choose Trace: the traces covering the active file (else the workspace's); the
 * server annotates with the one chosen, for the rest of the session. */
async function pickTrace(ctx: Ctx): Promise<void> {
  const c = await client(ctx);
  if (!c) return;
  const editor = vscode.window.activeTextEditor;
  const params: P.DocumentTracesParams = editor ? { uri: c.code2ProtocolConverter.asUri(editor.document.uri) } : {};
  const result = await c.sendRequest<P.DocumentTracesResult>(P.REQ_DOCUMENT_TRACES, params);
  if (result.traces.length === 0) {
    void vscode.window.showInformationMessage('Memlens: no trace covers this file yet. Run Memlens: Trace Memory first.');
    return;
  }
  const picked = await vscode.window.showQuickPick(
    traceItems(result, (p) => vscode.workspace.asRelativePath(p)),
    { title: 'Choose Trace: the trace the editors show', matchOnDescription: true, matchOnDetail: true },
  );
  if (!picked) return;
  await ctx.chooseTrace(picked.snapshot);
}

// -- tracing ---------------------------------------------------------------------------------

async function client(ctx: Ctx): Promise<LanguageClient | undefined> {
  const c = await ctx.readyClient();
  if (c) return c;
  const choice = await vscode.window.showErrorMessage(
    'Memlens: the language server is not running, so nothing can be traced. The log says why.',
    'Show Log',
    'Select Interpreter',
    'Restart Server',
  );
  if (choice === 'Show Log') ctx.log.show();
  if (choice === 'Select Interpreter') await vscode.commands.executeCommand('memlens.selectInterpreter');
  if (choice === 'Restart Server') await ctx.restart();
  return undefined;
}

/** Trace Memory / Trace All Ranks. `arg`: a target id ({targetId}), a file (explorer or editor
 * menus), or nothing (the target under the cursor, else a pick). Resolves with the result. */
async function traceMemory(ctx: Ctx, arg: unknown, options: TraceOptions): Promise<P.TraceResult | undefined> {
  if (!requireTrust(options.allRanks ? 'Trace All Ranks' : 'Trace Memory')) return undefined;
  const c = await client(ctx);
  if (!c) return undefined;
  const target = await chooseTarget(c, arg);
  if (!target) return undefined;
  if (options.allRanks) {
    const world = ctx.config().worldSize ?? target.worldSize ?? (await askWorldSize(target));
    if (!world) return undefined;
    options = { ...options, worldSize: world };
  }
  const params = traceParams(target.id, ctx.config(), options);
  ctx.log.info(`Trace Memory: ${target.name} ${JSON.stringify(params)}`);
  ctx.timer.begin(target.id);
  // The reply is the result, sent once: the server notifies memlens/traceFinished only for
  // traces no request asked for.
  const result = (await c.sendRequest(ExecuteCommandRequest.type, { command: P.CMD_TRACE, arguments: [params] })) as P.TraceResult;
  ctx.onTraceFinished(result);
  return result;
}

/** What Trace Memory (or, with `jobsOnly`, Find What Fits: no model classes) runs on. */
async function chooseTarget(c: LanguageClient, arg: unknown, jobsOnly = false): Promise<P.Target | undefined> {
  const { targets } = await c.sendRequest<P.TargetsResult>(P.REQ_TARGETS, {} satisfies P.TargetsParams);
  const all = targets.filter((t) => !jobsOnly || t.kind !== 'model').map((t) => ({ ...t, uri: uriKey(t.uri) }));
  if (isTargetArg(arg)) {
    const found = all.find((t) => t.id === arg.targetId);
    if (found) return found;
  }
  const editor = vscode.window.activeTextEditor;
  if (arg instanceof vscode.Uri) {
    const here = all.filter((t) => t.uri === uriKey(arg));
    if (here.length === 1) return here[0];
    if (here.length > 1) return pickTarget(here, uriKey(arg), jobsOnly);
  } else if (editor) {
    const under = targetAtLine(all, uriKey(editor.document.uri), editor.selection.active.line);
    if (under) return under;
  }
  if (all.length === 0) {
    const docs = 'How targets are found';
    const choice = await vscode.window.showInformationMessage(
      'Memlens found nothing to trace in this workspace. A model class needs a recipe (memlens.toml, or [tool.memlens] in pyproject.toml); training scripts, launch configurations and torchrun command lines are found by themselves.',
      docs,
    );
    if (choice === docs) void openSettings();
    return undefined;
  }
  return pickTarget(all, editor ? uriKey(editor.document.uri) : undefined, jobsOnly);
}

function isTargetArg(arg: unknown): arg is { targetId: string } {
  return typeof arg === 'object' && arg !== null && typeof (arg as { targetId?: unknown }).targetId === 'string';
}

type TargetItem = vscode.QuickPickItem & { target?: P.Target };

async function pickTarget(targets: P.Target[], activeUri: string | undefined, jobsOnly = false): Promise<P.Target | undefined> {
  const items: TargetItem[] = [];
  for (const group of groupTargets(targets, activeUri)) {
    items.push({ label: group.label, kind: vscode.QuickPickItemKind.Separator });
    for (const t of group.targets) {
      const peak = t.snapshot ? ` · last peak ${formatBytes(t.snapshot.peakBytes)}` : '';
      items.push({
        label: t.name,
        description: `${vscode.workspace.asRelativePath(vscode.Uri.parse(t.uri))}${t.tracing ? ' · tracing…' : ''}`,
        detail: `${t.detail}${peak}`,
        target: t,
      });
    }
  }
  const picked = await vscode.window.showQuickPick(items, {
    title: jobsOnly ? 'Find What Fits: the job to search' : 'Trace Memory: what to trace',
    placeHolder: jobsOnly ? 'A training script, launch configuration or torchrun command line' : 'A model class, training script, launch configuration or torchrun command line',
    matchOnDescription: true,
    matchOnDetail: true,
  });
  return picked?.target;
}

async function askWorldSize(target: P.Target): Promise<number | undefined> {
  const text = await vscode.window.showInputBox({
    title: `Trace All Ranks of ${target.name}`,
    prompt: 'How many processes (ranks) the job runs with. Set memlens.worldSize to stop being asked.',
    value: '8',
    validateInput: (v) => (/^\d+$/.test(v.trim()) && Number(v) >= 2 ? undefined : 'A whole number, 2 or more'),
  });
  return text ? Number(text.trim()) : undefined;
}

// -- what fits --------------------------------------------------------------------------------

/** Find What Fits: a search over the space of [tool.memlens.fit] (asked for when the workspace
 * has none), its progress a cancellable notification (the server's $/progress), its result in a
 * Fit panel. Resolves with the server's FitResult. */
async function findWhatFits(ctx: Ctx, arg: unknown): Promise<P.FitResult | undefined> {
  if (!requireTrust('Find What Fits')) return undefined;
  const c = await client(ctx);
  if (!c) return undefined;
  const target = await chooseTarget(c, arg, true);
  if (!target) return undefined;
  const known = await c.sendRequest<P.FitSpaceResult>(P.REQ_FIT_SPACE, { targetId: target.id } satisfies P.FitSpaceParams);
  let value = '';
  if (known.flags.length > 0) {
    // The script's own integer flags, offered as axes; the picked ones fill the box below.
    // Where the workspace has a [fit] table, that is the space: nothing is picked for the user
    // (a picked flag would replace the table's axis of the same name).
    const picked = await vscode.window.showQuickPick(
      known.flags.map((f) => ({ ...flagPick(f), flag: f, picked: !known.source && f.axis === 'micro-batch' })),
      { title: `Find What Fits: ${target.name} — the script's flags to vary`, placeHolder: 'Pick the flags to search over (values can be edited next)', canPickMany: true, ignoreFocusOut: true, matchOnDescription: true },
    );
    if (picked === undefined) return undefined;
    value = spaceOfFlags(picked.map((p) => p.flag));
  }
  const text = await vscode.window.showInputBox({
    value,
    title: `Find What Fits: ${target.name}`,
    prompt: known.source
      ? `The space of ${known.source} (${known.keys.join(', ')}); options here add to it, axis by axis. Enter to search it as it is.`
      : 'The space to search, as memlens fit takes it (this workspace has no [tool.memlens.fit]): built-in axes (--gpus, --micro-batch, --seq, --recompute, --tp, --pp, --zero, --fsdp, --fp8) with the script flag each sets (--axis NAME=--flag), --arg "--flag=V,V", --env "VAR=V,V".',
    placeHolder: '--micro-batch 1,2,4,8 --axis micro-batch=--batch-size',
    ignoreFocusOut: true,
    validateInput: (v) => {
      if (known.source && !v.trim()) return undefined;
      const parsed = parseSpace(v);
      return parsed.ok ? undefined : parsed.error;
    },
  });
  if (text === undefined) return undefined;
  const parsed = parseSpace(text);
  const space = parsed.ok ? parsed.space : [];
  const params = fitParams(target.id, ctx.config(), space);
  ctx.log.info(`Find What Fits: ${target.name} ${JSON.stringify(params)}`);
  const result = (await c.sendRequest(ExecuteCommandRequest.type, { command: P.CMD_FIT, arguments: [params] })) as P.FitResult;
  ctx.tree.refreshSoon(); // the search's run folder: one node of the Memory view
  if (result.status === 'ok' && result.fit) {
    FitPanel.show(ctx.extension, target.id, result.fit, ctx.log);
  } else if (result.status === 'failed' || result.status === 'timeout') {
    void vscode.window.showErrorMessage(`Memlens: the search for ${target.name} ${result.status === 'timeout' ? 'timed out' : 'failed'}: ${result.error?.message ?? 'no reason given'}`);
  } else {
    vscode.window.setStatusBarMessage(`Memlens: the search for ${target.name} was ${result.status}; the points it finished are kept`, 5000);
  }
  return result;
}

// -- reports ---------------------------------------------------------------------------------

/** The report of: the given snapshot path, else the snapshot open in the editor, else the
 * active document's snapshot, else the last one shown in the status bar, else one the user
 * picks. */
async function openReport(ctx: Ctx, arg: unknown): Promise<void> {
  let file = typeof arg === 'string' ? arg : arg instanceof vscode.Uri ? arg.fsPath : undefined;
  const editor = vscode.window.activeTextEditor;
  if (editor?.document.uri.scheme === 'file' && isSnapshotPath(editor.document.uri.fsPath)) file ??= editor.document.uri.fsPath;
  file ??= (editor && ctx.painter.snapshotOf(editor.document.uri)?.path) ?? ctx.status.current?.path;
  file ??= await ctx.pickSnapshot('Open Memory Report');
  if (file) ctx.showReport(file);
}

async function compareSnapshots(ctx: Ctx): Promise<void> {
  const first = await ctx.pickSnapshot('Compare snapshots: choose the first');
  if (!first) return;
  const second = await ctx.pickSnapshot('…and the snapshot to compare it with', first);
  if (second) ctx.showReport(first, second);
}

async function deleteSnapshot(ctx: Ctx, file: string | undefined): Promise<void> {
  if (!file) return;
  const ok = 'Delete';
  const choice = await vscode.window.showWarningMessage(
    `Delete the snapshot ${vscode.workspace.asRelativePath(file)}?`,
    { modal: true, detail: 'It goes to the trash where the system has one.' },
    ok,
  );
  if (choice !== ok) return;
  const uri = vscode.Uri.file(file);
  try {
    await vscode.workspace.fs.delete(uri, { useTrash: true });
  } catch {
    await vscode.workspace.fs.delete(uri, { useTrash: false });
  }
  await ctx.tree.refresh();
}

// -- devices ---------------------------------------------------------------------------------

interface DeviceChoice {
  name: string;
  description: string;
}

/** The devices the `memlens.device` setting lists (package.json, kept equal to the engine's
 * table by a unit test). */
function devices(ctx: Ctx): DeviceChoice[] {
  const sections = (ctx.extension.extension.packageJSON as { contributes?: { configuration?: unknown } }).contributes?.configuration;
  for (const section of Array.isArray(sections) ? sections : [sections]) {
    const prop = (section as { properties?: Record<string, { enum?: string[]; enumDescriptions?: string[] }> })?.properties?.['memlens.device'];
    if (prop?.enum) return prop.enum.map((name, i) => ({ name, description: prop.enumDescriptions?.[i] ?? '' }));
  }
  return [];
}

async function selectDevice(ctx: Ctx): Promise<void> {
  const current = ctx.config().device;
  const picked = await vscode.window.showQuickPick(
    devices(ctx).map((d) => ({
      label: d.name === current ? `$(check) ${d.name}` : d.name,
      description: d.description,
      name: d.name,
    })),
    {
      title: 'Memlens: the device to estimate memory for',
      placeHolder: `Now: ${current || "a recipe's device, else h100-80gb"}`,
      matchOnDescription: true,
    },
  );
  if (!picked || picked.name === current) return;
  await updateSetting('device', picked.name);
  // Said where it is kept: a workspace's .vscode/settings.json is a file the user may commit.
  const where = vscode.workspace.workspaceFolders?.length
    ? "this workspace's settings (.vscode/settings.json)"
    : 'your user settings';
  vscode.window.setStatusBarMessage(`Memlens: traces now target ${picked.name}, kept in ${where}`, 8000);
}
