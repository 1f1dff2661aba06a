// The panel: receives a snapshot from its host, validates it (an invalid one shows its error,
// never a blank page), and renders the summary and the six tabs. Only the visible tab renders;
// a change re-renders just the parts it touches, the others when they are next shown.
import { applyThemeDefaults } from './charts';
import type { Context, Part } from './context';
import { Derived } from './context';
import type { Snapshot } from '../common/snapshot';
import { TABS, restoreState, snapshotKeyOf, type PanelState, type Tab } from './data/state';
import { deepChecks, parseSnapshot, validateSnapshot, validateTop } from '../common/validate';
import { el, replace } from './dom';
import type { Host } from './host';
import type { HostMessage } from '../common/messages';
import { readTheme, watchTheme, type Theme } from './theme';
import { validateFitReport } from '../common/fitReport';
import { CompareView } from './views/compare';
import { DetailsView } from './views/details';
import { renderFit } from './views/fit';
import { renderHeader } from './views/header';
import { ModulesView } from './views/modules';
import { PhasesView } from './views/phases';
import { TableView } from './views/table';
import { TimelineView } from './views/timeline';

/** Views that read tensors, the allocation stream or the second snapshot: they wait for the
 *  deep checks. */
const NEEDS_DEEP = new Set<Tab>(['modules', 'table', 'details', 'compare']);

const TAB_LABELS: Record<Tab, string> = {
  phases: 'Phases',
  timeline: 'Timeline',
  modules: 'Modules',
  table: 'Table',
  details: 'Tensor details',
  compare: 'Compare',
};

interface View {
  render(): void;
  dispose(): void;
}

export class App {
  private snapshot: Snapshot | null = null;
  private derived: Derived | null = null;
  private compare: Snapshot | null = null;
  private compareError: string | null = null;
  private source: string | undefined;
  private compareSource: string | undefined;
  private state: PanelState | null = null;
  private theme: Theme;
  private views = new Map<Tab, View>();
  private dirty = new Set<Part>();
  private tabs: HTMLElement | null = null;
  private header: HTMLElement | null = null;
  private toastTimer = 0;
  private readonly toast: HTMLElement;
  private readonly main: HTMLElement;

  constructor(root: HTMLElement, private readonly host: Host) {
    this.theme = readTheme();
    applyThemeDefaults(this.theme);
    document.body.dataset['theme'] = this.theme.dark ? 'dark' : 'light';
    this.main = el('div', { class: 'app' });
    this.toast = el('div', { class: 'toast', id: 'toast', role: 'status', 'aria-live': 'polite' });
    replace(root, this.main, this.toast);
    watchTheme(() => this.onTheme());
  }

  start(): void {
    this.host.onMessage((m) => this.receive(m));
  }

  private receive(message: HostMessage): void {
    try {
      if (message.type === 'error') return this.showError(message.message);
      if (message.type === 'fit') return this.showFit(message.fit);
      if (message.type === 'compare') {
        this.setCompare(message.snapshot, message.source);
        return this.renderAll();
      }
      performance.mark('memlens:received');
      const name = message.source ?? 'snapshot';
      const parsed = validateTop(message.snapshot, name);
      if (!parsed.ok) return this.showError(parsed.error);
      this.load(parsed.snapshot, message.source);
      this.renderAll();
      performance.mark('memlens:rendered');
      const compare = message.compare === undefined ? null : { doc: message.compare, source: message.compareSource };
      void this.finishLoading(parsed.snapshot, name, compare);
    } catch (e) {
      // A bug of ours must still leave something readable on screen.
      this.showError(`The panel failed to show this snapshot: ${e instanceof Error ? `${e.message}\n${e.stack ?? ''}` : String(e)}`);
      this.host.log('error', String(e instanceof Error ? e.stack : e));
    }
  }

