// DOM helpers that make the safe way the easy way: text always goes in through textContent and
// attributes through setAttribute, never as HTML. Every string of a snapshot is untrusted.

type Child = Node | string | number | null | undefined | false;
type Attrs = Record<string, string | number | boolean | null | undefined>;

/** `el('td', {class: 'num', title: name}, 'text', child)`. */
export function el<K extends keyof HTMLElementTagNameMap>(tag: K, attrs?: Attrs | null, ...children: Child[]): HTMLElementTagNameMap[K];
export function el(tag: string, attrs?: Attrs | null, ...children: Child[]): HTMLElement;
export function el(tag: string, attrs?: Attrs | null, ...children: Child[]): HTMLElement {
  const node = document.createElement(tag);
  if (attrs) {
    for (const [k, v] of Object.entries(attrs)) {
      if (v === null || v === undefined || v === false) continue;
      node.setAttribute(k, v === true ? '' : String(v));
    }
  }
  append(node, ...children);
  return node;
}

export function append(parent: Node, ...children: Child[]): void {
  for (const c of children) {
    if (c === null || c === undefined || c === false) continue;
    parent.appendChild(typeof c === 'string' || typeof c === 'number' ? document.createTextNode(String(c)) : c);
  }
}

export function clear(node: Node): void {
  while (node.firstChild) node.removeChild(node.firstChild);
}

/** Replaces the children of `node`. */
export function replace(node: Node, ...children: Child[]): void {
  clear(node);
  append(node, ...children);
}

/** A coloured square for a legend or a cell. */
export function swatch(cssVariable: string): HTMLElement {
  const s = el('span', { class: 'swatch', 'aria-hidden': 'true' });
  s.style.setProperty('background', `var(${cssVariable})`);
  return s;
}

/** A button-like link that opens `file:line` (or copies it outside VS Code). */
export function fileLink(label: string, file: string, line: number, open: (file: string, line: number) => void): HTMLElement {
  const a = el('a', { class: 'file-link', href: '#', title: `${file}:${line}`, 'data-file': file, 'data-line': line }, label);
  a.addEventListener('click', (e) => {
    e.preventDefault();
    open(file, line);
  });
  return a;
}
