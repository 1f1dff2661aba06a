// Table: every tensor alive at the peak — sortable, filterable, virtualised — with selectable
// rows and the running total of the selection: "what if I removed these".
import { CATEGORY_LABELS } from '../data/categories';
import { categoryVariable } from '../data/colors';
import { formatBytes, formatCount, formatShare } from '../data/format';
import { CATEGORIES } from '../../common/snapshot';
import { TENSOR_COLUMNS, filterTensors, selectionTotal, sortTensors, type TensorColumn } from '../data/tensors';
import type { Context } from '../context';
import { el, replace, swatch } from '../dom';
import { VirtualRows } from './virtualRows';

const ROW_HEIGHT = 24;
const HEADERS: Record<TensorColumn, string> = {
  bytes: 'bytes',
  shape: 'shape',
  dtype: 'dtype',
  category: 'category',
  module: 'module',
  phase: 'phase',
  op: 'op',
};

export class TableView {
  private rows: number[] = [];
  private selected = new Set<number>(); // tensor indices
  private anchor: number | null = null; // position in `rows` of the last checkbox click
  private list: VirtualRows | null = null;
  private queryTimer = 0;

  constructor(private readonly root: HTMLElement, private readonly ctx: () => Context) {}

  render(): void {
    const ctx = this.ctx();
    const s = ctx.snapshot;
    const st = ctx.state.table;
    const byId = ctx.derived.byId;
    this.selected = new Set(st.selected.map((id) => byId.get(id)).filter((i): i is number => i !== undefined));

    // Toolbar: search, category, chips for the module and phase filters, counts.
    const search = el('vscode-textfield', { id: 'table-search', placeholder: 'Filter by module, op, dtype, shape…', title: 'Every word must match', value: st.query });
    search.addEventListener('input', () => {
      window.clearTimeout(this.queryTimer);
      this.queryTimer = window.setTimeout(() => {
        const q = (search as unknown as { value: string }).value;
        ctx.update((x) => (x.table.query = q), []);
        this.refilter();
      }, 120);
    });
    const category = el(
      'vscode-single-select',
      { id: 'table-category' },
      el('vscode-option', { value: '', selected: st.category === null }, 'All categories'),
      ...CATEGORIES.filter((c) => s.summary.categories_at_peak[c] > 0).map((c) => el('vscode-option', { value: c, selected: st.category === c }, CATEGORY_LABELS[c])),
    );
    category.addEventListener('change', () => {
      const v = (category as unknown as { value: string }).value;
      ctx.update((x) => (x.table.category = (CATEGORIES as readonly string[]).includes(v) ? (v as typeof x.table.category) : null), []);
      this.refilter();
    });
    const chips = el('span', { class: 'filters' });
    if (st.module) {
      const chip = el('span', { class: 'chip', id: 'module-filter' }, el('span', { class: 'muted' }, 'Module'), el('span', null, st.module.label));
      const x = el('button', { class: 'chip-clear', 'aria-label': 'Clear the module filter', title: 'All modules' }, '×');
      x.addEventListener('click', () => ctx.update((y) => (y.table.module = null), ['table']));
      chip.appendChild(x);
      chips.appendChild(chip);
    }
    const phase = ctx.state.phase !== null ? s.phases[ctx.state.phase] : undefined;
    if (phase) {
      const chip = el('span', { class: 'chip' }, el('span', { class: 'muted' }, 'Phase'), el('span', null, phase.name));
      const x = el('button', { class: 'chip-clear', 'aria-label': 'Clear the phase filter', title: 'All phases' }, '×');
      x.addEventListener('click', () => ctx.setPhase(null));
      chip.appendChild(x);
      chips.appendChild(chip);
    }
    const counts = el('span', { class: 'muted spacer-left', id: 'table-count' });
    const toolbar = el('div', { class: 'toolbar' }, search, category, chips, counts);

    // Selection bar.
    const selectionBar = el('div', { class: 'selection-bar', id: 'selection-bar' });

    // Header row.
    const header = el('div', { class: 'trow thead', role: 'row' });
    const all = el('input', { type: 'checkbox', 'aria-label': 'Select every row shown', title: 'Select every row shown' }) as HTMLInputElement;
    all.addEventListener('change', () => {
      if (all.checked) for (const i of this.rows) this.selected.add(i);
      else for (const i of this.rows) this.selected.delete(i);
      this.selectionChanged();
    });
    header.appendChild(el('span', { class: 'cell check' }, all));
    for (const col of TENSOR_COLUMNS) {
      const active = st.sort.column === col;
      const cell = el(
        'span',
        {
          class: `cell col-${col}${col === 'bytes' ? ' num' : ''}${active ? ' sorted' : ''}`,
          role: 'columnheader',
          tabindex: 0,
          'data-column': col,
          'aria-sort': active ? (st.sort.direction === 'asc' ? 'ascending' : 'descending') : 'none',
        },
        HEADERS[col],
        active ? (st.sort.direction === 'asc' ? ' ▲' : ' ▼') : '',
      );
      const sort = () => {
        ctx.update((x) => {
          if (x.table.sort.column === col) x.table.sort.direction = x.table.sort.direction === 'asc' ? 'desc' : 'asc';
          else x.table.sort = { column: col, direction: col === 'bytes' ? 'desc' : 'asc' };
        }, ['table']);
      };
      cell.addEventListener('click', sort);
      cell.addEventListener('keydown', (e) => {
        if (e.key === 'Enter' || e.key === ' ') {
          e.preventDefault();
          sort();
        }
      });
      header.appendChild(cell);
    }

    const list = new VirtualRows({
      rowHeight: ROW_HEIGHT,
      createRow: () => this.createRow(),
      renderRow: (row, pos) => this.fillRow(row, pos),
    });
    this.list = list;
    const table = el('div', { class: 'vtable', id: 'tensor-table', role: 'grid' }, header, list.viewport);
    replace(this.root, toolbar, selectionBar, table);

    list.viewport.addEventListener('keydown', (e) => this.onKey(e));
    this.refilter();
    this.allBox = all;
    this.countsEl = counts;
    this.selectionEl = selectionBar;
    this.updateCounts();
    this.updateSelection();
  }

