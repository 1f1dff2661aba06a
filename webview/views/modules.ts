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
  type ValueOf,
} from '../data/modules';
import { CATEGORIES, type Category, type CategoryBytes } from '../../common/snapshot';
import type { Context } from '../context';
import { Chart, bytesAxis } from '../charts';
import { el, replace } from '../dom';

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
    const roots = groupTree(s.modules, ctx.derived.forest, valueOf, { merge: st.modules.merge });
    const denominator = phase || st.modules.measure === 'at_peak' ? s.summary.peak_bytes : Math.max(1, ...roots.map((r) => r.total));

    // Toolbar.
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
    const toolbar = el('div', { class: 'toolbar' }, measure, merge, el('span', { class: 'muted' }, caption));

    // Overview chart.
    const entries = overviewPartition(roots, unattributed);
    const canvas = el('canvas', { id: 'modules-chart', role: 'img', 'aria-label': 'Largest module groups' });
    const chartBox = el('div', { class: 'chart-box modules-chart' }, canvas);
    chartBox.style.setProperty('height', `${Math.max(120, entries.length * 26 + 56)}px`);

    // Tree.
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
    const body = el('tbody');
    const expanded = new Set(st.modules.expanded);
    const isOpen = (id: string, depth: number) => (depth === 0 ? !expanded.has(COLLAPSED + id) : expanded.has(id));
    const toggle = (id: string, depth: number) => {
      ctx.update((x) => {
        const set = new Set(x.modules.expanded);
        const key = depth === 0 ? COLLAPSED + id : id;
        if (set.has(key)) set.delete(key);
        else set.add(key);
        x.modules.expanded = [...set];
      }, ['modules']);
    };

    const rowFor = (node: GroupNode, depth: number, kind: 'group' | 'instance' = 'group') => {
      const hasKids = node.children.length > 0 || node.members.length > 1;
      const open = hasKids && isOpen(node.id, depth);
      const twisty = el('span', { class: hasKids ? 'twisty' : 'twisty none', 'aria-hidden': 'true' }, hasKids ? (open ? '▾' : '▸') : '');
      const name = el('span', { class: 'module-name' }, node.label);
      const cell = el('td', { class: 'tree-cell' }, twisty, name);
      cell.style.setProperty('padding-left', `${8 + depth * 16}px`);
      if (node.foldedContainer !== null) cell.appendChild(el('span', { class: 'muted small', title: `the container ${node.foldedContainer} holds only these` }, ` in ${node.foldedContainer}`));
      const first = s.modules[node.members[0]!]!;
      const classCell = el('td', { class: 'class-cell' });
      if (first.source && node.className !== '(mixed)') {
        const src = first.source;
        const link = el('a', { href: '#', class: 'file-link', title: `${node.className} defined at ${src.file}:${src.line}` }, node.className);
        link.addEventListener('click', (e) => {
          e.preventDefault();
          e.stopPropagation();
          ctx.openFile(src.file, src.line);
        });
        classCell.appendChild(link);
      } else classCell.textContent = node.className;
      const tensorsButton = el('button', { class: 'row-action', title: 'Show these tensors in the Table' }, 'tensors ›');
      tensorsButton.addEventListener('click', (e) => {
        e.stopPropagation();
        const modules = [...new Set(node.members.flatMap((m) => ctx.derived.subtree(m)))];
        ctx.update((x) => {
          x.table.module = { label: node.members.length > 1 ? node.key : first.fqn || `(${first.class})`, modules };
          x.tab = 'table';
        });
      });
      const tr = el(
        'tr',
        { class: `module-row ${kind}${open ? ' open' : ''}`, 'data-key': node.key, 'data-id': node.id, 'data-bytes': node.total, 'data-count': node.members.length, tabindex: 0 },
        cell,
        classCell,
        el('td', { class: 'num muted' }, node.members.length > 1 ? `×${node.members.length}` : ''),
        el('td', { class: 'num strong', 'data-bytes': node.total }, formatBytes(node.total)),
        el(
          'td',
          { class: 'num muted', title: node.members.length > 1 ? 'smallest – largest instance' : '' },
          node.members.length > 1 ? (node.minInstance === node.maxInstance ? formatBytes(node.maxInstance) : `${formatBytes(node.minInstance)} – ${formatBytes(node.maxInstance)}`) : '',
        ),
        ...used.map((c) => el('td', { class: node.bytes[c] ? 'num' : 'num zero', 'data-category': c, 'data-bytes': node.bytes[c] }, node.bytes[c] ? formatBytes(node.bytes[c]) : '–')),
        el('td', { class: 'share-cell' }, shareBar(node.bytes, denominator), tensorsButton),
      );
      if (hasKids) {
        tr.addEventListener('click', () => toggle(node.id, depth));
        tr.addEventListener('keydown', (e) => {
          if (e.key === 'Enter' || e.key === ' ' || e.key === 'ArrowRight' || e.key === 'ArrowLeft') {
            e.preventDefault();
            if ((e.key === 'ArrowRight') === open && e.key.startsWith('Arrow')) return;
            toggle(node.id, depth);
          }
        });
      }
      body.appendChild(tr);
      if (!open) return;
      for (const child of node.children) rowFor(child, depth + 1);
      if (node.self) selfRow(node, depth + 1);
      if (node.members.length > 1) instancesRow(node, depth + 1);
    };
    const selfRow = (node: GroupNode, depth: number) => {
      const self = node.self!;
      const cell = el('td', { class: 'tree-cell muted', colspan: 2 }, el('span', { class: 'twisty none' }), `${node.label}: own tensors`);
      cell.style.setProperty('padding-left', `${8 + depth * 16}px`);
      body.appendChild(
        el(
          'tr',
          { class: 'module-row self' },
          cell,
          el('td'),
          el('td', { class: 'num', 'data-bytes': totalOf(self) }, formatBytes(totalOf(self))),
          el('td'),
          ...used.map((c) => el('td', { class: self[c] ? 'num' : 'num zero' }, self[c] ? formatBytes(self[c]) : '–')),
          el('td', { class: 'share-cell' }, shareBar(self, denominator)),
        ),
      );
    };
    const instancesRow = (node: GroupNode, depth: number) => {
      const id = `${node.id}#instances`;
      const open = expanded.has(id);
      const cell = el('td', { class: 'tree-cell', colspan: 5 + used.length + 1 }, el('span', { class: 'twisty' }, open ? '▾' : '▸'), el('span', { class: 'muted' }, `${node.members.length} instances`));
      cell.style.setProperty('padding-left', `${8 + depth * 16}px`);
      const tr = el('tr', { class: 'module-row instances', 'data-id': id, tabindex: 0 }, cell);
      tr.addEventListener('click', () => toggle(id, depth));
      body.appendChild(tr);
      if (open) for (const inst of node.instances()) rowFor(inst, depth + 1, 'instance');
    };
    for (const r of roots) rowFor(r, 0);
    if (unattributed && totalOf(unattributed) !== 0) {
      body.appendChild(
        el(
          'tr',
          { class: 'module-row none', 'data-key': '(no module)', 'data-bytes': totalOf(unattributed) },
          el('td', { class: 'tree-cell muted' }, el('span', { class: 'twisty none' }), '(no module)'),
          el('td', { class: 'muted' }, 'made by the script'),
          el('td'),
          el('td', { class: 'num strong', 'data-bytes': totalOf(unattributed) }, formatBytes(totalOf(unattributed))),
          el('td'),
          ...used.map((c) => el('td', { class: unattributed![c] ? 'num' : 'num zero' }, unattributed![c] ? formatBytes(unattributed![c]) : '–')),
          el('td', { class: 'share-cell' }, shareBar(unattributed, denominator)),
        ),
      );
    }
    const tree = el('table', { class: 'grid tree', id: 'modules-tree' }, el('thead', null, head), body);

    replace(this.root, toolbar, el('h3', null, 'Largest groups'), chartBox, el('h3', null, 'Module tree'), el('div', { class: 'table-scroll' }, tree));

    // The chart, after its box is in the page.
    const theme = ctx.theme;
    this.chart = new Chart(canvas, {
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

  dispose(): void {
    this.chart?.destroy();
    this.chart = null;
  }
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
