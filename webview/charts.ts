// chart.js, registered with only the parts the panel draws (bars, stacked areas, lines), and
// the options every chart shares: theme colours and fonts, byte-formatted axes, no animation
// (a panel that re-renders on every filter change should not wobble).
import {
  BarController,
  BarElement,
  CategoryScale,
  Chart,
  Filler,
  Legend,
  LineController,
  LineElement,
  LinearScale,
  PointElement,
  ScatterController,
  Tooltip,
  type ChartOptions,
  type ChartType,
} from 'chart.js';
import { formatBytes } from './data/format';
import { byteTicks } from './data/ticks';
import type { Theme } from './theme';

Chart.register(
  BarController,
  BarElement,
  CategoryScale,
  Filler,
  Legend,
  LineController,
  LineElement,
  LinearScale,
  PointElement,
  ScatterController,
  Tooltip,
);

export { Chart };

export function applyThemeDefaults(theme: Theme): void {
  Chart.defaults.color = theme.foreground;
  Chart.defaults.borderColor = theme.grid;
  Chart.defaults.font.family = theme.fontFamily;
  Chart.defaults.font.size = Math.max(11, theme.fontSize - 1);
  Chart.defaults.animation = false;
  Chart.defaults.maintainAspectRatio = false;
  Chart.defaults.plugins.tooltip.backgroundColor = theme.dark ? 'rgba(37, 37, 38, 0.96)' : 'rgba(255, 255, 255, 0.97)';
  Chart.defaults.plugins.tooltip.titleColor = theme.foreground;
  Chart.defaults.plugins.tooltip.bodyColor = theme.foreground;
  Chart.defaults.plugins.tooltip.footerColor = theme.foreground;
  Chart.defaults.plugins.tooltip.borderColor = theme.border;
  Chart.defaults.plugins.tooltip.borderWidth = 1;
  Chart.defaults.plugins.tooltip.padding = 8;
  Chart.defaults.plugins.tooltip.boxPadding = 4;
  Chart.defaults.plugins.legend.labels.boxWidth = 12;
  Chart.defaults.plugins.legend.labels.boxHeight = 12;
}

interface ByteScale {
  min: number;
  max: number;
  ticks: { value: number }[];
}

/** A value axis in bytes, with ticks at round binary sizes and its top on a tick. */
export function bytesAxis(theme: Theme, extra: Record<string, unknown> = {}): Record<string, unknown> {
  return {
    type: 'linear',
    beginAtZero: true,
    grid: { color: theme.grid },
    border: { display: false },
    ticks: { callback: (v: number | string) => formatBytes(Number(v)), color: theme.muted },
    // chart.js picks decimal ticks; replace them and let the axis end on the last one.
    afterBuildTicks: (scale: ByteScale) => {
      const ticks = byteTicks(scale.max);
      scale.max = ticks.at(-1) ?? scale.max;
      scale.ticks = ticks.filter((v) => v >= scale.min).map((value) => ({ value }));
    },
    ...extra,
  };
}

export function baseOptions<T extends ChartType>(): ChartOptions<T> {
  return {
    responsive: true,
    maintainAspectRatio: false,
    animation: false,
    normalized: true,
  } as ChartOptions<T>;
}
