// Modules: an overview chart of the largest groups (every byte accounted for: one-off modules
// such as embeddings and the output layer, the model's own tensors, tensors of no module) and
// the module tree with repeated layers merged ("h.*" ×12, per instance and in total),
// expandable down to each instance. A phase filter shows what that phase left alive at the peak.
import { CATEGORY_LABELS, totalOf } from '../data/categories';
import { categoryVariable, withAlpha } from '../data/colors';
import { formatBytes, formatShare } from '../data/format';
import {
  groupTree,
  overviewPartition,
  rowMeasure,
  tensorMeasure,
  unattributedAtPeak,
  type GroupNode,
  type OverviewEntry,
  type ValueOf,
} from '../data/modules';
import { CATEGORIES, type Category, type CategoryBytes, type ModuleRow, type Phase } from '../../common/snapshot';
import type { Context } from '../context';
import { Chart, bytesAxis } from '../charts';
import { el, replace } from '../dom';
import type { Theme } from '../theme';

const COLLAPSED = '-';

export class ModulesView {
  private chart: Chart | null = null;

  constructor(private readonly root: HTMLElement, private readonly ctx: () => Context) {}

  render(): void {
    this.dispose();
    const ctx = this.ctx();
    const s = ctx.snapshot;
    const st = ctx.state;
    const phase = st.phase !== null ? s.phases[st.phase] : undefined;
    const { valueOf, unattributed, caption } = measureOf(ctx, phase);
    const roots = groupTree(s.modules, ctx.derived.forest, valueOf, { merge: st.modules.merge });
    // Shares are of the peak; the categories' own peaks come from different moments and can add
    // up to more than it, so under that measure the largest root is the whole.
    const denominator = phase || st.modules.measure === 'at_peak' ? s.summary.peak_bytes : Math.max(1, ...roots.map((r) => r.total));

    // Overview chart: a bar per entry, the box as tall as they need.
    const entries = overviewPartition(roots, unattributed);
    const canvas = el('canvas', { id: 'modules-chart', role: 'img', 'aria-label': 'Largest module groups' });
    const chartBox = el('div', { class: 'chart-box modules-chart' }, canvas);
    chartBox.style.setProperty('height', `${Math.max(120, entries.length * 26 + 56)}px`);

    const tree = treeTable(ctx, roots, unattributed, denominator);
    replace(this.root, toolbar(ctx, phase, caption), el('h3', null, 'Largest groups'), chartBox, el('h3', null, 'Module tree'), el('div', { class: 'table-scroll' }, tree));

    // The chart, after its box is in the page.
    this.chart = overviewChart(canvas, entries, denominator, ctx.theme);
  }

  dispose(): void {
    this.chart?.destroy();
    this.chart = null;
  }
}

/**
 * What the bytes of a module are: with a phase filter, those of that phase's tensors alive at the
 * peak; otherwise the chosen measure. `unattributed` is the bytes of no module, where the measure
 * has them.
 */
function measureOf(ctx: Context, phase: Phase | undefined): { valueOf: ValueOf; unattributed: CategoryBytes | null; caption: string } {
  const s = ctx.snapshot;
  const st = ctx.state;
  let valueOf: ValueOf;
  let unattributed: CategoryBytes | null;
  let caption: string;
  if (phase) {
    const m = tensorMeasure(s, ctx.derived.forest, (i) => s.tensors[i]!.phase === st.phase);
    valueOf = m.valueOf;
    unattributed = m.unattributed;
    caption = `Bytes alive at the peak that were allocated during ${phase.name}.`;
  } else if (st.modules.measure === 'at_peak') {
    valueOf = rowMeasure(s.modules, 'at_peak');
    unattributed = unattributedAtPeak(s);
    caption = `Bytes each module held at the peak (${formatBytes(s.summary.peak_bytes)}), by category; a module includes its submodules.`;
  } else {
    valueOf = rowMeasure(s.modules, 'category_peaks');
    unattributed = null;
    caption = 'For each category, the most the module held when that category peaked (the columns peak at different moments).';
  }
  return { valueOf, unattributed, caption };
}

