// Timeline: live bytes over the trace (x: event index), stacked by category, phases shaded and
// named, the peak marked. Wheel zooms, dragging pans, a double click resets. The snapshot's
// timeline is down-sampled again to the pixels at hand; every bucket keeps its highest row, so
// the drawn curve reaches the peak at any zoom. Hover names the event's op and module.
// Snapshots of CUDA targets with several streams can add a line per stream: the reserved bytes
// of that stream's pool, read from its own column of the timeline (the engine's numbers).
import type { ChartDataset, Plugin, TooltipItem } from 'chart.js';
import { CATEGORY_LABELS } from '../data/categories';
import { streamVariable, withAlpha } from '../data/colors';
import { downsample, timelineColumns, type TimelineColumns } from '../data/downsample';
import { formatBytes, formatCount } from '../data/format';
import { phaseAtSeq, type PhaseRef } from '../data/phases';
import { CATEGORIES, type Category, type Snapshot, type TimelineStream } from '../../common/snapshot';
import type { Context } from '../context';
import { Chart, bytesAxis } from '../charts';
import { el, replace, swatch } from '../dom';
import type { Theme } from '../theme';

const MIN_SPAN = 8;

type Points = { x: number; y: number }[];

/** A stream with a reserved-bytes column of its own; `i` is its place in timeline.streams. */
interface StreamColumn {
  stream: TimelineStream;
  i: number;
  col: number;
}

/** What one render reads of the snapshot's timeline, for the toolbar, the chart and redraws. */
interface Plan {
  cols: TimelineColumns;
  /** The categories that hold bytes somewhere in the trace, and their columns. */
  present: (readonly [Category, number])[];
  fullRange: [number, number];
  streamCols: StreamColumn[];
  /** More than one stream has a column: the per-stream control is offered. */
  perStream: boolean;
  /** ...and it is on. */
  showStreams: boolean;
  reservedCol: number;
}

/** The stretch of the trace in view, and the ways the buttons, the wheel and dragging move it. */
interface Navigation {
  range(): [number, number];
  setRange(r: [number, number] | null): void;
  zoom(factor: number, around?: number): void;
}

export class TimelineView {
  private chart: Chart<'line', Points> | null = null;
  private saveTimer = 0;
  private listeners = new AbortController();
  /** The rows drawn now (down-sampled by each redraw), which the tooltip's footer reads. */
  private rows: number[][] = [];

  constructor(private readonly root: HTMLElement, private readonly ctx: () => Context) {}

  render(): void {
    const ctx = this.ctx();
    const s = ctx.snapshot;
    this.dispose();
    const plan = timelinePlan(s, ctx.state.timeline.streams);
    if (!plan) {
      replace(this.root, el('p', { class: 'empty' }, 'This snapshot has no timeline.'));
      return;
    }
    const nav = this.navigation(ctx, plan.fullRange);
    const canvas = el('canvas', { id: 'timeline-chart', role: 'img', 'aria-label': 'Live bytes over the trace' });
    const box = el('div', { class: 'chart-box timeline-chart' }, canvas);
    replace(
      this.root,
      toolbar(ctx, plan, nav),
      box,
      plan.showStreams ? streamLegend(s, plan.streamCols) : null,
      el('p', { class: 'muted small' }, `${formatCount(s.timeline.events)} events; the snapshot keeps ${formatCount(s.timeline.points.length)} points (each the highest of its stretch).`),
    );

    const { datasets, columnOf } = chartDatasets(plan, ctx.theme);
    const chart = timelineChart(canvas, ctx, plan, datasets, (i) => this.rows[i]);
    this.chart = chart;
    this.redraw = () => this.draw(ctx, plan, nav, chart, box, columnOf);
    this.redraw();
    this.wirePointer(canvas, chart, nav);
  }

  private redraw: () => void = () => undefined;

  /**
   * The range in the state, or the whole trace. A change redraws at once and is saved 300 ms
   * later, so that a drag or a burst of wheel steps saves once.
   */
  private navigation(ctx: Context, fullRange: [number, number]): Navigation {
    const range = (): [number, number] => ctx.state.timeline.range ?? fullRange;
    const setRange = (r: [number, number] | null) => {
      ctx.state.timeline.range = r ? clampRange(r, fullRange) : null;
      this.redraw();
      window.clearTimeout(this.saveTimer);
      this.saveTimer = window.setTimeout(() => ctx.update(() => undefined, []), 300);
    };
    const zoom = (factor: number, around?: number) => {
      const [lo, hi] = range();
      const c = around ?? (lo + hi) / 2;
      setRange([c - (c - lo) * factor, c + (hi - c) * factor]);
    };
    return { range, setRange, zoom };
  }