  private allBox: HTMLInputElement | null = null;
  private countsEl: HTMLElement | null = null;
  private selectionEl: HTMLElement | null = null;

  private refilter(): void {
    const ctx = this.ctx();
    const s = ctx.snapshot;
    const st = ctx.state.table;
    const filtered = filterTensors(s, ctx.derived.text, {
      query: st.query,
      category: st.category,
      phase: ctx.state.phase,
      modules: st.module ? new Set(st.module.modules) : null,
    });
    const natural = st.sort.column === 'bytes' && st.sort.direction === 'desc';
    // The snapshot lists tensors largest first: the default order needs no sort.
    this.rows = natural ? filtered : sortTensors(s, ctx.derived.text, filtered, st.sort.column, st.sort.direction);
    this.list?.setCount(this.rows.length);
    this.updateCounts();
    this.updateSelection();
  }

  private createRow(): HTMLElement {
    const row = el('div', { class: 'trow', role: 'row' });
    const box = el('input', { type: 'checkbox', tabindex: -1 }) as HTMLInputElement;
    row.appendChild(el('span', { class: 'cell check' }, box));
    for (const col of TENSOR_COLUMNS) row.appendChild(el('span', { class: `cell col-${col}${col === 'bytes' ? ' num' : ''}` }));
    box.addEventListener('click', (e) => {
      e.stopPropagation();
      this.toggle(Number(row.dataset['pos']), (e as MouseEvent).shiftKey);
    });
    row.addEventListener('click', () => this.focusRow(Number(row.dataset['pos'])));
    row.addEventListener('dblclick', () => {
      const i = this.rows[Number(row.dataset['pos'])];
      if (i !== undefined) this.ctx().showTensor(this.ctx().snapshot.tensors[i]!.id, true);
    });
    return row;
  }

  private fillRow(row: HTMLElement, pos: number): void {
    const ctx = this.ctx();
    const i = this.rows[pos]!;
    const t = ctx.snapshot.tensors[i]!;
    row.dataset['pos'] = String(pos);
    row.dataset['index'] = String(i);
    row.dataset['id'] = String(t.id);
    row.dataset['bytes'] = String(t.bytes);
    const cells = row.children;
    const selected = this.selected.has(i);
    row.classList.toggle('selected', selected);
    row.classList.toggle('focused', ctx.state.details.tensor === t.id);
    row.setAttribute('aria-selected', String(selected));
    (cells[0]!.firstChild as HTMLInputElement).checked = selected;
    cells[1]!.textContent = formatBytes(t.bytes);
    cells[1]!.setAttribute('title', `${formatCount(t.bytes)} bytes`);
    cells[2]!.textContent = ctx.derived.text.shape(i);
    cells[3]!.textContent = t.dtype;
    const cat = cells[4]!;
    cat.textContent = '';
    cat.appendChild(swatch(categoryVariable(t.category)));
    cat.appendChild(document.createTextNode(CATEGORY_LABELS[t.category]));
    const module = ctx.derived.text.module(i);
    cells[5]!.textContent = module;
    cells[5]!.setAttribute('title', module);
    cells[6]!.textContent = ctx.derived.text.phase(i);
    cells[7]!.textContent = t.op;
    cells[7]!.setAttribute('title', t.op);
  }