  /**
   * After the first paint: the deferred parts of the snapshot, the deep checks in slices between
   * frames, the second snapshot; then the views that need them render.
   */
  private async finishLoading(snapshot: Snapshot, name: string, compare: { doc: unknown; source: string | undefined } | null): Promise<void> {
    await new Promise((resolve) => setTimeout(resolve, 0));
    if (this.snapshot !== snapshot) return;
    const missing = this.host.loadDeferred(snapshot);
    if (missing) return this.showError(missing);
    const checks = deepChecks(snapshot, name);
    for (;;) {
      const step = checks.next();
      if (this.snapshot !== snapshot) return; // another snapshot arrived meanwhile
      if (step.done) {
        if (step.value !== null) return this.showError(step.value);
        break;
      }
      await new Promise((resolve) => setTimeout(resolve, 0));
    }
    if (this.snapshot !== snapshot || !this.derived) return;
    if (compare) this.setCompare(compare.doc, compare.source);
    this.derived.validated = true;
    performance.mark('memlens:validated');
    document.body.dataset['validated'] = 'true';
    this.renderDirty();
  }

  private load(snapshot: Snapshot, source: string | undefined): void {
    for (const v of this.views.values()) v.dispose();
    this.views.clear();
    this.snapshot = snapshot;
    this.derived = new Derived(snapshot);
    this.source = source;
    const saved = this.host.getState();
    this.state = restoreState(saved?.panel, snapshotKeyOf(snapshot));
    if (this.state.phase !== null && !snapshot.phases[this.state.phase]) this.state.phase = null;
    this.compare = null;
    this.compareError = null;
    this.buildLayout();
  }

  private setCompare(doc: unknown, source: string | undefined): void {
    const name = source ?? 'second snapshot';
    const parsed = validateSnapshot(doc, name);
    this.compare = parsed.ok ? parsed.snapshot : null;
    this.compareError = parsed.ok ? null : parsed.error;
    this.compareSource = parsed.ok ? source : undefined;
    this.dirty.add('compare');
  }

  private buildLayout(): void {
    const header = el('header', { class: 'summary', id: 'summary' });
    const tabs = el('vscode-tabs', { id: 'tabs', 'selected-index': TABS.indexOf(this.state!.tab) });
    for (const tab of TABS) {
      tabs.appendChild(el('vscode-tab-header', { slot: 'header', id: `tab-${tab}`, 'data-tab': tab }, TAB_LABELS[tab]));
      const view = el('div', { class: `view view-${tab}`, id: `view-${tab}` });
      tabs.appendChild(el('vscode-tab-panel', { id: `panel-${tab}` }, view));
      this.views.set(tab, this.makeView(tab, view));
    }
    tabs.addEventListener('vsc-tabs-select', (e) => {
      const index = (e as CustomEvent<{ selectedIndex: number }>).detail.selectedIndex;
      const tab = TABS[index];
      if (!tab || !this.state || tab === this.state.tab) return;
      this.state.tab = tab;
      this.save();
      this.renderDirty();
    });
    this.header = header;
    this.tabs = tabs;
    replace(this.main, header, tabs);
    for (const t of TABS) this.dirty.add(t);
    this.dirty.add('header');
  }

  private makeView(tab: Tab, root: HTMLElement): View {
    const ctx = () => this.context();
    switch (tab) {
      case 'phases':
        return new PhasesView(root, ctx);
      case 'timeline':
        return new TimelineView(root, ctx);
      case 'modules':
        return new ModulesView(root, ctx);
      case 'table':
        return new TableView(root, ctx);
      case 'details':
        return new DetailsView(root, ctx);
      case 'compare':
        return new CompareView(root, ctx);
    }
  }

  private context(): Context {
    const app = this;
    return {
      snapshot: this.snapshot!,
      derived: this.derived!,
      compare: this.compare,
      compareError: this.compareError,
      state: this.state!,
      theme: this.theme,
      standalone: this.host.kind === 'standalone',
      update: (change, parts) => this.update(change, parts),
      setPhase(phase) {
        app.update((st) => {
          st.phase = phase;
          const p = phase === null ? undefined : app.snapshot!.phases[phase];
          st.timeline.range = p ? [p.start_seq, Math.max(p.end_seq, p.start_seq + 1)] : null;
        });
      },
      showTab: (tab) => this.update((st) => (st.tab = tab), []),
      showTensor(id, switchTab = false) {
        app.update(
          (st) => {
            st.details = { tensor: id, line: null };
            if (switchTab) st.tab = 'details';
          },
          ['details'],
        );
      },
      openFile: (file, line) => this.host.openFile(file, line),
      loadCompare(text, name) {
        const parsed = parseSnapshot(text, name);
        app.compare = parsed.ok ? parsed.snapshot : null;
        app.compareError = parsed.ok ? null : parsed.error;
        app.compareSource = parsed.ok ? name : undefined;
        app.update(() => undefined, ['compare']);
      },
      pickCompare: this.host.pickCompare ? () => this.host.pickCompare?.() : null,
      clearCompare() {
        app.compare = null;
        app.compareError = null;
        app.compareSource = undefined;
        app.update(() => undefined, ['compare']);
      },
      notify: (text) => this.notify(text),
    };
  }