  /** Down-samples the rows in view to about 1.5 points a pixel, fits the axes and names the range. */
  private draw(ctx: Context, plan: Plan, nav: Navigation, chart: Chart<'line', Points>, box: HTMLElement, columnOf: number[]): void {
    const s = ctx.snapshot;
    const cols = plan.cols;
    const budget = s.meta.device.total_memory_bytes;
    const peak = s.summary.peak_bytes;
    const [lo, hi] = nav.range();
    const width = Math.max(200, chart.chartArea ? chart.chartArea.right - chart.chartArea.left : box.clientWidth);
    this.rows = downsample(s.timeline.points, cols, Math.round(width * 1.5), lo, hi);
    chart.data.datasets.forEach((d, k) => {
      const col = columnOf[k]!;
      d.data = this.rows.map((r) => ({ x: r[cols.seq]!, y: r[col] ?? 0 }));
    });
    const xs = chart.options.scales!['x']!;
    xs.min = lo;
    xs.max = hi;
    const ys = chart.options.scales!['y']! as { max?: number };
    if (ctx.state.timeline.budget) ys.max = Math.max(budget, peak) * 1.04;
    else delete ys.max;
    chart.update('none');
    const label = this.root.querySelector('#timeline-range');
    if (label) label.textContent = ctx.state.timeline.range ? `events ${formatCount(Math.round(lo))}–${formatCount(Math.round(hi))}` : 'whole trace';
  }

  /** Zoom and pan: the wheel zooms around the pointer, dragging pans, a double click resets. */
  private wirePointer(canvas: HTMLCanvasElement, chart: Chart<'line', Points>, nav: Navigation): void {
    const seqAt = (clientX: number) => {
      const rect = canvas.getBoundingClientRect();
      return chart.scales['x']!.getValueForPixel(clientX - rect.left) ?? 0;
    };
    canvas.addEventListener(
      'wheel',
      (e) => {
        e.preventDefault();
        nav.zoom(e.deltaY > 0 ? 1.25 : 0.8, seqAt(e.clientX));
      },
      { passive: false },
    );
    let drag: { x: number; range: [number, number] } | null = null;
    canvas.addEventListener('mousedown', (e) => {
      if (e.button !== 0) return;
      drag = { x: e.clientX, range: nav.range() };
      canvas.classList.add('dragging');
    });
    // On the window, so a drag goes on outside the canvas; removed by dispose().
    const signal = this.listeners.signal;
    window.addEventListener('mousemove', (e) => {
      if (!drag) return;
      const [lo, hi] = drag.range;
      const area = chart.chartArea;
      const perPixel = (hi - lo) / Math.max(1, area.right - area.left);
      const shift = (drag.x - e.clientX) * perPixel;
      if (Math.abs(drag.x - e.clientX) > 2) nav.setRange([lo + shift, hi + shift]);
    }, { signal });
    window.addEventListener('mouseup', () => {
      drag = null;
      canvas.classList.remove('dragging');
    }, { signal });
    canvas.addEventListener('dblclick', () => nav.setRange(null));
  }

  dispose(): void {
    this.chart?.destroy();
    this.chart = null;
    this.listeners.abort();
    this.listeners = new AbortController();
  }
}

/** The columns and extent of the snapshot's timeline; null if it has none to draw. */
function timelinePlan(s: Snapshot, streamsOn: boolean): Plan | null {
  const cols = timelineColumns(s.timeline.columns);
  if (!cols || s.timeline.points.length === 0) return null;
  const categoryCols = CATEGORIES.map((c) => [c, s.timeline.columns.indexOf(c)] as const).filter(([, i]) => i >= 0);
  const present = categoryCols.filter(([, i]) => s.timeline.points.some((p) => (p[i] ?? 0) > 0));
  const fullRange: [number, number] = [0, Math.max(s.timeline.events - 1, s.timeline.points.at(-1)![cols.seq]!, 1)];
  // Reserved per stream: only where the snapshot has a column for more than one stream.
  const streamCols = (s.timeline.streams ?? [])
    .map((stream, i) => ({ stream, i, col: s.timeline.columns.indexOf(stream.column) }))
    .filter((x) => x.col >= 0);
  const perStream = streamCols.length > 1;
  const showStreams = perStream && streamsOn;
  const reservedCol = s.timeline.columns.indexOf('reserved');
  return { cols, present, fullRange, streamCols, perStream, showStreams, reservedCol };
}

