// Phases: for each phase of the summary's device, the bytes alive when it began, at its peak and
// when it ended, stacked by category, against the device's memory; a table with the same numbers
// (and the other devices' rows). Clicking a phase filters every view to it.
import type { ActiveElement, ChartEvent, Plugin } from 'chart.js';
import { CATEGORY_LABELS, emptyCategoryBytes } from '../data/categories';
import { withAlpha } from '../data/colors';
import { formatBytes, formatDelta } from '../data/format';
import { phaseAxisLines } from '../data/phases';
import { CATEGORIES, type CategoryBytes, type Phase } from '../../common/snapshot';
import type { Context } from '../context';
import { Chart, bytesAxis } from '../charts';
import { el, replace } from '../dom';

const MOMENTS = [
  { key: 'before', label: 'before', alpha: 0.5 },
  { key: 'peak', label: 'peak', alpha: 1 },
  { key: 'after', label: 'after', alpha: 0.5 },
] as const;
type Moment = (typeof MOMENTS)[number]['key'];

function momentBytes(p: Phase, m: Moment): CategoryBytes {
  const c = m === 'before' ? p.categories_before : m === 'after' ? p.categories_after : p.categories_at_peak;
  if (c) return c;
  // An older writer without the breakdown: show the total as "other".
  const out = emptyCategoryBytes();
  out.other = m === 'before' ? p.current_before_bytes : m === 'after' ? p.current_after_bytes : p.peak_bytes;
  return out;
}

export class PhasesView {
  private chart: Chart | null = null;
  private canvas: HTMLCanvasElement | null = null;

  constructor(private readonly root: HTMLElement, private readonly ctx: () => Context) {}

  render(): void {
    const ctx = this.ctx();
    const s = ctx.snapshot;
    const phases = ctx.derived.phases;
    const budget = s.meta.device.total_memory_bytes;

    const scale = el('vscode-checkbox', { id: 'phases-budget', checked: ctx.state.phasesView.budget }, 'Scale to device memory');
    scale.addEventListener('change', () => {
      const on = (scale as unknown as { checked: boolean }).checked;
      ctx.update((st) => (st.phasesView.budget = on), ['phases']);
    });
    const toolbar = el(
      'div',
      { class: 'toolbar' },
      scale,
      el('span', { class: 'muted' }, 'Each phase: before · peak · after. Click a phase to filter the other views to it.'),
    );

    this.disposeChart();
    this.canvas = el('canvas', { id: 'phases-chart', role: 'img', 'aria-label': 'Memory by phase' });
    const chartBox = el('div', { class: 'chart-box phases-chart' }, this.canvas);

    const table = this.table();
    replace(this.root, toolbar, chartBox, el('h3', null, 'Phases'), table);

    if (!phases.length) return;
    const theme = ctx.theme;
    const selected = ctx.state.phase;
    const datasets = MOMENTS.flatMap((moment) =>
      CATEGORIES.map((c) => ({
        label: CATEGORY_LABELS[c],
        stack: moment.key,
        category: c,
        data: phases.map((p) => momentBytes(p.phase, moment.key)[c]),
        backgroundColor: phases.map((p) =>
          withAlpha(theme.category[c], moment.alpha * (selected === null || selected === p.index ? 1 : 0.3)),
        ),
        borderColor: theme.background,
        borderWidth: { top: 0, bottom: 0, left: 0, right: 0 },
        barPercentage: 0.92,
        categoryPercentage: 0.78,
        hidden: !phases.some((p) => momentBytes(p.phase, moment.key)[c] > 0),
      })),
    );
    const maxPeak = Math.max(...phases.map((p) => p.phase.peak_bytes), 1);
    const yMax = ctx.state.phasesView.budget ? Math.max(budget, maxPeak) * 1.04 : undefined;

    const momentLabels: Plugin<'bar'> = {
      id: 'momentLabels',
      afterDatasetsDraw(chart) {
        const g = chart.ctx;
        g.save();
        g.fillStyle = theme.muted;
        g.font = `${Math.max(10, theme.fontSize - 3)}px ${theme.fontFamily}`;
        g.textAlign = 'center';
        g.textBaseline = 'top';
        const y = chart.chartArea.bottom + 4;
        // Bars closer than the widest word would overlap their labels: leave them out (the
        // sentence above the chart and the tooltips say which bar is which).
        const first = chart.getDatasetMeta(0).data;
        const spacing = first.length > 0 ? chart.scales['x']!.width / first.length / MOMENTS.length : 0;
        if (spacing < g.measureText('before').width + 4) {
          g.restore();
          return;
        }
        for (let m = 0; m < MOMENTS.length; m++) {
          // The first visible dataset of each stack gives the bar positions.
          const di = chart.data.datasets.findIndex((d, i) => (d as { stack?: string }).stack === MOMENTS[m]!.key && chart.isDatasetVisible(i));
          if (di < 0) continue;
          for (const bar of chart.getDatasetMeta(di).data) g.fillText(MOMENTS[m]!.label, bar.x, y);
        }
        g.restore();
      },
    };
    const budgetLine: Plugin<'bar'> = {
      id: 'budgetLine',
      afterDatasetsDraw(chart) {
        const y = chart.scales['y']!;
        if (budget > (y.max as number)) return;
        const py = y.getPixelForValue(budget);
        const g = chart.ctx;
        g.save();
        g.strokeStyle = theme.budget;
        g.lineWidth = 1.5;
        g.setLineDash([6, 4]);
        g.beginPath();
        g.moveTo(chart.chartArea.left, py);
        g.lineTo(chart.chartArea.right, py);
        g.stroke();
        g.setLineDash([]);
        g.fillStyle = theme.budget;
        g.font = `${Math.max(11, theme.fontSize - 2)}px ${theme.fontFamily}`;
        g.textAlign = 'right';
        g.textBaseline = 'bottom';
        g.fillText(`device memory ${formatBytes(budget)}`, chart.chartArea.right - 4, py - 3);
        g.restore();
      },
    };

    this.chart = new Chart(this.canvas, {
      type: 'bar',
      data: { labels: phases.map((p) => p.phase.name), datasets },
      plugins: [momentLabels, budgetLine],
      options: {
        responsive: true,
        maintainAspectRatio: false,
        animation: false,
        layout: { padding: { top: 8 } },
        interaction: { mode: 'nearest', axis: 'x', intersect: false },
        onClick: (_e: ChartEvent, elements: ActiveElement[]) => {
          const hit = elements[0];
          if (!hit) return;
          const p = phases[hit.index];
          if (p) ctx.setPhase(ctx.state.phase === p.index ? null : p.index);
        },
        onHover: (e: ChartEvent, elements: ActiveElement[]) => {
          const target = e.native?.target as HTMLElement | undefined;
          if (target) target.style.cursor = elements.length ? 'pointer' : 'default';
        },
        scales: {
          x: {
            stacked: true,
            grid: { display: false },
            // Names on two lines, turned when even that does not fit (chart.js rotates up to
            // maxRotation only as far as needed).
            ticks: {
              color: theme.foreground, padding: 18, autoSkip: false, maxRotation: 60,
              callback: (_value, index) => phaseAxisLines(phases[index]?.phase.name ?? ''),
            },
          },
          y: bytesAxis(theme, { stacked: true, ...(yMax !== undefined ? { max: yMax } : {}) }),
        },
        plugins: {
          legend: {
            position: 'bottom',
            labels: {
              // One entry per category (the "peak" stack's), not one per bar.
              filter: (item, data) => (data.datasets[item.datasetIndex ?? 0] as { stack?: string }).stack === 'peak',
              generateLabels: (chart) =>
                chart.data.datasets.flatMap((d, i) => {
                  const ds = d as unknown as { stack: string; category: (typeof CATEGORIES)[number]; hidden: boolean };
                  if (ds.stack !== 'peak' || ds.hidden) return [];
                  return [{ text: CATEGORY_LABELS[ds.category], fillStyle: theme.category[ds.category], strokeStyle: theme.category[ds.category], lineWidth: 0, datasetIndex: i, hidden: false, fontColor: theme.foreground }];
                }),
            },
            onClick: () => undefined,
          },
          tooltip: {
            mode: 'index',
            intersect: false,
            filter: (item) => (item.raw as number) > 0 && (item.dataset as { stack?: string }).stack === MOMENTS.find((m) => m.key === 'peak')!.key,
            callbacks: {
              title: (items) => {
                const p = phases[items[0]?.dataIndex ?? 0]!.phase;
                return `${p.name} (${p.device})`;
              },
              label: (item) => ` ${item.dataset.label}: ${formatBytes(item.raw as number)}`,
              footer: (items) => {
                const p = phases[items[0]?.dataIndex ?? 0]!.phase;
                return [
                  `before ${formatBytes(p.current_before_bytes)}`,
                  `peak   ${formatBytes(p.peak_bytes)}`,
                  `after  ${formatBytes(p.current_after_bytes)}`,
                  'click to filter to this phase',
                ];
              },
            },
          },
        },
      },
    });
  }

