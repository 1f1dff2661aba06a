// A scrolling list that keeps only the visible rows (plus a margin) in the DOM, reusing their
// elements: 100,000 rows cost as much as forty. Rows have one fixed height.

export interface VirtualRowsOptions {
  rowHeight: number;
  /** Fills a (reused) row element for row `index`. */
  renderRow(row: HTMLElement, index: number): void;
  /** Makes an empty row element; called only as the pool grows. */
  createRow(): HTMLElement;
  overscan?: number;
}

export class VirtualRows {
  readonly viewport: HTMLElement;
  private readonly spacer: HTMLElement;
  private readonly layer: HTMLElement;
  private readonly pool: HTMLElement[] = [];
  private count = 0;
  private frame = 0;
  private first = -1;
  private shown = 0;

  constructor(private readonly options: VirtualRowsOptions) {
    this.viewport = document.createElement('div');
    this.viewport.className = 'virtual-viewport';
    this.viewport.tabIndex = -1;
    this.spacer = document.createElement('div');
    this.spacer.className = 'virtual-spacer';
    this.layer = document.createElement('div');
    this.layer.className = 'virtual-layer';
    this.spacer.appendChild(this.layer);
    this.viewport.appendChild(this.spacer);
    this.viewport.addEventListener('scroll', () => this.schedule(), { passive: true });
    new ResizeObserver(() => this.schedule()).observe(this.viewport);
  }

  /** Sets the number of rows and redraws the visible ones. */
  setCount(count: number): void {
    this.count = count;
    this.spacer.style.setProperty('height', `${count * this.options.rowHeight}px`);
    this.refresh();
  }

  /** Redraws the visible rows now (after their data changed). */
  refresh(): void {
    this.first = -1;
    this.draw();
  }

  scrollToRow(index: number): void {
    const h = this.options.rowHeight;
    const top = index * h;
    const view = this.viewport;
    if (top < view.scrollTop) view.scrollTop = top;
    else if (top + h > view.scrollTop + view.clientHeight) view.scrollTop = top + h - view.clientHeight;
    this.draw();
  }

  get scrollTop(): number {
    return this.viewport.scrollTop;
  }

  set scrollTop(v: number) {
    this.viewport.scrollTop = v;
    this.draw();
  }

  private schedule(): void {
    if (this.frame) return;
    this.frame = requestAnimationFrame(() => {
      this.frame = 0;
      this.draw();
    });
  }

  private draw(): void {
    const h = this.options.rowHeight;
    const overscan = this.options.overscan ?? 8;
    const height = this.viewport.clientHeight || 600;
    const first = Math.max(0, Math.floor(this.viewport.scrollTop / h) - overscan);
    const shown = Math.min(this.count - first, Math.ceil(height / h) + 2 * overscan);
    if (first === this.first && shown === this.shown) return;
    this.first = first;
    this.shown = shown;
    while (this.pool.length < shown) {
      const row = this.options.createRow();
      this.pool.push(row);
      this.layer.appendChild(row);
    }
    this.layer.style.setProperty('transform', `translateY(${first * h}px)`);
    for (let i = 0; i < this.pool.length; i++) {
      const row = this.pool[i]!;
      if (i < shown) {
        row.hidden = false;
        this.options.renderRow(row, first + i);
      } else row.hidden = true;
    }
  }
}
