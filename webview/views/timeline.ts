// Timeline: live bytes over the trace (x: event index), stacked by category, phases shaded and
// named, the peak marked. Wheel zooms, dragging pans, a double click resets. The snapshot's
// timeline is down-sampled again to the pixels at hand; every bucket keeps its highest row, so
// the drawn curve reaches the peak at any zoom. Hover names the event's op and module.
// Snapshots of CUDA targets with several streams can add a line per stream: the reserved bytes
// of that stream's pool, read from its own column of the timeline (the engine's numbers).
import type { ChartDataset, Plugin, TooltipItem } from 'chart.js';
import { CATEGORY_LABELS } from '../data/categories';
import { streamVariable, withAlpha } from '../data/colors';
import { downsample, timelineColumns } from '../data/downsample';
import { formatBytes, formatCount } from '../data/format';
import { phaseAtSeq } from '../data/phases';
import { CATEGORIES } from '../../common/snapshot';
import type { Context } from '../context';
import { Chart, bytesAxis } from '../charts';
import { el, replace, swatch } from '../dom';

const MIN_SPAN = 8;

export class TimelineView {
  private chart: Chart<'line', { x: number; y: number }[]> | null = null;
  private saveTimer = 0;
  private listeners = new AbortController();

  constructor(private readonly root: HTMLElement, private readonly ctx: () => Context) {}