/**
 * `r` widened to MIN_SPAN events if narrower and moved inside the trace; null when it covers the
 * whole trace (the state then says "whole trace", not a range).
 */
function clampRange(r: [number, number], fullRange: [number, number]): [number, number] | null {
  let [lo, hi] = r;
  if (hi - lo < MIN_SPAN) {
    const mid = (lo + hi) / 2;
    [lo, hi] = [mid - MIN_SPAN / 2, mid + MIN_SPAN / 2];
  }
  const span = Math.min(hi - lo, fullRange[1] - fullRange[0]);
  lo = Math.max(fullRange[0], Math.min(lo, fullRange[1] - span));
  hi = lo + span;
  return lo <= fullRange[0] && hi >= fullRange[1] ? null : [lo, hi];
}

/** The zoom buttons, the device-memory and per-stream switches, a hint and the range shown. */
function toolbar(ctx: Context, plan: Plan, nav: Navigation): HTMLElement {
  const s = ctx.snapshot;
  const phaseRef = ctx.state.phase !== null ? s.phases[ctx.state.phase] : undefined;
  return el(
    'div',
    { class: 'toolbar' },
    toolButton('−', 'Zoom out', 'timeline-zoom-out', () => nav.zoom(1.6)),
    toolButton('+', 'Zoom in', 'timeline-zoom-in', () => nav.zoom(1 / 1.6)),
    toolButton('Whole trace', 'Reset the zoom (double click)', 'timeline-reset', () => nav.setRange(null)),
    phaseRef ? toolButton(`Zoom to ${phaseRef.name}`, 'Zoom to the filtered phase', 'timeline-phase', () => nav.setRange([phaseRef.start_seq, phaseRef.end_seq])) : null,
    budgetCheckbox(ctx),
    plan.perStream ? streamsCheckbox(ctx, plan.showStreams) : null,
    el('span', { class: 'muted' }, 'Scroll to zoom, drag to pan, double-click to reset.'),
    el('span', { class: 'muted spacer' }),
    el('span', { class: 'muted', id: 'timeline-range' }),
  );
}

function toolButton(label: string, title: string, id: string, run: () => void): HTMLElement {
  const b = el('vscode-button', { secondary: true, title, id }, label);
  b.addEventListener('click', run);
  return b;
}

function budgetCheckbox(ctx: Context): HTMLElement {
  const box = el('vscode-checkbox', { id: 'timeline-budget', checked: ctx.state.timeline.budget }, 'Show device memory');
  box.addEventListener('change', () => {
    const on = (box as unknown as { checked: boolean }).checked;
    ctx.update((st) => (st.timeline.budget = on), ['timeline']);
  });
  return box;
}

function streamsCheckbox(ctx: Context, checked: boolean): HTMLElement {
  const box = el('vscode-checkbox', { id: 'timeline-streams', checked, title: "The memory each stream's pool of the caching allocator holds (its segments), one line per stream" }, 'Reserved per stream');
  box.addEventListener('change', () => {
    const on = (box as unknown as { checked: boolean }).checked;
    ctx.update((st) => (st.timeline.streams = on), ['timeline']);
  });
  return box;
}

/** Names the stream lines below the chart, each with its highest value (chart.js's legend leaves them out). */
function streamLegend(s: Snapshot, streamCols: StreamColumn[]): HTMLElement {
  const legend = el('div', { class: 'legend', id: 'timeline-streams-legend' });
  for (const { stream, i, col } of streamCols) {
    const highest = s.timeline.points.reduce((m, p) => Math.max(m, p[col] ?? 0), 0);
    legend.appendChild(
      el(
        'span',
        { class: 'legend-item', 'data-stream': stream.id, 'data-bytes': highest, title: stream.place ? `made at ${stream.place}` : `stream ${stream.id}` },
        swatch(streamVariable(i)),
        el('span', null, `reserved: ${stream.name}`),
        el('span', { class: 'num' }, `highest ${formatBytes(highest)}`),
      ),
    );
  }
  return legend;
}

/**
 * A stacked area per category with bytes, then, when asked for, a line per stream; the data come
 * with each redraw, from column `columnOf[k]` for dataset k.
 */
