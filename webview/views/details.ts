// Tensor details: a tensor's facts and its creation stack, the user's frames first; or a source
// line's bytes and the tensors it left alive at the peak. A frame opens its file at that line
// (outside VS Code it is copied instead). The source lines of the snapshot are listed to pick.
import { CATEGORY_LABELS } from '../data/categories';
import { categoryVariable } from '../data/colors';
import { fileLine, formatBytes, formatCount, formatShape, formatShare, shortPath } from '../data/format';
import { firstUserFrame, orderedStack } from '../data/frames';
import type { Context } from '../context';
import { el, fileLink, replace, swatch } from '../dom';

const MAX_LINE_TENSORS = 200;

export class DetailsView {
  constructor(private readonly root: HTMLElement, private readonly ctx: () => Context) {}

  render(): void {
    const ctx = this.ctx();
    const s = ctx.snapshot;
    const st = ctx.state.details;

    const lines = el('div', { class: 'lines-list', id: 'lines-list', role: 'listbox', 'aria-label': 'Source lines' });
    const top = s.lines.filter((l) => l.bytes_at_peak > 0 || l.total_bytes > 0).slice(0, 500);
    for (const l of top) {
      const key = fileLine(l.file, l.line);
      const item = el(
        'div',
        { class: `line-item${st.line === key ? ' selected' : ''}`, role: 'option', tabindex: 0, title: key, 'data-line': key, 'aria-selected': String(st.line === key) },
        el('span', { class: 'line-name' }, `${shortPath(l.file)}:${l.line}`),
        el('span', { class: 'num' }, formatBytes(l.bytes_at_peak)),
      );
      const pick = () => ctx.update((x) => ((x.details.line = key), (x.details.tensor = null)), ['details']);
      item.addEventListener('click', pick);
      item.addEventListener('keydown', (e) => {
        if (e.key === 'Enter' || e.key === ' ') {
          e.preventDefault();
          pick();
        }
      });
      lines.appendChild(item);
    }
    const side = el(
      'aside',
      { class: 'details-side' },
      el('h3', null, 'Source lines'),
      el('p', { class: 'muted small' }, 'Bytes alive at the peak by the first user frame that allocated them.'),
      top.length ? lines : el('p', { class: 'muted' }, 'No source lines recorded.'),
    );

    let main: HTMLElement;
    const line = st.line !== null ? s.lines.find((l) => fileLine(l.file, l.line) === st.line) : undefined;
    if (line) main = this.lineDetails(line.file, line.line);
    else {
      const id = st.tensor ?? s.tensors[s.summary.peak_tensor]?.id ?? null;
      const index = id === null ? undefined : ctx.derived.byId.get(id);
      main = index === undefined ? el('p', { class: 'empty' }, 'Select a tensor in the Table (double-click opens it here) or a source line.') : this.tensorDetails(index);
    }
    replace(this.root, el('div', { class: 'details-layout' }, side, el('section', { class: 'details-main', id: 'details-main' }, main)));
  }

  private tensorDetails(index: number): HTMLElement {
    const ctx = this.ctx();
    const s = ctx.snapshot;
    const t = s.tensors[index]!;
    const module = t.module >= 0 ? s.modules[t.module] : undefined;
    const phase = s.phases[t.phase];
    const isPeak = index === s.summary.peak_tensor;
    const facts: [string, Node | string][] = [
      ['bytes', `${formatBytes(t.bytes)} (${formatCount(t.bytes)} B${t.requested_bytes !== undefined && t.requested_bytes !== t.bytes ? `, requested ${formatCount(t.requested_bytes)} B` : ''})`],
      ['share of the peak', formatShare(t.bytes, s.summary.peak_bytes)],
      ['shape', formatShape(t.shape)],
      ['dtype', t.dtype],
      ['category', el('span', null, swatch(categoryVariable(t.category)), CATEGORY_LABELS[t.category],
        t.subcategory ? ` · ${s.summary.subcategories?.find((x) => x.name === t.subcategory)?.label ?? t.subcategory}` : '')],
      ['module', module ? this.moduleCell(module.fqn || 'the model', module.class, module.source ?? null) : '(no module)'],
      ['phase', phase ? phase.name : '–'],
      ['op', t.op],
      ['allocation', `#${t.id}`],
    ];
    const dl = el('dl', { class: 'facts-list' });
    for (const [k, v] of facts) dl.append(el('dt', null, k), el('dd', null, v));
    return el(
      'div',
      { class: 'tensor-details', 'data-id': t.id },
      el('h3', null, `Tensor #${t.id} · ${formatBytes(t.bytes)}`, isPeak ? el('span', { class: 'badge' }, 'set the peak') : null),
      dl,
      el('h4', null, 'Created at'),
      this.stack(t.stack),
    );
  }

