// Turns untrusted input into a Snapshot, or into one readable error: the format and version
// first (the messages a user acts on), then the JSON Schema (compiled ahead of time, see
// scripts/gen-snapshot-validator.mjs), then every index into the document's own tables — the
// same checks as python/memlens/snapshot/io.py.
import { validate as schemaValidate } from './schema-validator.generated';
import type { Snapshot } from './snapshot';

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

/** Parses JSON text and validates it. Never throws. */
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

/** Validates an already parsed document. Never throws. */
export function validateSnapshot(doc: unknown, name = 'snapshot'): Parsed {
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
  const validator = schemaValidate as SchemaValidator;
  if (!validator(doc)) {
    const err = validator.errors?.[0];
    const where = err?.instancePath ? err.instancePath.slice(1) : '(top level)';
    let message = err?.message ?? 'does not match the schema';
    const allowed = err?.params?.['allowedValues'];
    if (Array.isArray(allowed)) message += `: ${allowed.map((v) => JSON.stringify(v)).join(', ')}`;
    return { ok: false, error: `${name}: invalid snapshot at ${where}: ${message.slice(0, 200)}` };
  }
  const snapshot = doc as unknown as Snapshot;
  const bad = checkReferences(snapshot);
  if (bad) return { ok: false, error: `${name}: invalid snapshot at ${bad}` };
  return { ok: true, snapshot };
}

/** The path of the first index that points outside its table, or null. */
export function checkReferences(s: Snapshot): string | null {
  const nFrames = s.frames.length;
  const nStacks = s.stacks.length;
  const nModules = s.modules.length;
  const nPhases = s.phases.length;
  for (let i = 0; i < s.stacks.length; i++) {
    for (const f of s.stacks[i] ?? []) {
      if (f >= nFrames) return `stacks/${i}: frame index out of range`;
    }
  }
  for (let i = 0; i < s.tensors.length; i++) {
    const t = s.tensors[i]!;
    if (t.stack >= nStacks || t.module >= nModules || t.phase >= Math.max(nPhases, 1)) {
      return `tensors/${i}: index out of range`;
    }
  }
  if (s.summary.peak_tensor >= s.tensors.length) {
    return 'summary/peak_tensor: index out of range';
  }
  const cols = s.timeline.columns.length;
  for (let i = 0; i < s.timeline.points.length; i++) {
    if (s.timeline.points[i]!.length !== cols) {
      return `timeline/points/${i}: ${s.timeline.points[i]!.length} values, expected ${cols}`;
    }
  }
  const a = s.allocations;
  if (a) {
    const n = a.bytes.length;
    const keys = [
      'device',
      'requested_bytes',
      'category',
      'module',
      'op',
      'stack',
      'stream',
      'alloc_seq',
      'free_seq',
    ] as const;
    for (const key of keys) {
      if (a[key].length !== n) return `allocations/${key}: ${a[key].length} entries, expected ${n}`;
    }
    for (let i = 0; i < n; i++) {
      if (
        a.module[i]! >= nModules ||
        a.op[i]! >= s.ops.length ||
        a.stack[i]! >= nStacks ||
        a.device[i]! >= a.devices.length
      ) {
        return `allocations/${i}: index out of range`;
      }
    }
  }
  return null;
}

function isObject(v: unknown): v is Record<string, unknown> {
  return typeof v === 'object' && v !== null && !Array.isArray(v);
}
