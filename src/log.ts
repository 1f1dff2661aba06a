// The one log of the extension: a LogOutputChannel ("Torch Memory Lens" in the Output view)
// that also carries the language client's messages, its LSP trace and the server's stderr.
// The client writes plain lines ("[Error - 10:41:00] ..."); `clientChannel` turns them back into
// levelled entries so that errors stay errors in the log.
import * as vscode from 'vscode';

export function createLog(): vscode.LogOutputChannel {
  return vscode.window.createOutputChannel('Torch Memory Lens', { log: true });
}

type Level = 'error' | 'warn' | 'info' | 'debug' | 'trace';

const CLIENT_PREFIX = /^\[(Error|Warn|Info|Debug|Trace)\s*- [^\]]*\] ?/;
// Python logging on the server's stderr: "memlens-server WARNING pygls.x: ..."
const SERVER_LEVEL = /^memlens-server (CRITICAL|ERROR|WARNING|INFO|DEBUG) /;

export function levelOf(line: string): { level: Level; text: string } {
  const client = CLIENT_PREFIX.exec(line);
  if (client) {
    const level = client[1]!.toLowerCase() as Level;
    return { level, text: line.slice(client[0].length) };
  }
  const server = SERVER_LEVEL.exec(line);
  if (server) {
    const map: Record<string, Level> = { CRITICAL: 'error', ERROR: 'error', WARNING: 'warn', INFO: 'info', DEBUG: 'debug' };
    return { level: map[server[1]!]!, text: line };
  }
  return { level: 'info', text: line };
}

/** An OutputChannel for the language client that writes into `log` line by line, by level. */
export function clientChannel(log: vscode.LogOutputChannel): vscode.OutputChannel {
  let pending = '';
  let lastLevel: Level = 'info';
  const write = (line: string): void => {
    if (line.trim() === '') return;
    const { level, text } = levelOf(line);
    // The client writes a message's data (a stack, a JSON payload) on the lines after it.
    const l = CLIENT_PREFIX.test(line) ? level : line.startsWith(' ') || line.startsWith('{') ? lastLevel : level;
    lastLevel = l;
    log[l](text);
  };
  const append = (value: string): void => {
    pending += value;
    const lines = pending.split(/\r?\n/);
    pending = lines.pop() ?? '';
    for (const line of lines) write(line);
  };
  return {
    name: log.name,
    append,
    appendLine: (value: string) => append(`${value}\n`),
    replace: (value: string) => append(`${value}\n`),
    clear: () => log.clear(),
    show: (a?: unknown, b?: boolean) => (typeof a === 'boolean' ? log.show(a) : log.show(b)),
    hide: () => log.hide(),
    dispose: () => undefined, // the log outlives every client
  };
}