/** The measure (fixed while a phase filter is on), merging repeated layers, and the caption. */
function toolbar(ctx: Context, phase: Phase | undefined, caption: string): HTMLElement {
  const st = ctx.state;
  const measure = el(
    'vscode-single-select',
    { id: 'modules-measure', disabled: !!phase, title: phase ? 'A phase filter shows bytes alive at the peak' : '' },
    el('vscode-option', { value: 'at_peak', selected: st.modules.measure === 'at_peak' }, 'Bytes at the peak'),
    el('vscode-option', { value: 'category_peaks', selected: st.modules.measure === 'category_peaks' }, "Each category's own peak"),
  );
  measure.addEventListener('change', () => {
    const v = (measure as unknown as { value: string }).value;
    ctx.update((x) => (x.modules.measure = v === 'category_peaks' ? 'category_peaks' : 'at_peak'), ['modules']);
  });
  const merge = el('vscode-checkbox', { id: 'modules-merge', checked: st.modules.merge }, 'Merge repeated layers');
  merge.addEventListener('change', () => {
    const on = (merge as unknown as { checked: boolean }).checked;
    ctx.update((x) => (x.modules.merge = on), ['modules']);
  });
  return el('div', { class: 'toolbar' }, measure, merge, el('span', { class: 'muted' }, caption));
}

/** The module tree: a column per category in use, the groups, then the bytes of no module. */
function treeTable(ctx: Context, roots: readonly GroupNode[], unattributed: CategoryBytes | null, denominator: number): HTMLElement {
  const used = CATEGORIES.filter((c) => roots.some((r) => r.bytes[c] !== 0) || (unattributed?.[c] ?? 0) !== 0);
  const head = el(
    'tr',
    null,
    el('th', null, 'module'),
    el('th', null, 'class'),
    el('th', { class: 'num', title: 'instances' }, '×'),
    el('th', { class: 'num' }, 'total'),
    el('th', { class: 'num' }, 'per instance'),
    ...used.map((c) => el('th', { class: 'num' }, CATEGORY_LABELS[c])),
    el('th', null, 'share'),
  );
  const rows = new TreeRows(ctx, used, denominator);
  for (const r of roots) rows.groupRow(r, 0);
  if (unattributed && totalOf(unattributed) !== 0) rows.noModuleRow(unattributed);
  return el('table', { class: 'grid tree', id: 'modules-tree' }, el('thead', null, head), rows.body);
}

/**
 * The rows of the module tree, appended to `body` in order: a group, and under an open one its
 * children, its own tensors and its instances. A click changes what the state keeps open, and
 * the view renders again.
 */
class TreeRows {
  readonly body = el('tbody');
  private readonly expanded: Set<string>;

  constructor(private readonly ctx: Context, private readonly used: readonly Category[], private readonly denominator: number) {
    this.expanded = new Set(ctx.state.modules.expanded);
  }

  // The roots start open and deeper groups closed: the state keeps the roots the user closed
  // (COLLAPSED + id) and the deeper groups the user opened (id).
  private isOpen(id: string, depth: number): boolean {
    return depth === 0 ? !this.expanded.has(COLLAPSED + id) : this.expanded.has(id);
  }

  private toggle(id: string, depth: number): void {
    this.ctx.update((x) => {
      const set = new Set(x.modules.expanded);
      const key = depth === 0 ? COLLAPSED + id : id;
      if (set.has(key)) set.delete(key);
      else set.add(key);
      x.modules.expanded = [...set];
    }, ['modules']);
  }

  /** A group (or one instance of it) and, if open, what is under it. */
  groupRow(node: GroupNode, depth: number, kind: 'group' | 'instance' = 'group'): void {
    const hasKids = node.children.length > 0 || node.members.length > 1;
    const open = hasKids && this.isOpen(node.id, depth);
    const first = this.ctx.snapshot.modules[node.members[0]!]!;
    const tr = el(
      'tr',
      { class: `module-row ${kind}${open ? ' open' : ''}`, 'data-key': node.key, 'data-id': node.id, 'data-bytes': node.total, 'data-count': node.members.length, tabindex: 0 },
      this.nameCell(node, depth, hasKids, open),
      this.classCell(node, first),
      el('td', { class: 'num muted' }, node.members.length > 1 ? `×${node.members.length}` : ''),
      el('td', { class: 'num strong', 'data-bytes': node.total }, formatBytes(node.total)),
      el(
        'td',
        { class: 'num muted', title: node.members.length > 1 ? 'smallest – largest instance' : '' },
        node.members.length > 1 ? (node.minInstance === node.maxInstance ? formatBytes(node.maxInstance) : `${formatBytes(node.minInstance)} – ${formatBytes(node.maxInstance)}`) : '',
      ),
      ...this.used.map((c) => el('td', { class: node.bytes[c] ? 'num' : 'num zero', 'data-category': c, 'data-bytes': node.bytes[c] }, node.bytes[c] ? formatBytes(node.bytes[c]) : '–')),
      el('td', { class: 'share-cell' }, shareBar(node.bytes, this.denominator), this.tensorsButton(node, first)),
    );
    if (hasKids) this.wireToggle(tr, node.id, depth, open);
    this.body.appendChild(tr);
    if (!open) return;
    for (const child of node.children) this.groupRow(child, depth + 1);
    if (node.self) this.selfRow(node, depth + 1);
    if (node.members.length > 1) this.instancesRow(node, depth + 1);
  }

