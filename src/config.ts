// The extension's settings (package.json "configuration", section `memlens`) as one typed
// value, and what follows from them: the settings the server reads (protocol.Settings), the
// parameters of a trace, and which changes need a server restart. The settings only the server
// reads are passed on as the user wrote them: the server validates them, once, and says which
// one it replaced by its default (server/settings.py).
// No `vscode` import: settings.ts reads the values and hands them in.
import type { Settings, TraceParams } from '../common/protocol';

export type AnnotationStyle = 'decorations' | 'inlayHints' | 'off';
export type LogLevel = 'error' | 'warning' | 'info' | 'debug' | 'trace';

export interface Config {
  /** "" when not set: the recipe's or launch configuration's device, else h100-80gb (the
   * setting's default must not win over a recipe's `device`). */
  device: string;
  /** null: what the launch configuration or torchrun line says, else 1. */
  worldSize: number | null;
  rank: number;
  /** null: the recipe's, else 2. */
  iterations: number | null;
  /** The settings only the server reads, unvalidated; absent where not set. */
  server: ServerOwned;
  annotationStyle: AnnotationStyle;
  /** Share of the peak (0..1) below which annotations are not painted. */
  annotationThreshold: number;
  /** "" to find one: the Python extension's, else python3 on PATH. */
  python: string;
  logLevel: LogLevel;
}

/** protocol.Settings' names of the settings only the server reads (and their keys). */
export const SERVER_OWNED = {
  budget: 'budget',
  traceTimeout: 'traceTimeout',
  memoryLimitMB: 'memoryLimitMB',
  traceOnSave: 'traceOnSave',
  hotLines: 'annotations.hotLines',
} as const;
export type ServerOwned = Partial<Record<keyof typeof SERVER_OWNED, unknown>>;

export const DEFAULTS: Readonly<Config> = {
  device: '',
  worldSize: null,
  rank: 0,
  iterations: null,
  server: {},
  annotationStyle: 'decorations',
  annotationThreshold: 0,
  python: '',
  logLevel: 'info',
};

/** Setting keys (under `memlens.`) of each Config field. */
export const KEYS: Readonly<Record<Exclude<keyof Config, 'server'>, string>> = {
  device: 'device',
  worldSize: 'worldSize',
  rank: 'rank',
  iterations: 'iterations',
  annotationStyle: 'annotations.style',
  annotationThreshold: 'annotations.threshold',
  python: 'python',
  logLevel: 'logLevel',
};

/** Settings whose change restarts the server (they decide how it is started). */
export const RESTART_KEYS: readonly string[] = [KEYS.python, KEYS.logLevel];

const STYLES: readonly AnnotationStyle[] = ['decorations', 'inlayHints', 'off'];
const LEVELS: readonly LogLevel[] = ['error', 'warning', 'info', 'debug', 'trace'];

function int(v: unknown, min: number): number | undefined {
  return typeof v === 'number' && Number.isInteger(v) && v >= min ? v : undefined;
}

/** A Config from a getter of raw values (`workspace.getConfiguration('memlens').get`); a
 * missing or malformed value takes its default. */
export function readConfig(get: (key: string) => unknown): Config {
  const raw = (field: keyof typeof KEYS): unknown => get(KEYS[field]);
  const str = (field: keyof typeof KEYS, fallback: string): string => {
    const v = raw(field);
    return typeof v === 'string' ? v.trim() : fallback;
  };
  const style = raw('annotationStyle');
  const level = raw('logLevel');
  const threshold = raw('annotationThreshold');
  const server: ServerOwned = {};
  for (const [name, key] of Object.entries(SERVER_OWNED)) {
    const value = get(key);
    if (value !== undefined) server[name as keyof ServerOwned] = value;
  }
  return {
    device: str('device', DEFAULTS.device).toLowerCase(),
    worldSize: int(raw('worldSize'), 1) ?? null,
    rank: int(raw('rank'), 0) ?? 0,
    iterations: int(raw('iterations'), 1) ?? null,
    server,
    annotationStyle: STYLES.includes(style as AnnotationStyle) ? (style as AnnotationStyle) : DEFAULTS.annotationStyle,
    annotationThreshold: typeof threshold === 'number' && threshold >= 0 && threshold <= 1 ? threshold : 0,
    python: str('python', ''),
    logLevel: LEVELS.includes(level as LogLevel) ? (level as LogLevel) : DEFAULTS.logLevel,
  };
}

/** What the server is told (initializationOptions, workspace/configuration,
 * didChangeConfiguration). Inlay hints come from the server only in the "inlayHints" style. */
export function serverSettings(c: Config): Settings {
  return {
    ...(c.server as Settings),
    ...(c.device ? { device: c.device } : {}),
    iterations: c.iterations,
    inlayHints: c.annotationStyle === 'inlayHints',
    // The worker runs with the server's interpreter, which is the one chosen for the server.
    python: null,
  };
}

export interface TraceOptions {
  allRanks?: boolean;
  /** Overrides the setting (Trace All Ranks asks for one when nothing says it). */
  worldSize?: number;
  device?: string;
}

/**
 * The memlens.trace arguments for a target. Distributed options are sent only when something
 * asks for them: a world size (setting or option), a rank other than 0, or all ranks.
 */
export function traceParams(targetId: string, c: Config, options: TraceOptions = {}): TraceParams {
  const p: TraceParams = { targetId };
  const device = options.device ?? c.device;
  if (device) p.device = device;
  if (c.iterations !== null) p.iterations = c.iterations;
  const world = options.worldSize ?? c.worldSize;
  if (world !== null) p.worldSize = world;
  if (options.allRanks) p.allRanks = true;
  else if (c.rank > 0 || (world !== null && world > 1)) p.rank = c.rank;
  return p;
}

/** The server's `--log-level` (Python logging on its stderr). What the server tells the log
 * at "info" comes as LSP log messages; its Python logging (pygls logs every message it sends
 * at INFO) only shows from "debug" on. */
export function serverLogLevel(level: LogLevel): string {
  return { error: 'ERROR', warning: 'WARNING', info: 'WARNING', debug: 'INFO', trace: 'DEBUG' }[level];
}