  private toggle(pos: number, range: boolean): void {
    const i = this.rows[pos];
    if (i === undefined) return;
    const on = !this.selected.has(i);
    if (range && this.anchor !== null) {
      const [a, b] = this.anchor < pos ? [this.anchor, pos] : [pos, this.anchor];
      for (let p = a; p <= b; p++) {
        const j = this.rows[p]!;
        if (on) this.selected.add(j);
        else this.selected.delete(j);
      }
    } else if (on) this.selected.add(i);
    else this.selected.delete(i);
    this.anchor = pos;
    this.selectionChanged();
  }

  private focusRow(pos: number): void {
    const i = this.rows[pos];
    if (i === undefined) return;
    const ctx = this.ctx();
    ctx.showTensor(ctx.snapshot.tensors[i]!.id, false);
    this.list?.refresh();
  }

  private onKey(e: KeyboardEvent): void {
    const ctx = this.ctx();
    const focusedId = ctx.state.details.tensor;
    const focusedIndex = focusedId === null ? undefined : ctx.derived.byId.get(focusedId);
    let pos = focusedIndex === undefined ? -1 : this.rows.indexOf(focusedIndex);
    if (e.key === 'ArrowDown' || e.key === 'ArrowUp') {
      e.preventDefault();
      pos = Math.max(0, Math.min(this.rows.length - 1, pos + (e.key === 'ArrowDown' ? 1 : -1)));
      this.focusRow(pos);
      this.list?.scrollToRow(pos);
    } else if (e.key === ' ' && pos >= 0) {
      e.preventDefault();
      this.toggle(pos, e.shiftKey);
    } else if (e.key === 'Enter' && focusedId !== null) {
      ctx.showTensor(focusedId, true);
    }
  }

  private selectionChanged(): void {
    const ctx = this.ctx();
    const ids = [...this.selected].map((i) => ctx.snapshot.tensors[i]!.id);
    ctx.update((x) => (x.table.selected = ids), []);
    this.list?.refresh();
    this.updateSelection();
  }

  private updateCounts(): void {
    if (!this.countsEl) return;
    const ctx = this.ctx();
    const total = ctx.snapshot.tensors.length;
    let bytes = 0;
    for (const i of this.rows) bytes += ctx.snapshot.tensors[i]!.bytes;
    this.countsEl.textContent = `${formatCount(this.rows.length)} of ${formatCount(total)} tensors · ${formatBytes(bytes)}`;
    this.countsEl.dataset['rows'] = String(this.rows.length);
    this.countsEl.dataset['bytes'] = String(bytes);
  }

  private updateSelection(): void {
    const bar = this.selectionEl;
    if (!bar) return;
    const ctx = this.ctx();
    const s = ctx.snapshot;
    const total = selectionTotal(s, this.selected);
    if (this.allBox) {
      const shownSelected = this.rows.reduce((n, i) => n + (this.selected.has(i) ? 1 : 0), 0);
      this.allBox.checked = shownSelected > 0 && shownSelected === this.rows.length;
      this.allBox.indeterminate = shownSelected > 0 && shownSelected < this.rows.length;
    }
    const clear = el('vscode-button', { secondary: true, id: 'selection-clear', disabled: total.count === 0 }, 'Clear selection');
    clear.addEventListener('click', () => {
      this.selected.clear();
      this.selectionChanged();
    });
    if (total.count === 0) {
      replace(bar, el('span', { class: 'muted' }, 'Select rows to add them up: what would the peak be without these tensors?'));
      bar.dataset['count'] = '0';
      bar.dataset['bytes'] = '0';
      return;
    }
    const parts = CATEGORIES.filter((c) => total.byCategory[c] > 0).map((c) => el('span', { class: 'legend-item' }, swatch(categoryVariable(c)), `${CATEGORY_LABELS[c]} ${formatBytes(total.byCategory[c])}`));
    replace(
      bar,
      el(
        'span',
        null,
        `Selected ${formatCount(total.count)} tensor${total.count === 1 ? '' : 's'}: `,
        el('strong', { id: 'selection-total', 'data-bytes': total.bytes }, formatBytes(total.bytes)),
        el('span', { class: 'muted' }, ` (${formatShare(total.bytes, s.summary.peak_bytes)} of the peak). Without them the peak moment holds `),
        el('strong', { id: 'selection-without', 'data-bytes': total.peakWithout }, formatBytes(total.peakWithout)),
        el('span', { class: 'muted' }, '.'),
      ),
      el('span', { class: 'selection-parts' }, ...parts),
      clear,
    );
    bar.dataset['count'] = String(total.count);
    bar.dataset['bytes'] = String(total.bytes);
  }

  dispose(): void {
    window.clearTimeout(this.queryTimer);
  }
}