  private table(): HTMLElement {
    const ctx = this.ctx();
    const s = ctx.snapshot;
    const key = s.meta.device_key;
    const head = el(
      'tr',
      null,
      ...['phase', 'device', 'before', 'peak', 'after', 'change', 'peak at event'].map((h, i) => el('th', { class: i >= 2 ? 'num' : null }, h)),
    );
    const body = el('tbody');
    s.phases.forEach((p, index) => {
      const clickable = p.device === key;
      const isPeak = clickable && p.name === s.summary.peak_phase;
      const row = el(
        'tr',
        {
          class: ['phase-row', clickable ? 'clickable' : 'other-device', ctx.state.phase === index ? 'selected' : '', isPeak ? 'peak-phase' : ''].filter(Boolean).join(' '),
          'data-phase': index,
          tabindex: clickable ? 0 : null,
        },
        el('td', null, p.name, isPeak ? el('span', { class: 'badge' }, 'peak') : null),
        el('td', { class: 'muted' }, p.device),
        el('td', { class: 'num', 'data-bytes': p.current_before_bytes }, formatBytes(p.current_before_bytes)),
        el('td', { class: 'num strong', 'data-bytes': p.peak_bytes }, formatBytes(p.peak_bytes)),
        el('td', { class: 'num', 'data-bytes': p.current_after_bytes }, formatBytes(p.current_after_bytes)),
        el('td', { class: 'num muted' }, formatDelta(p.current_after_bytes - p.current_before_bytes)),
        el('td', { class: 'num muted' }, p.peak_seq === undefined || p.peak_seq < 0 ? '–' : String(p.peak_seq)),
      );
      if (clickable) {
        const go = () => ctx.setPhase(ctx.state.phase === index ? null : index);
        row.addEventListener('click', go);
        row.addEventListener('keydown', (e) => {
          if (e.key === 'Enter' || e.key === ' ') {
            e.preventDefault();
            go();
          }
        });
      }
      body.appendChild(row);
    });
    return el('table', { class: 'grid', id: 'phases-table' }, el('thead', null, head), body);
  }

  private disposeChart(): void {
    this.chart?.destroy();
    this.chart = null;
  }

  dispose(): void {
    this.disposeChart();
  }
}
