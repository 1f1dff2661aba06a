// Find What Fits, without `vscode`: the space a user types (`memlens fit`'s own options, as on
// the command line) split into the words the server takes, and the command's parameters.
// The server checks the space (only options of the space pass) and the CLI its values.
import type { Config } from './config';
import type { FitParams, ScriptFlag } from '../common/protocol';

export type SpaceInput = { ok: true; space: string[] } | { ok: false; error: string };

/** Splits a command line as a POSIX shell would for plain words: spaces separate, '…' and "…"
 * quote, a backslash escapes the next character. */
export function shellWords(text: string): string[] | null {
  const words: string[] = [];
  let word: string | null = null;
  let quote: '"' | "'" | null = null;
  for (let i = 0; i < text.length; i++) {
    const ch = text[i]!;
    if (quote) {
      if (ch === quote) quote = null;
      else if (ch === '\\' && quote === '"' && i + 1 < text.length) word += text[++i]!;
      else word += ch;
    } else if (ch === '"' || ch === "'") {
      quote = ch;
      word ??= '';
    } else if (ch === '\\' && i + 1 < text.length) {
      word = (word ?? '') + text[++i]!;
    } else if (/\s/.test(ch)) {
      if (word !== null) words.push(word);
      word = null;
    } else {
      word = (word ?? '') + ch;
    }
  }
  if (quote) return null;
  if (word !== null) words.push(word);
  return words;
}

/** "--micro-batch 1,2,4 --axis micro-batch=--batch-size" → its words, or what is wrong. */
export function parseSpace(text: string): SpaceInput {
  const words = shellWords(text);
  if (words === null) return { ok: false, error: 'A quote is not closed.' };
  if (words.length === 0) return { ok: false, error: 'Give at least one axis, e.g. --micro-batch 1,2,4 --axis micro-batch=--batch-size' };
  for (let i = 0; i < words.length; i++) {
    const w = words[i]!;
    if (!w.startsWith('--')) return { ok: false, error: `${w}: an option of the space comes first, e.g. --micro-batch 1,2,4` };
    if (w.includes('=')) continue; // --micro-batch=1,2,4
    const value = words[i + 1];
    if (value === undefined) return { ok: false, error: `${w} needs its values, e.g. ${w} 1,2,4` };
    i++; // the value may start with -- itself (--axis micro-batch=--batch-size)
  }
  return { ok: true, space: words };
}

/** The memlens.fit parameters of a search of `targetId` over `space` (empty: the workspace's
 * [tool.memlens.fit] alone). */
export function fitParams(targetId: string, c: Config, space: string[]): FitParams {
  const p: FitParams = { targetId };
  if (c.device) p.device = c.device;
  if (space.length) p.space = space;
  if (c.iterations !== null) p.iterations = c.iterations;
  return p;
}

/** A word as a shell (and shellWords) reads it back. */
function quote(word: string): string {
  return /^[\w@%+=:,./-]+$/.test(word) ? word : `'${word.replace(/'/g, `'\\''`)}'`;
}

/** The space text of the script flags picked as axes: their options joined as typed. */
export function spaceOfFlags(flags: readonly ScriptFlag[]): string {
  return flags.flatMap((f) => f.space).map(quote).join(' ');
}

/** A script flag as a pick: the flag, its default and the axis it would make. */
export function flagPick(f: ScriptFlag): { label: string; description: string; detail: string } {
  const values = f.axis ? f.space[1] : f.space[1]?.split('=')[1];
  return {
    label: f.flag,
    description: `${f.default === null ? 'no default' : `default ${f.default}`} · ${f.axis ? `the ${f.axis} axis` : 'an axis of its own'}: ${values ?? ''}`,
    detail: f.help,
  };
}
