// Turns untrusted input into a Snapshot, or into one readable error: the format and version
// first (the messages a user acts on), then the JSON Schema (compiled ahead of time, see
// scripts/gen-snapshot-validator.mjs), then every index into the document's own tables — the
// same checks, in the same order, as python/memlens/snapshot/references.py
// (test/unit/validate-parity.test.ts runs both on the same mutated snapshots).
//
// In two stages, so a 100,000-tensor snapshot paints before all of it is checked: `validateTop`
// checks everything but the items of `tensors` and `allocations` (small and quick), and
// `deepChecks` checks those in slices, yielding between them. Until it finishes, only views that
// read the top part may render. `validateSnapshot` runs both at once.
import {
  validate as schemaValidate,
  validateAllocations as allocationsValidate,
  validateTensor as tensorValidate,
} from './schema-validator.generated';
import type { Allocations, Snapshot } from './snapshot';

export const FORMAT = 'memlens.snapshot';
export const VERSION = 1;

export type Parsed = { ok: true; snapshot: Snapshot } | { ok: false; error: string };

interface SchemaError {
  instancePath: string;
  keyword: string;
  message?: string;
  params?: Record<string, unknown>;
}
type SchemaValidator = ((data: unknown) => boolean) & { errors?: SchemaError[] | null };

const validateDocument = schemaValidate as SchemaValidator;
const validateTensor = tensorValidate as SchemaValidator;
const validateAllocations = allocationsValidate as SchemaValidator;

/** Parses JSON text and validates all of it. Never throws. */
export function parseSnapshot(text: string, name = 'snapshot'): Parsed {
  let doc: unknown;
  try {
    doc = JSON.parse(text);
  } catch (e) {
    const detail = e instanceof Error ? e.message : String(e);
    return { ok: false, error: `${name}: not valid JSON (${detail})` };
  }
  return validateSnapshot(doc, name);
}

/** Validates an already parsed document, all of it, at once. Never throws. */
export function validateSnapshot(doc: unknown, name = 'snapshot'): Parsed {
  const top = validateTop(doc, name);
  if (!top.ok) return top;
  const checks = deepChecks(top.snapshot, name);
  for (;;) {
    const step = checks.next();
    if (step.done) return step.value === null ? top : { ok: false, error: step.value };
  }
}

/** Everything except the items of `tensors` and `allocations`. */
export function validateTop(doc: unknown, name = 'snapshot'): Parsed {
  if (!isObject(doc) || doc['format'] !== FORMAT) {
    return { ok: false, error: `${name}: not a memlens snapshot (expected "format": "${FORMAT}")` };
  }
  const version = doc['version'];
  if (version !== VERSION) {
    return {
      ok: false,
      error:
        `${name}: snapshot version ${JSON.stringify(version) ?? 'undefined'} is not supported ` +
        `by this panel (it reads version ${VERSION}); upgrade Torch Memory Lens to read it`,
    };
  }
  if ('tensors' in doc && !Array.isArray(doc['tensors'])) {
    return { ok: false, error: `${name}: invalid snapshot at tensors: must be array` };
  }
  // The whole schema on a copy without the big arrays; they are checked by deepChecks.
  const shallow = { ...doc, ...('tensors' in doc ? { tensors: [] } : {}), ...('allocations' in doc ? { allocations: null } : {}) };
  if (!validateDocument(shallow)) return { ok: false, error: schemaMessage(name, '', validateDocument.errors) };
  const snapshot = doc as unknown as Snapshot;
  const bad = checkTopReferences(snapshot);
  if (bad) return { ok: false, error: `${name}: invalid snapshot at ${bad}` };
  return { ok: true, snapshot };
}

/**
 * Checks the tensors and the allocation stream in slices of `slice` items, yielding after each;
 * returns the first error, or null.
 */
