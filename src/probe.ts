// What an interpreter can do for us: a short Python script, run before the server starts, says
// whether memlens (with its server's dependencies) and torch are importable, without importing
// them (torch takes seconds to import). No `vscode` import: interpreter.ts runs it.

/** Prints one JSON object. Uses only the standard library; imports nothing it looks for. */
export const PROBE_SCRIPT = `
import importlib.util, json, sys
def found(name):
    try:
        return importlib.util.find_spec(name) is not None
    except Exception:
        return False
def version(name):
    try:
        from importlib.metadata import version
        return version(name)
    except Exception:
        return None
memlens = found("memlens")
print(json.dumps({
    "executable": sys.executable,
    "pythonVersion": "%d.%d.%d" % sys.version_info[:3],
    "memlens": memlens,
    "memlensVersion": version("memlens") if memlens else None,
    "server": memlens and found("memlens.server") and found("pygls") and found("lsprotocol"),
    "torch": found("torch"),
    "torchVersion": version("torch"),
}))
`;

export interface Probe {
  executable: string;
  pythonVersion: string;
  memlens: boolean;
  memlensVersion: string | null;
  /** memlens.server and its dependencies (pygls, lsprotocol) are importable. */
  server: boolean;
  torch: boolean;
  torchVersion: string | null;
}

/** The probe's answer, or an Error saying what was wrong with it. */
export function parseProbe(stdout: string): Probe | Error {
  const line = stdout.trim().split('\n').pop() ?? '';
  let v: unknown;
  try {
    v = JSON.parse(line);
  } catch {
    return new Error(`unexpected output from the interpreter: ${stdout.slice(0, 200)}`);
  }
  const o = v as Record<string, unknown>;
  if (typeof o !== 'object' || o === null || typeof o['executable'] !== 'string') {
    return new Error(`unexpected output from the interpreter: ${line.slice(0, 200)}`);
  }
  const str = (k: string): string | null => (typeof o[k] === 'string' ? (o[k] as string) : null);
  return {
    executable: o['executable'] as string,
    pythonVersion: str('pythonVersion') ?? '?',
    memlens: o['memlens'] === true,
    memlensVersion: str('memlensVersion'),
    server: o['server'] === true,
    torch: o['torch'] === true,
    torchVersion: str('torchVersion'),
  };
}

export type Verdict =
  | { kind: 'ok' }
  /** Python is too old for memlens (3.11+). */
  | { kind: 'oldPython'; message: string }
  /** memlens, or its server's dependencies, cannot be imported: the server cannot start. */
  | { kind: 'noMemlens'; message: string }
  /** The server can run, but traces will fail. */
  | { kind: 'noTorch'; message: string };

/** What to tell the user about an interpreter; `python` is how they know it (a path). */
export function verdict(p: Probe, python: string): Verdict {
  const [major = 0, minor = 0] = p.pythonVersion.split('.').map(Number);
  if (major < 3 || (major === 3 && minor < 11)) {
    return { kind: 'oldPython', message: `${python} is Python ${p.pythonVersion}; Torch Memory Lens needs Python 3.11 or newer.` };
  }
  if (!p.memlens) return { kind: 'noMemlens', message: `memlens is not installed in ${python}.` };
  if (!p.server) {
    return {
      kind: 'noMemlens',
      message: `The memlens in ${python} cannot run its language server (memlens ${p.memlensVersion ?? '?'} without pygls/lsprotocol, or too old).`,
    };
  }
  if (!p.torch) {
    return { kind: 'noTorch', message: `PyTorch is not installed in ${python}: memlens can show snapshots, but tracing needs torch in the same environment.` };
  }
  return { kind: 'ok' };
}

/** `<python> -m pip install <extension>/python`: the memlens package shipped in the .vsix. */
export function pipInstallArgs(packageDir: string): string[] {
  return ['-m', 'pip', 'install', '--disable-pip-version-check', packageDir];
}
