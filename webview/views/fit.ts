// Fit: what a search (`memlens fit`, the editor's Find What Fits) found. The frontier (the
// configurations that fit, in the order the server sorted them) and the ones that do not, each
// with its reason; one column per axis, then GPUs, the worst rank's peak, reserved memory and
// headroom. Every number is the server's; this view only formats them.
import type { FitReport, FitRow } from '../../common/protocol';
import { el, replace } from '../dom';
import { formatBytes, formatCount } from '../data/format';

export interface FitActions {
  /** Shows a traced point's snapshot (a memory panel in VS Code; copies the path elsewhere). */
  openSnapshot(path: string): void;
}

const VERDICT_TEXT: Record<string, string> = { fits: 'fits', oom: 'out of memory', error: 'error' };

function bytesCell(bytes: number | null): HTMLElement {
  if (bytes === null) return el('td', { class: 'num muted' }, '–');
  return el('td', { class: 'num', 'data-bytes': bytes }, formatBytes(bytes));
}

export function renderFit(root: HTMLElement, report: FitReport, actions: FitActions): void {
  const c = report.counts;
  const summary = el(
    'header',
    { class: 'summary fit-summary', id: 'fit-summary' },
    el('h2', null, `What fits: ${report.target}`),
    el(
      'p',
      null,
      el('span', { id: 'fit-device', 'data-bytes': report.deviceTotalBytes }, `${report.device} (${formatBytes(report.deviceTotalBytes)})`),
      ` · ${formatCount(c.fits)} of ${formatCount(c.points)} configurations fit · `,
      el('span', { id: 'fit-counts', class: 'muted' }, `${c.traced} traced, ${c.resumed} from the run folder, ${c.pruned} pruned, ${c.implied} implied`),
      report.interrupted ? el('strong', { class: 'warning' }, ' · interrupted: run the same search again to resume') : null,
    ),
    el('p', { class: 'muted', id: 'fit-run-dir', title: report.runDir }, `Run folder: ${report.runDir}`),
  );
  const tabs = el('vscode-tabs', { id: 'fit-tabs', 'selected-index': report.frontier.length ? 0 : 1 });
  tabs.append(
    el('vscode-tab-header', { slot: 'header', 'data-fit-tab': 'fits' }, `Fits (${report.frontier.length})`),
    el('vscode-tab-panel', null, frontierTable(report, actions)),
    el('vscode-tab-header', { slot: 'header', 'data-fit-tab': 'excluded' }, `Does not fit (${report.excluded.length})`),
    el('vscode-tab-panel', null, excludedTable(report, actions)),
  );
  replace(root, summary, tabs);
}

function axisHeaders(report: FitReport): HTMLElement[] {
  return report.axes.map((a) => el('th', { title: `${a.target} (memory ${a.direction === 'none' ? 'not ordered' : `goes ${a.direction} as it grows`})` }, a.name));
}

function axisCells(row: FitRow): HTMLElement[] {
  return row.values.map((v) => el('td', null, v));
}

function openButton(row: FitRow, actions: FitActions): HTMLElement | null {
  if (!row.snapshot) return null;
  const path = row.snapshot;
  const button = el('vscode-button', { secondary: true, class: 'fit-open', title: path }, 'Snapshot');
  button.addEventListener('click', () => actions.openSnapshot(path));
  return button;
}

function frontierTable(report: FitReport, actions: FitActions): HTMLElement {
  if (!report.frontier.length) return el('p', { class: 'empty', id: 'fit-none' }, `No configuration fits on ${report.device}.`);
  const head = el('tr', null, ...axisHeaders(report), el('th', { class: 'num' }, 'GPUs'), el('th', { class: 'num' }, 'worst rank'), el('th', { class: 'num' }, 'peak'), el('th', { class: 'num' }, 'reserved'), el('th', { class: 'num' }, 'headroom'), el('th', null, 'how known'), el('th', null, ''));
  const body = el('tbody');
  for (const row of report.frontier) {
    body.append(
      el(
        'tr',
        { class: 'fit-row', 'data-key': row.key, 'data-verdict': row.verdict ?? 'none', title: row.reason },
        ...axisCells(row),
        el('td', { class: 'num' }, row.gpus),
        el('td', { class: 'num' }, row.worstRank ?? '–'),
        bytesCell(row.peakBytes),
        bytesCell(row.reservedPeakBytes),
        bytesCell(row.headroomBytes),
        el('td', null, row.by ? `${row.source}: at most as much as ${row.by}` : row.source),
        el('td', null, openButton(row, actions)),
      ),
    );
  }
  return el('div', { class: 'table-scroll' }, el('table', { class: 'grid', id: 'fit-frontier' }, el('thead', null, head), body));
}

function excludedTable(report: FitReport, actions: FitActions): HTMLElement {
  if (!report.excluded.length) return el('p', { class: 'empty', id: 'fit-all' }, 'Every configuration fits.');
  // The reason first after the axes: a narrow panel scrolls the numbers, not the why.
  const head = el('tr', null, ...axisHeaders(report), el('th', null, 'verdict'), el('th', null, 'why'), el('th', { class: 'num' }, 'GPUs'), el('th', { class: 'num' }, 'peak'), el('th', { class: 'num' }, 'headroom'), el('th', null, ''));
  const body = el('tbody');
  for (const row of report.excluded) {
    body.append(
      el(
        'tr',
        { class: `fit-row verdict-${row.verdict ?? 'none'}`, 'data-key': row.key, 'data-verdict': row.verdict ?? 'none' },
        ...axisCells(row),
        el('td', null, row.verdict ? VERDICT_TEXT[row.verdict] : 'not traced'),
        el('td', { class: 'fit-reason' }, row.reason),
        el('td', { class: 'num' }, row.gpus),
        bytesCell(row.peakBytes),
        bytesCell(row.headroomBytes),
        el('td', null, openButton(row, actions)),
      ),
    );
  }
  return el('div', { class: 'table-scroll' }, el('table', { class: 'grid', id: 'fit-excluded' }, el('thead', null, head), body));
}