  render(): void {
    const ctx = this.ctx();
    const s = ctx.snapshot;
    this.dispose();
    const cols = timelineColumns(s.timeline.columns);
    if (!cols || s.timeline.points.length === 0) {
      replace(this.root, el('p', { class: 'empty' }, 'This snapshot has no timeline.'));
      return;
    }
    const categoryCols = CATEGORIES.map((c) => [c, s.timeline.columns.indexOf(c)] as const).filter(([, i]) => i >= 0);
    const present = categoryCols.filter(([, i]) => s.timeline.points.some((p) => (p[i] ?? 0) > 0));
    const fullRange: [number, number] = [0, Math.max(s.timeline.events - 1, s.timeline.points.at(-1)![cols.seq]!, 1)];
    const theme = ctx.theme;
    const budget = s.meta.device.total_memory_bytes;
    const peak = s.summary.peak_bytes;
    // Reserved per stream: only where the snapshot has a column for more than one stream.
    const streamCols = (s.timeline.streams ?? [])
      .map((stream, i) => ({ stream, i, col: s.timeline.columns.indexOf(stream.column) }))
      .filter((x) => x.col >= 0);
    const perStream = streamCols.length > 1;
    const showStreams = perStream && ctx.state.timeline.streams;
    const reservedCol = s.timeline.columns.indexOf('reserved');

    const button = (label: string, title: string, id: string, run: () => void) => {
      const b = el('vscode-button', { secondary: true, title, id }, label);
      b.addEventListener('click', run);
      return b;
    };
    const range = (): [number, number] => ctx.state.timeline.range ?? fullRange;
    const setRange = (r: [number, number] | null) => {
      let next = r;
      if (next) {
        let [lo, hi] = next;
        if (hi - lo < MIN_SPAN) {
          const mid = (lo + hi) / 2;
          [lo, hi] = [mid - MIN_SPAN / 2, mid + MIN_SPAN / 2];
        }
        const span = Math.min(hi - lo, fullRange[1] - fullRange[0]);
        lo = Math.max(fullRange[0], Math.min(lo, fullRange[1] - span));
        hi = lo + span;
        next = lo <= fullRange[0] && hi >= fullRange[1] ? null : [lo, hi];
      }
      ctx.state.timeline.range = next;
      this.redraw();
      window.clearTimeout(this.saveTimer);
      this.saveTimer = window.setTimeout(() => ctx.update(() => undefined, []), 300);
    };
    const zoom = (factor: number, around?: number) => {
      const [lo, hi] = range();
      const c = around ?? (lo + hi) / 2;
      setRange([c - (c - lo) * factor, c + (hi - c) * factor]);
    };
    const budgetBox = el('vscode-checkbox', { id: 'timeline-budget', checked: ctx.state.timeline.budget }, 'Show device memory');
    budgetBox.addEventListener('change', () => {
      const on = (budgetBox as unknown as { checked: boolean }).checked;
      ctx.update((st) => (st.timeline.budget = on), ['timeline']);
    });
    let streamsBox: HTMLElement | null = null;
    if (perStream) {
      streamsBox = el('vscode-checkbox', { id: 'timeline-streams', checked: showStreams, title: "The memory each stream's pool of the caching allocator holds (its segments), one line per stream" }, 'Reserved per stream');
      streamsBox.addEventListener('change', () => {
        const on = (streamsBox as unknown as { checked: boolean }).checked;
        ctx.update((st) => (st.timeline.streams = on), ['timeline']);
      });
    }
    const streamLegend = showStreams ? el('div', { class: 'legend', id: 'timeline-streams-legend' }) : null;
    for (const { stream, i, col } of showStreams ? streamCols : []) {
      const highest = s.timeline.points.reduce((m, p) => Math.max(m, p[col] ?? 0), 0);
      streamLegend!.appendChild(
        el(
          'span',
          { class: 'legend-item', 'data-stream': stream.id, 'data-bytes': highest, title: stream.place ? `made at ${stream.place}` : `stream ${stream.id}` },
          swatch(streamVariable(i)),
          el('span', null, `reserved: ${stream.name}`),
          el('span', { class: 'num' }, `highest ${formatBytes(highest)}`),
        ),
      );
    }
    const phaseRef = ctx.state.phase !== null ? s.phases[ctx.state.phase] : undefined;
    const toolbar = el(
      'div',
      { class: 'toolbar' },
      button('−', 'Zoom out', 'timeline-zoom-out', () => zoom(1.6)),
      button('+', 'Zoom in', 'timeline-zoom-in', () => zoom(1 / 1.6)),
      button('Whole trace', 'Reset the zoom (double click)', 'timeline-reset', () => setRange(null)),
      phaseRef ? button(`Zoom to ${phaseRef.name}`, 'Zoom to the filtered phase', 'timeline-phase', () => setRange([phaseRef.start_seq, phaseRef.end_seq])) : null,
      budgetBox,
      streamsBox,
      el('span', { class: 'muted' }, 'Scroll to zoom, drag to pan, double-click to reset.'),
      el('span', { class: 'muted spacer' }),
      el('span', { class: 'muted', id: 'timeline-range' }),
    );
    const canvas = el('canvas', { id: 'timeline-chart', role: 'img', 'aria-label': 'Live bytes over the trace' });
    const box = el('div', { class: 'chart-box timeline-chart' }, canvas);
    replace(
      this.root,
      toolbar,
      box,
      streamLegend,
      el('p', { class: 'muted small' }, `${formatCount(s.timeline.events)} events; the snapshot keeps ${formatCount(s.timeline.points.length)} points (each the highest of its stretch).`),
    );

    const phases = ctx.derived.phases;
    const bands: Plugin<'line'> = {
      id: 'phaseBands',
      beforeDatasetsDraw(chart) {
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
          const active = ctx.state.phase === p.index;
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
      },
      afterDatasetsDraw(chart) {
        const x = chart.scales['x']!;
        const y = chart.scales['y']!;
        const area = chart.chartArea;
        const g = chart.ctx;
        g.save();
        if (ctx.state.timeline.budget && budget <= (y.max as number)) {
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
        const px = x.getPixelForValue(s.summary.peak_seq);
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
        g.restore();
      },
    };

    const datasets: ChartDataset<'line', { x: number; y: number }[]>[] = present.map(([c]) => ({
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
    const columnOf = present.map(([, col]) => col);
    for (const { stream, i, col } of showStreams ? streamCols : []) {
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

    const chart = new Chart<'line', { x: number; y: number }[]>(canvas, {
      type: 'line',
      data: { datasets },
      plugins: [bands],
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
          legend: { position: 'bottom', onClick: () => undefined, labels: { filter: (item) => (item.datasetIndex ?? 0) < present.length } },
          tooltip: {
            mode: 'index',
            intersect: false,
            filter: (item) => item.parsed.y !== 0,
            itemSort: (a, b) => (b.parsed.y ?? 0) - (a.parsed.y ?? 0),
            callbacks: {
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
                const reserved = showStreams && reservedCol >= 0 ? ` · reserved ${formatBytes(row[reservedCol]!)}` : '';
                return `total ${formatBytes(row[cols.total]!)}${reserved}`;
              },
            },
          },
        },
      },
    });
    this.chart = chart;

    let rows: number[][] = [];
    const rowAt = (i: number) => rows[i];
    this.redraw = () => {
      const [lo, hi] = range();
      const width = Math.max(200, chart.chartArea ? chart.chartArea.right - chart.chartArea.left : box.clientWidth);
      rows = downsample(s.timeline.points, cols, Math.round(width * 1.5), lo, hi);
      chart.data.datasets.forEach((d, k) => {
        const col = columnOf[k]!;
        d.data = rows.map((r) => ({ x: r[cols.seq]!, y: r[col] ?? 0 }));
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
    };
    this.redraw();

    // Zoom and pan.
    const seqAt = (clientX: number) => {
      const rect = canvas.getBoundingClientRect();
      return chart.scales['x']!.getValueForPixel(clientX - rect.left) ?? 0;
    };
    canvas.addEventListener(
      'wheel',
      (e) => {
        e.preventDefault();
        zoom(e.deltaY > 0 ? 1.25 : 0.8, seqAt(e.clientX));
      },
      { passive: false },
    );
    let drag: { x: number; range: [number, number] } | null = null;
    canvas.addEventListener('mousedown', (e) => {
      if (e.button !== 0) return;
      drag = { x: e.clientX, range: range() };
      canvas.classList.add('dragging');
    });
    const signal = this.listeners.signal;
    window.addEventListener('mousemove', (e) => {
      if (!drag) return;
      const [lo, hi] = drag.range;
      const area = chart.chartArea;
      const perPixel = (hi - lo) / Math.max(1, area.right - area.left);
      const shift = (drag.x - e.clientX) * perPixel;
      if (Math.abs(drag.x - e.clientX) > 2) setRange([lo + shift, hi + shift]);
    }, { signal });
    window.addEventListener('mouseup', () => {
      drag = null;
      canvas.classList.remove('dragging');
    }, { signal });
    canvas.addEventListener('dblclick', () => setRange(null));
  }

  private redraw: () => void = () => undefined;

  dispose(): void {
    this.chart?.destroy();
    this.chart = null;
    this.listeners.abort();
    this.listeners = new AbortController();
  }
}
