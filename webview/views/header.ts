// The summary above the tabs: what was traced, the peak against the device's memory (a bar
// split by category), the category legend every chart uses, and the active phase filter.
import { CATEGORY_LABELS } from '../data/categories';
import { categoryVariable } from '../data/colors';
import { formatBytes, formatShare } from '../data/format';
import { verdictOf } from '../../common/headroom';
import { CATEGORIES, type Meta, type Summary } from '../../common/snapshot';
import type { Context } from '../context';
import { el, replace, swatch } from '../dom';

export function renderHeader(root: HTMLElement, ctx: Context): void {
  const s = ctx.snapshot;
  const { meta, summary } = s;
  const device = meta.device;
  const budget = device.total_memory_bytes;
  const peak = summary.peak_bytes;
  const target = meta.target;
  const over = peak > budget; // where the bar draws the card's line, not the verdict
  const verdict = verdictOf(summary); // the snapshot's: reserved peak + outside the allocator

  const title = el(
    'div',
    { class: 'title-row' },
    el('span', { class: 'product' }, 'Torch Memory Lens'),
    el('span', { class: 'target', title: target?.path ?? '' }, target?.name ?? '(unnamed)'),
    target ? el('span', { class: 'muted' }, `${target.kind}${target.args?.length ? ` · ${target.args.join(' ')}` : ''}`) : null,
  );

  const bar = el('div', { class: 'budget-bar', role: 'img', 'aria-label': `peak ${formatBytes(peak)} of ${formatBytes(budget)}` });
  const scale = Math.max(budget, peak) || 1;
  for (const c of CATEGORIES) {
    const b = summary.categories_at_peak[c];
    if (!b) continue;
    const seg = el('div', { class: 'segment', title: `${CATEGORY_LABELS[c]}: ${formatBytes(b)}` });
    seg.style.setProperty('width', `${(100 * b) / scale}%`);
    seg.style.setProperty('background', `var(${categoryVariable(c)})`);
    bar.appendChild(seg);
  }
  if (over) {
    const mark = el('div', { class: 'budget-mark', title: `device memory ${formatBytes(budget)}` });
    mark.style.setProperty('left', `${(100 * budget) / scale}%`);
    bar.appendChild(mark);
  }

  const peakRow = el(
    'div',
    { class: 'peak-row' },
    el(
      'div',
      { class: 'peak' },
      el('span', { class: 'label' }, 'Peak'),
      el('span', { class: 'big', id: 'summary-peak', 'data-bytes': peak }, formatBytes(peak)),
      el('span', { class: 'muted' }, `of ${formatBytes(budget)} on ${device.display_name || device.name}`),
    ),
    bar,
    el(
      'span',
      { class: !verdict ? 'verdict' : verdict.fits ? 'verdict ok' : 'verdict over' },
      !verdict
        ? formatShare(peak, budget)
        : verdict.fits
          ? `${formatShare(peak, budget)} · fits, ${formatBytes(verdict.headroomBytes)} headroom`
          : `${formatShare(peak, budget)} · does not fit, over by ${formatBytes(-verdict.headroomBytes)}`,
    ),
  );

  const facts = [
    summary.peak_phase ? `peak in ${summary.peak_phase}` : null,
    `event ${summary.peak_seq}`,
    `${meta.device_key}`,
    meta.world_size > 1 ? `rank ${meta.rank} of ${meta.world_size}` : 'single process',
    iterationsFact(meta),
    meta.precision ? meta.precision : null,
    `torch ${meta.torch_version}`,
    meta.created.replace('T', ' ').replace(/\+00:00$/, ' UTC'),
  ].filter((x): x is string => !!x);

  const legend = el('div', { class: 'legend', id: 'category-legend' });
  for (const c of CATEGORIES) {
    const b = summary.categories_at_peak[c];
    const item = el(
      'span',
      { class: b ? 'legend-item' : 'legend-item zero', 'data-category': c, 'data-bytes': b, title: `own peak ${formatBytes(summary.category_peaks[c])}` },
      swatch(categoryVariable(c)),
      el('span', null, CATEGORY_LABELS[c]),
      el('span', { class: 'num' }, formatBytes(b)),
    );
    legend.appendChild(item);
    for (const sub of summary.subcategories ?? []) {
      if (sub.category !== c) continue;
      legend.appendChild(
        el(
          'span',
          { class: 'legend-item sub', 'data-subcategory': sub.name, 'data-bytes': sub.at_peak_bytes, title: `own peak ${formatBytes(sub.peak_bytes)}` },
          el('span', null, `of which ${sub.label}`),
          el('span', { class: 'num' }, formatBytes(sub.at_peak_bytes)),
        ),
      );
    }
  }

  const notes: HTMLElement[] = [];
  const placeholders = summary.placeholders ?? [];
  if (placeholders.length) {
    const first = placeholders[0]!;
    const where = first.file ? `${first.file}:${first.line ?? '?'}` : 'the script';
    notes.push(
      el(
        'div',
        { class: 'note' },
        `The script read ${placeholders.length === 1 ? 'a tensor value' : `${placeholders.length} tensor values`} (${where}, ${first.op}); the trace answered ${JSON.stringify(first.value)}.`,
      ),
    );
  }
  for (const n of meta.notes ?? []) notes.push(el('div', { class: 'note' }, n));

  const filters = el('div', { class: 'filters' });
  const phase = ctx.state.phase !== null ? s.phases[ctx.state.phase] : undefined;
  if (phase) {
    const chip = el('span', { class: 'chip', id: 'phase-filter' }, el('span', { class: 'muted' }, 'Phase'), el('span', null, phase.name));
    const x = el('button', { class: 'chip-clear', title: 'Show all phases', 'aria-label': 'Clear the phase filter' }, '×');
    x.addEventListener('click', () => ctx.setPhase(null));
    chip.appendChild(x);
    filters.appendChild(chip);
  }

  replace(root, title, peakRow, el('div', { class: 'facts muted' }, facts.join(' · ')), legend, ...notes, nextToAllocator(s.summary), compiledRegions(meta), filters);
}

