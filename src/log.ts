// The one log of the extension: a LogOutputChannel ("Torch Memory Lens" in the Output view)
// that also carries the language client's messages, its LSP trace and the server's stderr.
// The client writes plain lines ("[Error - 10:41:00] ..."); `clientChannel` turns them back into
// levelled entries so that errors stay errors in the log.
import * as vscode from 'vscode';
import { CLIENT_PREFIX, levelOf, type Level } from './logLines';

export function createLog(): vscode.LogOutputChannel {
  return vscode.window.createOutputChannel('Torch Memory Lens', { log: true });
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