  /** The twisty and the name, indented by depth, and the container folded into the group. */
  private nameCell(node: GroupNode, depth: number, hasKids: boolean, open: boolean): HTMLElement {
    const twisty = el('span', { class: hasKids ? 'twisty' : 'twisty none', 'aria-hidden': 'true' }, hasKids ? (open ? '▾' : '▸') : '');
    const name = el('span', { class: 'module-name' }, node.label);
    const cell = el('td', { class: 'tree-cell' }, twisty, name);
    cell.style.setProperty('padding-left', `${8 + depth * 16}px`);
    if (node.foldedContainer !== null) cell.appendChild(el('span', { class: 'muted small', title: `the container ${node.foldedContainer} holds only these` }, ` in ${node.foldedContainer}`));
    return cell;
  }

  /** The class, a link to where it is defined when the snapshot knows (and it is one class). */
  private classCell(node: GroupNode, first: ModuleRow): HTMLElement {
    const classCell = el('td', { class: 'class-cell' });
    if (first.source && node.className !== '(mixed)') {
      const src = first.source;
      const link = el('a', { href: '#', class: 'file-link', title: `${node.className} defined at ${src.file}:${src.line}` }, node.className);
      link.addEventListener('click', (e) => {
        e.preventDefault();
        e.stopPropagation();
        this.ctx.openFile(src.file, src.line);
      });
      classCell.appendChild(link);
    } else classCell.textContent = node.className;
    return classCell;
  }

  /** Opens the Table filtered to the tensors of the group's modules and everything inside them. */
  private tensorsButton(node: GroupNode, first: ModuleRow): HTMLElement {
    const ctx = this.ctx;
    const tensorsButton = el('button', { class: 'row-action', title: 'Show these tensors in the Table' }, 'tensors ›');
    tensorsButton.addEventListener('click', (e) => {
      e.stopPropagation();
      const modules = [...new Set(node.members.flatMap((m) => ctx.derived.subtree(m)))];
      ctx.update((x) => {
        x.table.module = { label: node.members.length > 1 ? node.key : first.fqn || `(${first.class})`, modules };
        x.tab = 'table';
      });
    });
    return tensorsButton;
  }

  /** A click or Enter/Space toggles the row; → opens and ← closes it (either does nothing if it is already so). */
  private wireToggle(tr: HTMLElement, id: string, depth: number, open: boolean): void {
    tr.addEventListener('click', () => this.toggle(id, depth));
    tr.addEventListener('keydown', (e) => {
      if (e.key === 'Enter' || e.key === ' ' || e.key === 'ArrowRight' || e.key === 'ArrowLeft') {
        e.preventDefault();
        if ((e.key === 'ArrowRight') === open && e.key.startsWith('Arrow')) return;
        this.toggle(id, depth);
      }
    });
  }

  /** The group's own tensors: what none of its children holds. */
  private selfRow(node: GroupNode, depth: number): void {
    const self = node.self!;
    const cell = el('td', { class: 'tree-cell muted', colspan: 2 }, el('span', { class: 'twisty none' }), `${node.label}: own tensors`);
    cell.style.setProperty('padding-left', `${8 + depth * 16}px`);
    this.body.appendChild(
      el(
        'tr',
        { class: 'module-row self' },
        cell,
        el('td'),
        el('td', { class: 'num', 'data-bytes': totalOf(self) }, formatBytes(totalOf(self))),
        el('td'),
        ...this.used.map((c) => el('td', { class: self[c] ? 'num' : 'num zero' }, self[c] ? formatBytes(self[c]) : '–')),
        el('td', { class: 'share-cell' }, shareBar(self, this.denominator)),
      ),
    );
  }

