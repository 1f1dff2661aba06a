// The result of a search (`memlens.fit`'s FitReport, common/protocol.ts) as the panel receives it:
// untrusted JSON, checked before anything renders, so that a malformed payload shows its error
// instead of a half-drawn table. Only checks: every number shown comes from the server.
import type { FitAxis, FitCounts, FitReport, FitRow } from './protocol';

export type FitCheck = { ok: true; report: FitReport } | { ok: false; error: string };

const VERDICTS = new Set(['fits', 'oom', 'error']);
const SORTS = new Set(['gpus', 'micro-batch', 'recompute', 'peak']);
const COUNTS: (keyof FitCounts)[] = ['points', 'traced', 'resumed', 'pruned', 'implied', 'notTraced', 'fits', 'oom', 'errors'];

type Obj = Record<string, unknown>;
const isObj = (v: unknown): v is Obj => typeof v === 'object' && v !== null && !Array.isArray(v);
const isStrings = (v: unknown): v is string[] => Array.isArray(v) && v.every((x) => typeof x === 'string');
/** Bytes and counts are integers (bytes may be negative: a headroom short of the card). */
const isInt = (v: unknown): v is number => typeof v === 'number' && Number.isSafeInteger(v);
const intOrNull = (v: unknown): boolean => v === null || isInt(v);

class Invalid extends Error {}

function need(cond: boolean, where: string, what: string): void {
  if (!cond) throw new Invalid(`${where}: ${what}`);
}

function checkAxis(a: unknown, where: string): FitAxis {
  need(isObj(a), where, 'not an object');
  const o = a as Obj;
  need(typeof o['name'] === 'string', where, 'name is not a string');
  need(isStrings(o['values']) && (o['values'] as string[]).length > 0, where, 'values is not a list of strings');
  need(typeof o['target'] === 'string' && typeof o['direction'] === 'string', where, 'target and direction must be strings');
  return a as FitAxis;
}

function checkRow(r: unknown, where: string, axes: number): FitRow {
  need(isObj(r), where, 'not an object');
  const o = r as Obj;
  need(typeof o['key'] === 'string', where, 'key is not a string');
  need(isStrings(o['values']) && (o['values'] as string[]).length === axes, where, `values must be ${axes} strings, one per axis`);
  need(isInt(o['gpus']) && (o['gpus'] as number) >= 1, where, 'gpus is not a positive integer');
  need(o['verdict'] === null || VERDICTS.has(o['verdict'] as string), where, `verdict ${JSON.stringify(o['verdict'])} is not fits, oom, error or null`);
  need(typeof o['source'] === 'string' && typeof o['reason'] === 'string', where, 'source and reason must be strings');
  need(o['by'] === null || typeof o['by'] === 'string', where, 'by is not a string or null');
  for (const k of ['worstRank', 'peakBytes', 'reservedPeakBytes', 'headroomBytes', 'ranksTraced']) {
    need(intOrNull(o[k]), where, `${k} is not an integer or null`);
  }
  need(o['snapshot'] === null || typeof o['snapshot'] === 'string', where, 'snapshot is not a path or null');
  return r as FitRow;
}

/** The report if `v` is a FitReport, else what is wrong with it (and where). Never throws. */
export function validateFitReport(v: unknown, name = 'the search'): FitCheck {
  try {
    need(isObj(v), name, 'not an object');
    const o = v as Obj;
    for (const k of ['target', 'device', 'runDir', 'html']) need(typeof o[k] === 'string', name, `${k} is not a string`);
    need(isInt(o['deviceTotalBytes']) && (o['deviceTotalBytes'] as number) > 0, name, 'deviceTotalBytes is not a positive integer');
    need(SORTS.has(o['sort'] as string), name, `sort ${JSON.stringify(o['sort'])} is not one of ${[...SORTS].join(', ')}`);
    need(typeof o['interrupted'] === 'boolean', name, 'interrupted is not a boolean');
    need(Array.isArray(o['axes']) && (o['axes'] as unknown[]).length > 0, name, 'axes is not a list');
    const axes = (o['axes'] as unknown[]).map((a, i) => checkAxis(a, `${name}: axes[${i}]`));
    need(isObj(o['counts']), name, 'counts is not an object');
    for (const k of COUNTS) need(isInt((o['counts'] as Obj)[k]), name, `counts.${k} is not an integer`);
    for (const list of ['frontier', 'excluded'] as const) {
      need(Array.isArray(o[list]), name, `${list} is not a list`);
      (o[list] as unknown[]).forEach((r, i) => checkRow(r, `${name}: ${list}[${i}]`, axes.length));
    }
    return { ok: true, report: v as FitReport };
  } catch (e) {
    if (e instanceof Invalid) return { ok: false, error: e.message };
    throw e;
  }
}