function chartDatasets(plan: Plan, theme: Theme): { datasets: ChartDataset<'line', Points>[]; columnOf: number[] } {
  const datasets: ChartDataset<'line', Points>[] = plan.present.map(([c]) => ({
    label: CATEGORY_LABELS[c],
    data: [],
    borderColor: theme.category[c],
    backgroundColor: withAlpha(theme.category[c], 0.55),
    borderWidth: 1,
    pointRadius: 0,
    pointHoverRadius: 0,
    fill: 'stack' as const,
    tension: 0,
  }));
  const columnOf = plan.present.map(([, col]) => col);
  for (const { stream, i, col } of plan.showStreams ? plan.streamCols : []) {
    const color = theme.streams[i % theme.streams.length]!;
    datasets.push({
      label: `reserved: ${stream.name}`,
      data: [],
      borderColor: color,
      backgroundColor: color,
      borderWidth: 2,
      pointRadius: 0,
      pointHoverRadius: 0,
      fill: false,
      stack: `stream ${stream.id}`, // a stack of its own: a line at its value, not on the areas
      order: -1, // drawn over the areas
      tension: 0,
    });
    columnOf.push(col);
  }
  return { datasets, columnOf };
}

/** The chart, without data: each redraw sets the points and the x range. */
function timelineChart(canvas: HTMLCanvasElement, ctx: Context, plan: Plan, datasets: ChartDataset<'line', Points>[], rowAt: (i: number) => number[] | undefined): Chart<'line', Points> {
  const theme = ctx.theme;
  return new Chart<'line', Points>(canvas, {
    type: 'line',
    data: { datasets },
    plugins: [overlay(ctx)],
    options: {
      responsive: true,
      maintainAspectRatio: false,
      animation: false,
      parsing: false,
      normalized: true,
      spanGaps: true,
      layout: { padding: { top: 18, right: 8 } },
      interaction: { mode: 'index', intersect: false, axis: 'x' },
      scales: {
        x: {
          type: 'linear',
          grid: { color: theme.grid },
          border: { display: false },
          ticks: { color: theme.muted, maxTicksLimit: 10, callback: (v) => formatCount(Number(v)) },
          title: { display: true, text: 'event', color: theme.muted },
        },
        y: bytesAxis(theme, { stacked: true }),
      },
      plugins: {
        // Stream lines are named in the legend below the chart, with their values.
        legend: { position: 'bottom', onClick: () => undefined, labels: { filter: (item) => (item.datasetIndex ?? 0) < plan.present.length } },
        tooltip: {
          mode: 'index',
          intersect: false,
          filter: (item) => item.parsed.y !== 0,
          itemSort: (a, b) => (b.parsed.y ?? 0) - (a.parsed.y ?? 0),
          callbacks: tooltipCallbacks(ctx, plan, rowAt),
        },
      },
    },
  });
}

/** Hovering an event: its phase, what it allocated or freed and where, each category, the total. */
function tooltipCallbacks(ctx: Context, plan: Plan, rowAt: (i: number) => number[] | undefined) {
  const phases = ctx.derived.phases;
  return {
    title: (items: TooltipItem<'line'>[]) => {
      const seq = items[0]?.parsed.x ?? 0;
      const p = phaseAtSeq(phases, seq);
      return `event ${formatCount(seq)}${p ? ` · ${p.phase.name}` : ''}`;
    },
    beforeBody: (items: TooltipItem<'line'>[]) => {
      const seq = items[0]?.parsed.x ?? 0;
      const ev = ctx.derived.events.at(seq);
      if (!ev) return '';
      const module = ev.module === null ? 'no module' : ev.module === '' ? 'the model' : ev.module;
      return `${ev.kind === 'alloc' ? 'allocates' : 'frees'} ${formatBytes(ev.bytes)}: ${ev.op} in ${module}`;
    },
    label: (item: TooltipItem<'line'>) => ` ${item.dataset.label}: ${formatBytes(item.parsed.y ?? 0)}`,
    footer: (items: TooltipItem<'line'>[]) => {
      const row = rowAt(items[0]?.dataIndex ?? -1);
      if (!row) return '';
      const reserved = plan.showStreams && plan.reservedCol >= 0 ? ` · reserved ${formatBytes(row[plan.reservedCol]!)}` : '';
      return `total ${formatBytes(row[plan.cols.total]!)}${reserved}`;
    },
  };
}

/**
 * Under the areas, the phases (shaded, named); over them, the device memory line (when shown and
 * on the scale) and the peak marker (when in view).
 */
