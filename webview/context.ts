// What every view of one snapshot shares: the snapshot, what is derived from it once (lazily),
// the panel state, the theme, and the actions that change state or talk to the host.
import { eventIndex, type EventIndex } from './data/events';
import { moduleForest, type ModuleTreeNode } from './data/modules';
import { devicePhases, type PhaseRef } from './data/phases';
import type { Snapshot } from '../common/snapshot';
import type { PanelState, Tab } from './data/state';
import { TensorText, indexById } from './data/tensors';
import type { Theme } from './theme';

export class Derived {
  private _forest?: ModuleTreeNode[];
  private _text?: TensorText;
  private _phases?: PhaseRef[];
  private _events?: EventIndex;
  private _byId?: Map<number, number>;
  private _descendants = new Map<number, number[]>();
  /** True once the tensors and the allocation stream passed the deep checks. */
  validated = false;

  constructor(readonly snapshot: Snapshot) {}

  get forest(): ModuleTreeNode[] {
    return (this._forest ??= moduleForest(this.snapshot.modules));
  }
  get text(): TensorText {
    return (this._text ??= new TensorText(this.snapshot));
  }
  get phases(): PhaseRef[] {
    return (this._phases ??= devicePhases(this.snapshot));
  }
  get events(): EventIndex {
    if (!this.validated) return { at: () => null };
    return (this._events ??= eventIndex(this.snapshot));
  }
  /** Tensor row index by allocation id. */
  get byId(): Map<number, number> {
    return (this._byId ??= indexById(this.snapshot));
  }

  /** A module and every module inside it. */
  subtree(module: number): number[] {
    let cached = this._descendants.get(module);
    if (!cached) {
      const find = (nodes: ModuleTreeNode[]): ModuleTreeNode | undefined => {
        for (const n of nodes) {
          if (n.index === module) return n;
          const inner = find(n.children);
          if (inner) return inner;
        }
        return undefined;
      };
      const out: number[] = [];
      const walk = (n: ModuleTreeNode) => {
        out.push(n.index);
        n.children.forEach(walk);
      };
      const node = find(this.forest);
      if (node) walk(node);
      cached = out;
      this._descendants.set(module, cached);
    }
    return cached;
  }
}

/** The parts of the panel a change touches, so only those re-render. */
export type Part = 'header' | Tab;

export interface Context {
  readonly snapshot: Snapshot;
  readonly derived: Derived;
  readonly compare: Snapshot | null;
  readonly compareError: string | null;
  readonly state: PanelState;
  readonly theme: Theme;
  readonly standalone: boolean;
  /** Changes the state, saves it and re-renders the named parts (all when omitted). */
  update(change: (state: PanelState) => void, parts?: Part[]): void;
  /** Filters every view to one phase (a row index of snapshot.phases), or clears the filter. */
  setPhase(phase: number | null): void;
  showTab(tab: Tab): void;
  /** Shows a tensor (by allocation id) in Details. */
  showTensor(id: number, switchTab?: boolean): void;
  openFile(file: string, line: number): void;
  /** Reads a second snapshot (text) for Compare. */
  loadCompare(text: string, name: string): void;
  pickCompare: (() => void) | null;
  clearCompare(): void;
  notify(text: string): void;
}
