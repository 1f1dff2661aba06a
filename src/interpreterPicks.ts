// Select Interpreter's list, without `vscode`: the Python extension's discovered environments
// (its `environments.known`), the one in use marked, then the other ways to choose.
// Unit-tested with plain Node.

/** What the list needs of one of the Python extension's environments. */
export interface KnownEnvironment {
  executable: string | undefined;
  name: string | undefined;
  type: string | undefined;
  version: string | undefined;
}

export type InterpreterPick =
  | { action: 'environment'; label: string; description: string; detail: string; path: string }
  | { action: 'pythonExtension'; label: string; description: string }
  | { action: 'browse'; label: string; description: string };

/** `known` in the Python extension's order, duplicates and environments without a Python left
 * out; `current`: the interpreter in use (marked); `hasExtension`: offer following its choice. */
export function interpreterPicks(known: readonly KnownEnvironment[], current: string | undefined, hasExtension: boolean, relative: (p: string) => string): InterpreterPick[] {
  const out: InterpreterPick[] = [];
  const seen = new Set<string>();
  for (const env of known) {
    const exe = env.executable;
    if (!exe || seen.has(exe)) continue;
    seen.add(exe);
    const name = env.name || (env.type && env.type !== 'Unknown' ? env.type : 'Python');
    out.push({
      action: 'environment',
      label: `${exe === current ? '$(check) ' : ''}${env.version ? `Python ${env.version}` : 'Python'} (${name})`,
      description: env.type && env.type !== 'Unknown' ? env.type : '',
      detail: relative(exe),
      path: exe,
    });
  }
  if (hasExtension) out.push({ action: 'pythonExtension', label: '$(python) Follow the Python extension', description: 'the interpreter it has selected for this workspace' });
  out.push({ action: 'browse', label: '$(folder) Browse…', description: 'an interpreter anywhere on this machine' });
  return out;
}