/** "Next to the allocator's memory": the snapshot's line items as the terminal report lists
 * them (memory outside the caching allocator, and library workspaces inside it), each with
 * its basis; nothing on a CPU target. */
function nextToAllocator(summary: Summary): HTMLElement | null {
  const items = summary.outside_allocator ?? [];
  if (!items.length) return null;
  const rows = items.map((item) =>
    el(
      'div',
      { class: 'outside-item', title: item.basis, 'data-bytes': item.bytes },
      el('span', null, item.label),
      el('span', { class: 'num' }, formatBytes(item.bytes)),
      el('span', { class: 'muted' }, item.counted_by_allocator ? 'in reserved' : 'outside'),
      el('span', { class: 'muted' }, item.short_basis ?? item.basis),
    ),
  );
  const reserved = summary.reserved_peak_bytes;
  const heading = reserved != null ? `Next to the allocator's memory (reserved peak ${formatBytes(reserved)})` : "Next to the allocator's memory";
  return el('div', { class: 'outside', id: 'outside-allocator' }, el('div', { class: 'label' }, heading), ...rows);
}

/** The iterations traced, never only those asked for: '1 iteration (forward passes; the script
 * ended; 2 requested)'. */
function iterationsFact(meta: Meta): string {
  const traced = meta.iterations_traced ?? meta.iterations;
  const why: string[] = meta.iteration_unit ? [meta.iteration_unit] : [];
  if (meta.interrupted) why.push(`interrupted; ${meta.iterations} requested`);
  else if (meta.iterations_traced !== undefined && traced < meta.iterations)
    why.push(`the script ended; ${meta.iterations} requested`);
  const text = `${traced} iteration${traced === 1 ? '' : 's'}`;
  return why.length ? `${text} (${why.join('; ')})` : text;
}

/** "Compiled regions": each torch.compile call whose code ran, as the trace ran it (Inductor's
 * program, the partitioner's graphs, or eagerly and why), its graphs and breaks, and what it
 * saves for backward against what eager autograd would save (meta.compiled_regions). */
function compiledRegions(meta: Meta): HTMLElement | null {
  const regions = meta.compiled_regions ?? [];
  if (!regions.length) return null;
  const rows = regions.map((r) =>
    el(
      'div',
      { class: 'compiled-region', title: r.place, 'data-compiled-as': r.compiled_as, 'data-saved': r.saved_bytes, 'data-eager-saved': r.eager_saved_bytes },
      el('span', null, r.call),
      el('span', { class: 'muted' }, `as ${r.compiled_as}`),
      el('span', { class: 'muted' }, `${r.graphs} graph${r.graphs === 1 ? '' : 's'}, ${r.graph_breaks} break${r.graph_breaks === 1 ? '' : 's'}`),
      el('span', { class: 'num' }, `saved ${formatBytes(r.saved_bytes)} (eager ${formatBytes(r.eager_saved_bytes)})`),
      r.eager_because ? el('span', { class: 'muted' }, `eager because ${r.eager_because}`) : null,
    ),
  );
  return el('div', { class: 'compiled', id: 'compiled-regions' }, el('div', { class: 'label' }, 'Compiled regions'), ...rows);
}