  private moduleCell(name: string, cls: string, source: { file: string; line: number } | null): HTMLElement {
    const ctx = this.ctx();
    return el('span', null, el('span', { class: 'mono' }, name), ' ', source ? fileLink(cls, source.file, source.line, ctx.openFile) : el('span', { class: 'muted' }, cls));
  }

  private stack(stack: number): HTMLElement {
    const ctx = this.ctx();
    const frames = orderedStack(ctx.snapshot, stack);
    if (!frames.length) return el('p', { class: 'muted' }, 'No user frame was recorded for this allocation (made inside PyTorch, e.g. by the optimizer or autograd).');
    const list = el('ol', { class: 'frames', id: 'stack-frames' });
    let libraryHeading = false;
    for (const f of frames) {
      if (!f.user && !libraryHeading) {
        libraryHeading = true;
        list.appendChild(el('li', { class: 'frames-heading muted' }, 'library frames'));
      }
      const link = fileLink(`${shortPath(f.frame.file)}:${f.frame.line}`, f.frame.file, f.frame.line, ctx.openFile);
      link.classList.add('frame-link');
      list.appendChild(
        el(
          'li',
          { class: f.user ? 'frame user' : 'frame library' },
          link,
          el('span', { class: 'frame-name mono' }, f.frame.name),
          el('span', { class: 'frame-path muted' }, f.frame.file),
        ),
      );
    }
    const hint = ctx.standalone ? 'Click a frame to copy its file:line.' : 'Click a frame to open it in the editor.';
    return el('div', null, list, el('p', { class: 'muted small' }, `Innermost first. ${hint}`));
  }

  private lineDetails(file: string, lineNo: number): HTMLElement {
    const ctx = this.ctx();
    const s = ctx.snapshot;
    const l = s.lines.find((x) => x.file === file && x.line === lineNo)!;
    const tensors: number[] = [];
    for (let i = 0; i < s.tensors.length && tensors.length < MAX_LINE_TENSORS; i++) {
      const f = firstUserFrame(s, s.tensors[i]!.stack);
      if (f && f.file === file && f.line === lineNo) tensors.push(i);
    }
    const dl = el('dl', { class: 'facts-list' });
    const facts: [string, Node | string][] = [
      ['file', fileLink(fileLine(file, lineNo), file, lineNo, ctx.openFile)],
      ['alive at the peak', `${formatBytes(l.bytes_at_peak)} (${formatShare(l.bytes_at_peak, s.summary.peak_bytes)})`],
      ['allocated in total', formatBytes(l.total_bytes)],
      ['allocations', formatCount(l.allocations)],
    ];
    for (const [k, v] of facts) dl.append(el('dt', null, k), el('dd', null, v));
    const list = el('div', { class: 'line-tensors' });
    for (const i of tensors) {
      const t = s.tensors[i]!;
      const item = el(
        'div',
        { class: 'line-item', tabindex: 0, 'data-id': t.id },
        el('span', null, swatch(categoryVariable(t.category)), `${formatShape(t.shape)} ${t.dtype} · ${ctx.derived.text.module(i)} · ${t.op}`),
        el('span', { class: 'num' }, formatBytes(t.bytes)),
      );
      item.addEventListener('click', () => ctx.showTensor(t.id, true));
      list.appendChild(item);
    }
    return el(
      'div',
      { class: 'line-details' },
      el('h3', null, `${shortPath(file)}:${lineNo}`),
      dl,
      el('h4', null, `Tensors from this line alive at the peak${tensors.length >= MAX_LINE_TENSORS ? ` (first ${MAX_LINE_TENSORS})` : ` (${tensors.length})`}`),
      tensors.length ? list : el('p', { class: 'muted' }, 'None.'),
    );
  }

  dispose(): void {}
}