  private update(change: (state: PanelState) => void, parts?: Part[]): void {
    if (!this.state) return;
    const tab = this.state.tab;
    change(this.state);
    this.save();
    for (const p of parts ?? ['header', ...TABS]) this.dirty.add(p);
    if (this.state.tab !== tab && this.tabs) {
      (this.tabs as unknown as { selectedIndex: number }).selectedIndex = TABS.indexOf(this.state.tab);
    }
    this.renderDirty();
  }

  private renderAll(): void {
    this.dirty.add('header');
    for (const t of TABS) this.dirty.add(t);
    this.renderDirty();
    document.body.dataset['ready'] = 'true';
  }

  private renderDirty(): void {
    if (!this.state || !this.snapshot) return;
    if (this.dirty.has('header') && this.header) {
      renderHeader(this.header, this.context());
      this.dirty.delete('header');
    }
    const tab = this.state.tab;
    if (this.dirty.has(tab)) {
      if (NEEDS_DEEP.has(tab) && !this.derived?.validated) {
        const root = document.getElementById(`view-${tab}`);
        if (root && !root.querySelector('.checking')) replace(root, el('p', { class: 'empty checking' }, 'Checking the snapshot…'));
      } else {
        this.dirty.delete(tab);
        this.views.get(tab)?.render();
      }
    }
    document.body.dataset['tab'] = tab;
  }

  private save(): void {
    if (!this.state) return;
    const saved: { panel: PanelState; source?: string; compareSource?: string } = { panel: this.state };
    if (this.source !== undefined) saved.source = this.source;
    if (this.compareSource !== undefined) saved.compareSource = this.compareSource;
    this.host.setState(saved);
  }

  private onTheme(): void {
    this.theme = readTheme();
    applyThemeDefaults(this.theme);
    document.body.dataset['theme'] = this.theme.dark ? 'dark' : 'light';
    if (!this.snapshot) return;
    this.renderAll();
  }

  /** A search's result instead of a snapshot: the Fit view (views/fit.ts). */
  private showFit(fit: unknown): void {
    const checked = validateFitReport(fit);
    if (!checked.ok) return this.showError(checked.error);
    for (const v of this.views.values()) v.dispose();
    this.views.clear();
    this.snapshot = null;
    this.state = null;
    renderFit(this.main, checked.report, { openSnapshot: (p) => this.host.openSnapshot(p) });
    document.body.dataset['tab'] = 'fit';
    document.body.dataset['ready'] = 'true';
  }

  private showError(message: string): void {
    for (const v of this.views.values()) v.dispose();
    this.views.clear();
    this.snapshot = null;
    this.derived = null;
    this.state = null;
    replace(
      this.main,
      el(
        'div',
        { class: 'error-page', id: 'error', role: 'alert' },
        el('h2', null, 'This snapshot cannot be shown'),
        el('pre', { class: 'error-box', id: 'error-message' }, message),
        el(
          'p',
          { class: 'muted' },
          'A memlens snapshot is the JSON file that `memlens run` or `memlens trace` writes (see docs/snapshot-format.md). Trace again with this version of memlens, or check that the file was copied whole.',
        ),
      ),
    );
    document.body.dataset['ready'] = 'error';
  }

  notify(text: string): void {
    this.toast.textContent = text;
    this.toast.classList.add('visible');
    window.clearTimeout(this.toastTimer);
    this.toastTimer = window.setTimeout(() => this.toast.classList.remove('visible'), 5000);
  }
}
