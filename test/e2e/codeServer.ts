// Starting code-server (a real VS Code build served over HTTP) and installing extensions into
// it, fully isolated in one scratch directory: its own user data, extensions, config and XDG
// dirs, so nothing leaks between runs or from the developer's own setup.
import { existsSync, mkdirSync, writeFileSync } from 'node:fs';
import { createServer } from 'node:net';
import * as path from 'node:path';
import { codeServerEntry, node24Bin } from './paths';
import { spawnGroup, type GroupProcess } from './processGroup';
import { timeouts } from './timeouts';
import { waitFor } from './wait';

export interface CodeServerDirs {
  userData: string;
  extensions: string;
  config: string;
  xdg: string;
}

/** Creates the per-run directories and settings under `scratch`. */
export function prepareDirs(scratch: string, settings: Record<string, unknown>): CodeServerDirs {
  const dirs: CodeServerDirs = {
    userData: path.join(scratch, 'user-data'),
    extensions: path.join(scratch, 'extensions'),
    config: path.join(scratch, 'config.yaml'),
    xdg: path.join(scratch, 'xdg'),
  };
  for (const d of [dirs.userData, dirs.extensions, dirs.xdg]) mkdirSync(d, { recursive: true });
  mkdirSync(path.join(dirs.userData, 'User'), { recursive: true });
  writeFileSync(path.join(dirs.userData, 'User', 'settings.json'), JSON.stringify(settings, null, 2));
  // Flags win over this file; it exists so code-server never reads ~/.config/code-server.
  writeFileSync(dirs.config, 'auth: none\ncert: false\n');
  return dirs;
}

function checkInstalled(): void {
  if (!existsSync(path.join(node24Bin, 'node')) || !existsSync(codeServerEntry)) {
    throw new Error(
      'code-server is not installed: run scripts/setup-node24.sh and scripts/setup-code-server.sh',
    );
  }
}

function env(dirs: CodeServerDirs): NodeJS.ProcessEnv {
  return {
    ...process.env,
    PATH: `${node24Bin}:${process.env.PATH ?? ''}`,
    XDG_CONFIG_HOME: path.join(dirs.xdg, 'config'),
    XDG_DATA_HOME: path.join(dirs.xdg, 'data'),
    XDG_CACHE_HOME: path.join(dirs.xdg, 'cache'),
    // The test runner's own settings must not leak into the extension host's Node.
    NODE_OPTIONS: '',
    NODE_TEST_CONTEXT: '',
  };
}

function commonArgs(dirs: CodeServerDirs): string[] {
  return [
    codeServerEntry,
    '--user-data-dir', dirs.userData,
    '--extensions-dir', dirs.extensions,
    '--config', dirs.config,
  ];
}

/** `code-server --install-extension`; throws with its output unless it reports success. */
export async function installExtension(dirs: CodeServerDirs, vsix: string): Promise<string> {
  checkInstalled();
  const proc = spawnGroup(path.join(node24Bin, 'node'), [...commonArgs(dirs), '--install-extension', vsix], {
    env: env(dirs),
  });
  const timer = setTimeout(() => void proc.kill(), timeouts.server);
  const status = await proc.done;
  clearTimeout(timer);
  await proc.kill();
  const out = proc.output();
  if (status !== 0 || !/successfully installed/i.test(out)) {
    throw new Error(`installing ${vsix} failed (exit ${status}):\n${out}`);
  }
  return out;
}

async function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const server = createServer();
    server.once('error', reject);
    server.listen(0, '127.0.0.1', () => {
      const address = server.address();
      const port = typeof address === 'object' && address ? address.port : 0;
      server.close(() => resolve(port));
    });
  });
}

export interface CodeServer {
  readonly url: string;
  readonly process: GroupProcess;
  stop(): Promise<void>;
}

export interface StartOptions {
  /** Workspace Trust on: needed to test restricted mode. Off by default (no trust prompt). */
  trust?: boolean;
}

/** Starts code-server on a free loopback port and waits until it answers /healthz. */
export async function startCodeServer(
  dirs: CodeServerDirs,
  workspace: string,
  { trust = false }: StartOptions = {},
): Promise<CodeServer> {
  checkInstalled();
  const port = await freePort();
  const args = [
    ...commonArgs(dirs),
    '--bind-addr', `127.0.0.1:${port}`,
    '--auth', 'none',
    '--disable-telemetry',
    '--disable-update-check',
    ...(trust ? [] : ['--disable-workspace-trust']),
    workspace,
  ];
  const proc = spawnGroup(path.join(node24Bin, 'node'), args, { env: env(dirs) });
  const url = `http://127.0.0.1:${port}`;
  try {
    await waitFor(async () => (await fetch(`${url}/healthz`)).ok, {
      timeout: timeouts.server,
      what: `code-server on ${url}`,
      interval: 500,
      fail: () => {
        const status = proc.exited();
        return status === undefined ? undefined : `code-server exited (${status}):\n${proc.output()}`;
      },
    });
  } catch (e) {
    await proc.kill();
    throw e;
  }
  return { url, process: proc, stop: () => proc.kill() };
}
