// The level of a line the language client or the server writes as plain text. No `vscode`
// import: log.ts routes the lines, this decides where they go.

export type Level = 'error' | 'warn' | 'info' | 'debug' | 'trace';

export const CLIENT_PREFIX = /^\[(Error|Warn|Info|Debug|Trace)\s*- [^\]]*\] ?/;
// Python logging on the server's stderr: "memlens-server WARNING pygls.x: ..."
const SERVER_LEVEL = /^memlens-server (CRITICAL|ERROR|WARNING|INFO|DEBUG) /;
// vscode-languageclient reports every exit of the server as an error, a clean one included.
const CLEAN_EXIT = /^Server process exited with code 0\.$/;

export function levelOf(line: string): { level: Level; text: string } {
  const client = CLIENT_PREFIX.exec(line);
  if (client) {
    const text = line.slice(client[0].length);
    const level = client[1]!.toLowerCase() as Level;
    return { level: CLEAN_EXIT.test(text) ? 'info' : level, text };
  }
  const server = SERVER_LEVEL.exec(line);
  if (server) {
    const map: Record<string, Level> = { CRITICAL: 'error', ERROR: 'error', WARNING: 'warn', INFO: 'info', DEBUG: 'debug' };
    return { level: map[server[1]!]!, text: line };
  }
  return { level: 'info', text: line };
}
