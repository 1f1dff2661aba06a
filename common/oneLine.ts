// Text from a snapshot as one line of plain text, for the clipboard and for messages: a
// snapshot may come from someone else, and a file name with a newline in it turns a copied
// `file:line` into a second shell command when pasted (paste-jacking).

// C0 controls (newline, carriage return, ESC…), DEL, C1 controls, the Unicode line and
// paragraph separators, and the bidirectional overrides and isolates (text that reads other
// than it runs).
const CONTROL = /[\u0000-\u001f\u007f-\u009f\u2028\u2029\u202a-\u202e\u2066-\u2069]/g;

/** `text` without control characters, at most `max` characters (cut with an ellipsis). */
export function oneLine(text: string, max = 4096): string {
  const plain = text.replace(CONTROL, '');
  return plain.length > max ? `${plain.slice(0, max - 1)}…` : plain;
}
