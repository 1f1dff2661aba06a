// Compare: this snapshot (A) against a second one (B) — batch 8 against 16, rank 0 against 7:
// the peak, then per category, per phase and per module, each sorted by the size of the change.
import { compareSnapshots, type Delta } from '../data/compare';
import { categoryVariable } from '../data/colors';
import { formatBytes, formatDelta, formatRelative } from '../data/format';
import { isCategory } from '../data/categories';
import type { Snapshot } from '../../common/snapshot';
import type { Context } from '../context';
import { el, replace, swatch } from '../dom';

const MAX_MODULE_ROWS = 300;

export class CompareView {
  constructor(private readonly root: HTMLElement, private readonly ctx: () => Context) {}

  render(): void {
    const ctx = this.ctx();
    if (!ctx.compare) {
      replace(this.root, this.picker());
      return;
    }
    const a = ctx.snapshot;
    const b = ctx.compare;
    const c = compareSnapshots(a, b);

    const card = (label: string, s: Snapshot) =>
      el(
        'div',
        { class: 'compare-card' },
        el('div', { class: 'muted' }, label),
        el('div', { class: 'big', 'data-bytes': s.summary.peak_bytes }, formatBytes(s.summary.peak_bytes)),
        el('div', null, `${s.meta.target?.name ?? '(unnamed)'} ${(s.meta.target?.args ?? []).join(' ')}`),
        el('div', { class: 'muted small' }, `${s.meta.device.name} · rank ${s.meta.rank} of ${s.meta.world_size} · ${s.meta.created}`),
      );
    const deltaCard = el(
      'div',
      { class: 'compare-card delta' },
      el('div', { class: 'muted' }, 'B − A'),
      el('div', { class: `big ${sign(c.peak.delta)}`, id: 'compare-peak-delta', 'data-bytes': c.peak.delta }, formatDelta(c.peak.delta)),
      el('div', null, formatRelative(c.peak.a ?? 0, c.peak.b ?? 0)),
    );
    const remove = el('vscode-button', { secondary: true, id: 'compare-remove' }, 'Remove B');
    remove.addEventListener('click', () => ctx.clearCompare());
    const cards = el('div', { class: 'compare-cards' }, card('A · this snapshot', a), card('B', b), deltaCard, remove);

    const meta = c.meta.length
      ? table(
          'compare-meta',
          ['what differs', 'A', 'B'],
          c.meta.map((m) => el('tr', null, el('td', null, m.field), el('td', { class: 'mono' }, m.a), el('td', { class: 'mono' }, m.b))),
        )
      : el('p', { class: 'muted' }, 'Both snapshots were made with the same settings.');

    const scaleOf = (rows: Delta[]) => Math.max(1, ...rows.map((r) => Math.abs(r.delta)));
    const catScale = scaleOf(c.categoriesAtPeak);
    const categories = table(
      'compare-categories',
      ['category at the peak', 'A', 'B', 'change', '', ''],
      c.categoriesAtPeak
        .filter((d) => d.a || d.b)
        .map((d) =>
          el(
            'tr',
            { 'data-key': d.key, 'data-delta': d.delta },
            el('td', null, isCategory(d.key) ? swatch(categoryVariable(d.key)) : null, d.label),
            numCell(d.a),
            numCell(d.b),
            el('td', { class: `num strong ${sign(d.delta)}`, 'data-bytes': d.delta }, formatDelta(d.delta)),
            el('td', { class: 'num muted' }, formatRelative(d.a ?? 0, d.b ?? 0)),
            el('td', { class: 'bar-cell' }, deltaBar(d.delta, catScale)),
          ),
        ),
    );

    const phaseScale = Math.max(1, ...c.phases.map((p) => Math.abs(p.peak.delta)));
    const phases = table(
      'compare-phases',
      ['phase', 'device', 'peak A', 'peak B', 'change', 'before Δ', 'after Δ', ''],
      c.phases.map((p) =>
        el(
          'tr',
          { 'data-key': p.key, 'data-delta': p.peak.delta },
          el('td', null, p.name),
          el('td', { class: 'muted' }, p.device),
          numCell(p.peak.a),
          numCell(p.peak.b),
          el('td', { class: `num strong ${sign(p.peak.delta)}`, 'data-bytes': p.peak.delta }, formatDelta(p.peak.delta)),
          el('td', { class: `num ${sign(p.before.delta)}` }, formatDelta(p.before.delta)),
          el('td', { class: `num ${sign(p.after.delta)}` }, formatDelta(p.after.delta)),
          el('td', { class: 'bar-cell' }, deltaBar(p.peak.delta, phaseScale)),
        ),
      ),
    );

    const merged = ctx.state.compare.merged;
    const modRows = (merged ? c.groups : c.modules).filter((d) => d.delta !== 0 || d.a === null || d.b === null);
    const modScale = scaleOf(modRows);
    const mergeBox = el('vscode-checkbox', { id: 'compare-merged', checked: merged }, 'Merge repeated layers');
    mergeBox.addEventListener('change', () => {
      const on = (mergeBox as unknown as { checked: boolean }).checked;
      ctx.update((x) => (x.compare.merged = on), ['compare']);
    });
    const modules = table(
      'compare-modules',
      ['module (bytes at the peak)', '× A / B', 'A', 'B', 'change', '', ''],
      modRows.slice(0, MAX_MODULE_ROWS).map((d) =>
        el(
          'tr',
          { 'data-key': d.key, 'data-delta': d.delta },
          el('td', { class: 'mono' }, d.label),
          el('td', { class: 'num muted' }, d.countA === d.countB ? (d.countA > 1 ? `×${d.countA}` : '') : `×${d.countA} / ×${d.countB}`),
          numCell(d.a),
          numCell(d.b),
          el('td', { class: `num strong ${sign(d.delta)}`, 'data-bytes': d.delta }, formatDelta(d.delta)),
          el('td', { class: 'num muted' }, d.a === null ? 'only in B' : d.b === null ? 'only in A' : formatRelative(d.a, d.b)),
          el('td', { class: 'bar-cell' }, deltaBar(d.delta, modScale)),
        ),
      ),
    );

    replace(
      this.root,
      cards,
      el('h3', null, 'Settings'),
      meta,
      el('h3', null, 'Categories'),
      categories,
      el('h3', null, 'Phases'),
      phases,
      el('div', { class: 'section-head' }, el('h3', null, 'Modules'), mergeBox, el('span', { class: 'muted' }, modRows.length > MAX_MODULE_ROWS ? `largest ${MAX_MODULE_ROWS} changes of ${modRows.length}` : `${modRows.length} changed`)),
      modules,
    );
  }

