// common/protocol.ts must mirror python/memlens/server/protocol.py exactly. Two independent reads
// of the Python side:
// - its string constants (CMD_*, REQ_*, NOTIFY_*, SETTINGS_SECTION, DIAGNOSTIC_SOURCE), parsed
//   from the source text and compared with the TypeScript constants of the same names;
// - its TypedDicts and method table, as `python protocol.py` describes them (through
//   typing.get_type_hints, so inheritance and total=False are resolved by Python itself),
//   compared with the interfaces of common/protocol.ts read by the TypeScript compiler.
// protocol.py imports only the standard library, so any Python 3.10+ runs it.
import { strict as assert } from 'node:assert';
import { execFileSync } from 'node:child_process';
import { existsSync, readFileSync } from 'node:fs';
import * as path from 'node:path';
import { test } from 'node:test';
import * as ts from 'typescript';
import * as protocol from '../../common/protocol';

const root = path.resolve(__dirname, '..', '..', '..');
const pyFile = path.join(root, 'python/memlens/server/protocol.py');
const tsFile = path.join(root, 'common/protocol.ts');

function python(): string {
  if (process.env.MEMLENS_PYTHON) return process.env.MEMLENS_PYTHON;
  const venv = path.join(root, '.venv/bin/python');
  return existsSync(venv) ? venv : 'python3';
}

interface Field {
  type: string;
  optional: boolean;
}
interface Described {
  methods: Record<string, { kind: string; params: string; result?: string }>;
  types: Record<string, string | Record<string, Field>>;
  settingsSection: string;
  diagnosticSource: string;
}

const described = JSON.parse(execFileSync(python(), [pyFile], { encoding: 'utf8' })) as Described;

/** A type's spelling with quotes, spaces and the order of union members made canonical. */
function canonical(type: string): string {
  const text = type.replace(/'/g, '"').replace(/\s+/g, ' ').trim();
  const parts: string[] = [];
  let depth = 0;
  let current = '';
  for (const ch of text) {
    if (ch === '(' || ch === '<' || ch === '[') depth++;
    if (ch === ')' || ch === '>' || ch === ']') depth--;
    if (ch === '|' && depth === 0) {
      parts.push(current.trim());
      current = '';
    } else {
      current += ch;
    }
  }
  parts.push(current.trim());
  return parts
    .map((p) => p.replace(/\s+/g, ''))
    .sort()
    .join(' | ');
}

interface TsDeclarations {
  interfaces: Map<string, Map<string, Field>>;
  aliases: Map<string, string>;
  constants: Map<string, string>;
}

function readTs(): TsDeclarations {
  const source = ts.createSourceFile(tsFile, readFileSync(tsFile, 'utf8'), ts.ScriptTarget.ES2022, true);
  const out: TsDeclarations = { interfaces: new Map(), aliases: new Map(), constants: new Map() };
  for (const st of source.statements) {
    if (ts.isInterfaceDeclaration(st)) {
      const fields = new Map<string, Field>();
      for (const m of st.members) {
        if (!ts.isPropertySignature(m) || !m.type) throw new Error(`${st.name.text}: unexpected member ${m.getText()}`);
        fields.set(m.name.getText(source), { type: canonical(m.type.getText(source)), optional: !!m.questionToken });
      }
      out.interfaces.set(st.name.text, fields);
    } else if (ts.isTypeAliasDeclaration(st)) {
      out.aliases.set(st.name.text, canonical(st.type.getText(source)));
    } else if (ts.isVariableStatement(st)) {
      for (const d of st.declarationList.declarations) {
        if (d.initializer && ts.isStringLiteral(d.initializer)) out.constants.set(d.name.getText(source), d.initializer.text);
      }
    }
  }
  return out;
}

const mirror = readTs();

test('every string constant of protocol.py has a TypeScript twin with the same value', () => {
  const py = new Map<string, string>();
  for (const m of readFileSync(pyFile, 'utf8').matchAll(/^([A-Z][A-Z0-9_]*) = "([^"]*)"/gm)) py.set(m[1]!, m[2]!);
  assert.ok(py.size >= 13, `found only ${py.size} constants in protocol.py: did its style change?`);
  assert.deepEqual(Object.fromEntries(mirror.constants), Object.fromEntries(py));
});

test('the method table matches, method by method', () => {
  assert.deepEqual(protocol.METHODS, described.methods);
  assert.equal(protocol.SETTINGS_SECTION, described.settingsSection);
  assert.equal(protocol.DIAGNOSTIC_SOURCE, described.diagnosticSource);
});

test('every payload type has the same fields, types and optionality', () => {
  const names = Object.keys(described.types);
  const tsNames = [...mirror.interfaces.keys(), ...mirror.aliases.keys()].filter(
    (n) => !['MethodKind', 'MethodDeclaration'].includes(n),
  );
  assert.deepEqual(tsNames.sort(), [...names].sort(), 'the same set of type names');
  for (const [name, pyType] of Object.entries(described.types)) {
    if (typeof pyType === 'string') {
      assert.equal(mirror.aliases.get(name), canonical(pyType), `type ${name}`);
      continue;
    }
    const fields = mirror.interfaces.get(name);
    assert.ok(fields, `interface ${name} is missing`);
    const expected = Object.fromEntries(
      Object.entries(pyType).map(([k, f]) => [k, { type: canonical(f.type), optional: f.optional }]),
    );
    assert.deepEqual(Object.fromEntries(fields), expected, `interface ${name}`);
  }
});

test('the canonical spelling ignores quotes, spaces and union order', () => {
  assert.equal(canonical(`'a' | "b"`), canonical(`"b" |  'a'`));
  assert.equal(canonical('(string | null)[]'), '(string|null)[]');
  assert.notEqual(canonical('string[]'), canonical('string'));
});
