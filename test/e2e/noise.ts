// Log lines that are expected on an offline machine and say nothing about our extension.
// Everything else that looks like an error fails the run: a new kind of noise is added here,
// with a reason, once someone has checked that it is harmless.

const harmless: { pattern: RegExp; why: string }[] = [
  {
    pattern: /open-vsx\.org.*(ENOTFOUND|EAI_AGAIN|ERR_NAME_NOT_RESOLVED)|(ENOTFOUND|EAI_AGAIN|ERR_NAME_NOT_RESOLVED).*open-vsx\.org/,
    why: 'code-server asks its extension gallery (open-vsx.org) about installed extensions; offline',
  },
  {
    pattern: /Timed out waiting for authentication provider 'github' to register/,
    why: 'the GitHub auth provider never registers offline; nothing of ours uses it',
  },
  {
    pattern: /status of 404 .*\/static\/node_modules\/vsda\//,
    why: "vsda (Microsoft's proprietary handshake module) is not shipped with code-server",
  },
];

export function isHarmless(entry: string): boolean {
  return harmless.some(({ pattern }) => pattern.test(entry));
}

/**
 * The entries that look like errors and are not known noise, each cut to its first line.
 * An entry is one log line, or one browser console message (which may span lines: a message
 * and its stack).
 */
export function unexpected(entries: string[], looksLikeError: RegExp): string[] {
  return entries
    .filter((e) => looksLikeError.test(e) && !isHarmless(e))
    .map((e) => (e.split('\n', 1)[0] ?? '').trim());
}