  private picker(): HTMLElement {
    const ctx = this.ctx();
    const input = el('input', { type: 'file', accept: '.json,application/json', id: 'compare-file' }) as HTMLInputElement;
    input.addEventListener('change', () => {
      const file = input.files?.[0];
      if (!file) return;
      file.text().then(
        (text) => ctx.loadCompare(text, file.name),
        (e: unknown) => ctx.notify(`Could not read ${file.name}: ${String(e)}`),
      );
    });
    const drop = el(
      'label',
      { class: 'drop-zone', for: 'compare-file' },
      el('strong', null, 'Compare with another snapshot'),
      el('span', { class: 'muted' }, 'Choose or drop a memlens snapshot (.json): for example the same script with twice the batch, or another rank.'),
      input,
    );
    drop.addEventListener('dragover', (e) => {
      e.preventDefault();
      drop.classList.add('over');
    });
    drop.addEventListener('dragleave', () => drop.classList.remove('over'));
    drop.addEventListener('drop', (e) => {
      e.preventDefault();
      drop.classList.remove('over');
      const file = e.dataTransfer?.files[0];
      if (file) void file.text().then((text) => ctx.loadCompare(text, file.name));
    });
    const parts: (HTMLElement | null)[] = [drop];
    if (ctx.pickCompare) {
      const pick = el('vscode-button', { id: 'compare-pick' }, 'Choose a snapshot…');
      pick.addEventListener('click', () => ctx.pickCompare?.());
      parts.unshift(pick);
    }
    if (ctx.compareError) parts.push(el('div', { class: 'error-box', id: 'compare-error', role: 'alert' }, ctx.compareError));
    return el('div', { class: 'compare-empty' }, ...parts);
  }

  dispose(): void {}
}

function sign(delta: number): string {
  return delta > 0 ? 'up' : delta < 0 ? 'down' : '';
}

function numCell(v: number | null): HTMLElement {
  return el('td', { class: v === null ? 'num muted' : 'num', 'data-bytes': v }, v === null ? '–' : formatBytes(v));
}

function table(id: string, headers: string[], rows: HTMLElement[]): HTMLElement {
  return el(
    'table',
    { class: 'grid', id },
    el('thead', null, el('tr', null, ...headers.map((h, i) => el('th', { class: i > 0 && h && !/^(device|what differs|A|B)$/.test(h) ? 'num' : null }, h)))),
    el('tbody', null, ...rows),
  );
}

/** A bar from the middle: right and warm for growth, left and cool for savings. */
function deltaBar(delta: number, scale: number): HTMLElement {
  const bar = el('span', { class: 'delta-bar' });
  const fill = el('span', { class: `fill ${sign(delta)}` });
  const w = (50 * Math.abs(delta)) / scale;
  fill.style.setProperty('width', `${w}%`);
  fill.style.setProperty('left', delta >= 0 ? '50%' : `${50 - w}%`);
  bar.appendChild(fill);
  return bar;
}
