// Child processes that own a whole process group. code-server forks file watchers, the
// extension host and pty hosts; killing only its pid leaves them running, so each child is
// started as a group leader (detached = setsid) and the group is killed as a whole.
import { spawn, type SpawnOptions } from 'node:child_process';
import { readdirSync, readFileSync } from 'node:fs';
import { waitFor } from './wait';

export interface GroupProcess {
  readonly pid: number;
  /** stdout and stderr interleaved, as received. */
  output(): string;
  /** Exit code, or the signal name, once the leader has exited. */
  exited(): number | string | undefined;
  /** Resolves when the leader exits. */
  readonly done: Promise<number | string>;
  /** SIGTERM to the group, SIGKILL after a grace period; safe to call twice. */
  kill(graceMs?: number): Promise<void>;
}

const live = new Set<number>();

function signalGroup(pgid: number, signal: NodeJS.Signals): void {
  try {
    process.kill(-pgid, signal);
  } catch {
    // ESRCH: the group is already gone
  }
}

/** Live (non-zombie) members of a process group, from /proc. Zombies are ignored: they hold
 * nothing, and an init that does not reap would otherwise keep the group "alive" forever. */
export function groupMembers(pgid: number): number[] {
  const members: number[] = [];
  for (const entry of readdirSync('/proc')) {
    if (!/^\d+$/.test(entry)) continue;
    let stat: string;
    try {
      stat = readFileSync(`/proc/${entry}/stat`, 'utf8');
    } catch {
      continue; // exited while we looked
    }
    // "pid (comm) state ppid pgrp ..."; comm may contain spaces and parentheses.
    const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
    if (Number(fields[2]) === pgid && fields[0] !== 'Z') members.push(Number(entry));
  }
  return members;
}

// Last resort if a test crashes or is interrupted before its cleanup ran.
process.on('exit', () => {
  for (const pid of live) signalGroup(pid, 'SIGKILL');
});
for (const sig of ['SIGINT', 'SIGTERM'] as const) {
  process.once(sig, () => {
    for (const pid of live) signalGroup(pid, 'SIGKILL');
    process.exit(128 + (sig === 'SIGINT' ? 2 : 15));
  });
}

export function spawnGroup(command: string, args: string[], options: SpawnOptions): GroupProcess {
  const child = spawn(command, args, { ...options, detached: true, stdio: ['ignore', 'pipe', 'pipe'] });
  if (child.pid === undefined) throw new Error(`could not start ${command}`);
  const pid = child.pid;
  live.add(pid);

  let text = '';
  child.stdout?.setEncoding('utf8').on('data', (d: string) => (text += d));
  child.stderr?.setEncoding('utf8').on('data', (d: string) => (text += d));

  let status: number | string | undefined;
  const done = new Promise<number | string>((resolve) => {
    child.on('exit', (code, signal) => {
      status = code ?? signal ?? 'unknown';
      resolve(status);
    });
    child.on('error', (e) => {
      text += `\n[spawn error] ${e.message}\n`;
      status = 'spawn-error';
      resolve(status);
    });
  });

  return {
    pid,
    output: () => text,
    exited: () => status,
    done,
    async kill(graceMs = 10_000) {
      if (!live.has(pid)) return;
      // The group may outlive its leader (orphaned watchers): signal it even after exit.
      signalGroup(pid, 'SIGTERM');
      const gone = () => groupMembers(pid).length === 0;
      try {
        await waitFor(gone, { timeout: graceMs, what: `process group ${pid} to exit` });
      } catch {
        signalGroup(pid, 'SIGKILL');
        await waitFor(gone, { timeout: 10_000, what: `process group ${pid} to die after SIGKILL` });
      }
      live.delete(pid);
    },
  };
}