function overlay(ctx: Context): Plugin<'line'> {
  const s = ctx.snapshot;
  const theme = ctx.theme;
  const phases = ctx.derived.phases;
  const budget = s.meta.device.total_memory_bytes;
  const peak = s.summary.peak_bytes;
  return {
    id: 'phaseBands',
    beforeDatasetsDraw(chart) {
      drawPhaseBands(chart, phases, ctx.state.phase, theme);
    },
    afterDatasetsDraw(chart) {
      const y = chart.scales['y']!;
      const g = chart.ctx;
      g.save();
      if (ctx.state.timeline.budget && budget <= (y.max as number)) drawBudgetLine(chart, budget, theme);
      drawPeakMarker(chart, s.summary.peak_seq, peak, theme);
      g.restore();
    },
  };
}

/** A band per phase, alternately shaded, the filtered one highlighted; its name above, cut to fit. */
function drawPhaseBands(chart: Chart<'line'>, phases: PhaseRef[], selected: number | null, theme: Theme): void {
  const x = chart.scales['x']!;
  const area = chart.chartArea;
  const g = chart.ctx;
  g.save();
  g.font = `${Math.max(10, theme.fontSize - 2)}px ${theme.fontFamily}`;
  g.textBaseline = 'bottom';
  phases.forEach((p, i) => {
    const x0 = Math.max(area.left, x.getPixelForValue(p.phase.start_seq));
    const x1 = Math.min(area.right, x.getPixelForValue(p.phase.end_seq));
    if (x1 <= x0) return;
    const active = selected === p.index;
    g.fillStyle = active ? theme.bandActive : i % 2 ? theme.bandAlt : theme.band;
    g.fillRect(x0, area.top, x1 - x0, area.bottom - area.top);
    g.fillStyle = active ? theme.foreground : theme.muted;
    const name = p.phase.name;
    const w = g.measureText(name).width;
    if (w + 6 <= x1 - x0) g.fillText(name, x0 + 3, area.top - 2);
    else if (x1 - x0 > 24) {
      let short = name;
      while (short.length > 1 && g.measureText(`${short}…`).width + 6 > x1 - x0) short = short.slice(0, -1);
      g.fillText(`${short}…`, x0 + 3, area.top - 2);
    }
  });
  g.restore();
}

/** A dashed line across the chart at the device's memory, labelled at its right end. */
function drawBudgetLine(chart: Chart<'line'>, budget: number, theme: Theme): void {
  const y = chart.scales['y']!;
  const area = chart.chartArea;
  const g = chart.ctx;
  const py = y.getPixelForValue(budget);
  g.strokeStyle = theme.budget;
  g.setLineDash([6, 4]);
  g.beginPath();
  g.moveTo(area.left, py);
  g.lineTo(area.right, py);
  g.stroke();
  g.setLineDash([]);
  g.fillStyle = theme.budget;
  g.textAlign = 'right';
  g.textBaseline = 'bottom';
  g.fillText(`device memory ${formatBytes(budget)}`, area.right - 4, py - 3);
}

/** The peak: a dotted drop line, an arrowhead and its bytes, if its event is in view. */
function drawPeakMarker(chart: Chart<'line'>, peakSeq: number, peak: number, theme: Theme): void {
  const x = chart.scales['x']!;
  const y = chart.scales['y']!;
  const area = chart.chartArea;
  const g = chart.ctx;
  const px = x.getPixelForValue(peakSeq);
  if (px >= area.left && px <= area.right) {
    const py = y.getPixelForValue(peak);
    g.strokeStyle = theme.peak;
    g.setLineDash([2, 3]);
    g.beginPath();
    g.moveTo(px, py);
    g.lineTo(px, area.bottom);
    g.stroke();
    g.setLineDash([]);
    g.fillStyle = theme.peak;
    g.beginPath();
    g.moveTo(px, py);
    g.lineTo(px - 5, py - 8);
    g.lineTo(px + 5, py - 8);
    g.closePath();
    g.fill();
    g.font = `600 ${Math.max(11, theme.fontSize - 1)}px ${theme.fontFamily}`;
    const label = `peak ${formatBytes(peak)}`;
    const w = g.measureText(label).width;
    g.textAlign = px + w + 12 > area.right ? 'right' : 'left';
    g.textBaseline = 'middle';
    g.fillText(label, g.textAlign === 'right' ? px - 8 : px + 8, py - 6);
  }
}