export function* deepChecks(s: Snapshot, name = 'snapshot', slice = 10_000): Generator<void, string | null> {
  const tensors = s.tensors as unknown[];
  const nStacks = s.stacks.length;
  const nModules = s.modules.length;
  const nPhases = Math.max(s.phases.length, 1);
  for (let i = 0; i < tensors.length; i++) {
    if (!validateTensor(tensors[i])) return schemaMessage(name, `/tensors/${i}`, validateTensor.errors);
    const t = s.tensors[i]!;
    if (t.stack >= nStacks || t.module >= nModules || t.phase >= nPhases) {
      return `${name}: invalid snapshot at tensors/${i}: index out of range`;
    }
    if (i % slice === slice - 1) yield;
  }
  if (s.summary.peak_tensor >= s.tensors.length) {
    return `${name}: invalid snapshot at summary/peak_tensor: index out of range`;
  }
  const a = (s as { allocations?: unknown }).allocations;
  if (a === undefined || a === null) return null;
  // The schema on the object with empty columns (required keys, types), then column by column.
  if (!isObject(a)) return schemaMessage(name, '/allocations', [{ instancePath: '', keyword: 'type', message: 'must be null or object' }]);
  const empty: Record<string, unknown> = { ...a };
  for (const key of COLUMNS) if (Array.isArray(a[key])) empty[key] = [];
  if (!validateAllocations(empty)) return schemaMessage(name, '/allocations', validateAllocations.errors);
  const alloc = a as unknown as Allocations;
  const n = alloc.bytes.length;
  for (const key of [...COLUMNS, 'backward', 'subcategory'] as const) {
    const column = alloc[key];
    if (column && column.length !== n) return `${name}: invalid snapshot at allocations/${key}: ${column.length} entries, expected ${n}`;
  }
  for (let start = 0; start < n; start += slice * 4) {
    const end = Math.min(n, start + slice * 4);
    const part: Record<string, unknown> = { ...empty };
    for (const key of COLUMNS) part[key] = alloc[key].slice(start, end);
    if (!validateAllocations(part)) {
      const err = (validateAllocations.errors ?? []).reduce<SchemaError | undefined>((best, e) => (!best || e.instancePath.length > best.instancePath.length ? e : best), undefined);
      const path = (err?.instancePath ?? '').replace(/^\/(\w+)\/(\d+)/, (_m, key: string, i: string) => `/${key}/${Number(i) + start}`);
      return schemaMessage(name, `/allocations`, err ? [{ ...err, instancePath: path }] : null);
    }
    for (let i = start; i < end; i++) {
      if (alloc.module[i]! >= nModules || alloc.op[i]! >= s.ops.length || alloc.stack[i]! >= nStacks || alloc.device[i]! >= alloc.devices.length) {
        return `${name}: invalid snapshot at allocations/${i}: index out of range`;
      }
    }
    yield;
  }
  return null;
}

const COLUMNS = ['device', 'bytes', 'requested_bytes', 'category', 'module', 'op', 'stack', 'stream', 'alloc_seq', 'free_seq'] as const;

/** The path of the first index outside its table among the small tables, or null. */
function checkTopReferences(s: Snapshot): string | null {
  const nFrames = s.frames.length;
  for (let i = 0; i < s.stacks.length; i++) {
    for (const f of s.stacks[i] ?? []) {
      if (f >= nFrames) return `stacks/${i}: frame index out of range`;
    }
  }
  const cols = s.timeline.columns.length;
  for (let i = 0; i < s.timeline.points.length; i++) {
    if (s.timeline.points[i]!.length !== cols) {
      return `timeline/points/${i}: ${s.timeline.points[i]!.length} values, expected ${cols}`;
    }
  }
  const names = new Set(s.timeline.columns);
  for (const [i, stream] of (s.timeline.streams ?? []).entries()) {
    if (!names.has(stream.column)) return `timeline/streams/${i}: column not in timeline/columns`;
  }
  const oom = s.summary.oom;
  if (oom && (oom.stack ?? 0) >= s.stacks.length) return 'summary/oom/stack: index out of range';
  return null;
}

function schemaMessage(name: string, prefix: string, errors: SchemaError[] | null | undefined): string {
  // Of the branches of a oneOf ("null, or an object with…"), the deepest error says most.
  const err = (errors ?? []).reduce<SchemaError | undefined>((best, e) => (!best || e.instancePath.length > best.instancePath.length ? e : best), undefined);
  const path = `${prefix}${err?.instancePath ?? ''}`;
  const where = path ? path.slice(1) : '(top level)';
  let message = err?.message ?? 'does not match the schema';
  const allowed = err?.params?.['allowedValues'];
  if (Array.isArray(allowed)) message += `: ${allowed.map((v) => JSON.stringify(v)).join(', ')}`;
  return `${name}: invalid snapshot at ${where}: ${message.slice(0, 200)}`;
}

function isObject(v: unknown): v is Record<string, unknown> {
  return typeof v === 'object' && v !== null && !Array.isArray(v);
}