  /** "N instances" of a merged group; opened, a row per instance. */
  private instancesRow(node: GroupNode, depth: number): void {
    const id = `${node.id}#instances`;
    const open = this.expanded.has(id);
    const cell = el('td', { class: 'tree-cell', colspan: 5 + this.used.length + 1 }, el('span', { class: 'twisty' }, open ? '▾' : '▸'), el('span', { class: 'muted' }, `${node.members.length} instances`));
    cell.style.setProperty('padding-left', `${8 + depth * 16}px`);
    const tr = el('tr', { class: 'module-row instances', 'data-id': id, tabindex: 0 }, cell);
    tr.addEventListener('click', () => this.toggle(id, depth));
    this.body.appendChild(tr);
    if (open) for (const inst of node.instances()) this.groupRow(inst, depth + 1, 'instance');
  }

  /** The tensors of no module: those the script made outside any module. */
  noModuleRow(unattributed: CategoryBytes): void {
    this.body.appendChild(
      el(
        'tr',
        { class: 'module-row none', 'data-key': '(no module)', 'data-bytes': totalOf(unattributed) },
        el('td', { class: 'tree-cell muted' }, el('span', { class: 'twisty none' }), '(no module)'),
        el('td', { class: 'muted' }, 'made by the script'),
        el('td'),
        el('td', { class: 'num strong', 'data-bytes': totalOf(unattributed) }, formatBytes(totalOf(unattributed))),
        el('td'),
        ...this.used.map((c) => el('td', { class: unattributed[c] ? 'num' : 'num zero' }, unattributed[c] ? formatBytes(unattributed[c]) : '–')),
        el('td', { class: 'share-cell' }, shareBar(unattributed, this.denominator)),
      ),
    );
  }
}

/** The largest groups as stacked bars by category; hovering one names its total (and, for the rest, what it holds). */
function overviewChart(canvas: HTMLCanvasElement, entries: OverviewEntry[], denominator: number, theme: Theme): Chart {
  return new Chart(canvas, {
    type: 'bar',
    data: {
      labels: entries.map((e) => e.label),
      datasets: CATEGORIES.filter((c) => entries.some((e) => e.bytes[c] !== 0)).map((c: Category) => ({
        label: CATEGORY_LABELS[c],
        data: entries.map((e) => e.bytes[c]),
        backgroundColor: theme.category[c],
        hoverBackgroundColor: withAlpha(theme.category[c], 0.8),
        barPercentage: 0.8,
        categoryPercentage: 0.9,
      })),
    },
    options: {
      indexAxis: 'y',
      responsive: true,
      maintainAspectRatio: false,
      animation: false,
      scales: {
        x: bytesAxis(theme, { stacked: true }),
        y: { stacked: true, grid: { display: false }, ticks: { color: theme.foreground, autoSkip: false } },
      },
      plugins: {
        legend: { position: 'bottom', onClick: () => undefined },
        tooltip: {
          mode: 'index',
          intersect: false,
          filter: (item) => (item.raw as number) !== 0,
          callbacks: {
            label: (item) => ` ${item.dataset.label}: ${formatBytes(item.raw as number)}`,
            footer: (items) => {
              const e = entries[items[0]?.dataIndex ?? 0]!;
              const lines = [`total ${formatBytes(e.total)} (${formatShare(e.total, denominator)})`];
              if (e.kind === 'rest') lines.push(...e.keys.slice(0, 12).map((k) => `· ${k || '(model)'}`), ...(e.keys.length > 12 ? [`… ${e.keys.length - 12} more`] : []));
              return lines;
            },
          },
        },
      },
    },
  });
}

/** A thin bar: the bytes by category, as a share of `whole`. */
function shareBar(bytes: CategoryBytes, whole: number): HTMLElement {
  const bar = el('span', { class: 'share-bar', title: formatShare(totalOf(bytes), whole) });
  for (const c of CATEGORIES) {
    if (bytes[c] <= 0) continue;
    const seg = el('span', { class: 'segment' });
    seg.style.setProperty('width', `${Math.min(100, (100 * bytes[c]) / Math.max(1, whole))}%`);
    seg.style.setProperty('background', `var(${categoryVariable(c)})`);
    bar.appendChild(seg);
  }
  return bar;
}
