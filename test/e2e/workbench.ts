// What a user sees and does in the VS Code workbench, as Playwright calls. Selectors are VS
// Code's own DOM classes; they are gathered here so a VS Code upgrade is fixed in one place.
import { mkdirSync } from 'node:fs';
import * as path from 'node:path';
import type { Frame, Page } from 'playwright-core';
import { artifactsDir } from './paths';
import { timeouts } from './timeouts';

export interface LineDecoration {
  /** 1-based line number. */
  line: number;
  /** The rendered text (CSS ::after content, unquoted). */
  text: string;
  /** Drawn in italics: a stale annotation, or the "tracing" placeholder. */
  italic: boolean;
}

export interface StatusBarItem {
  id: string;
  text: string;
  ariaLabel: string;
}

export interface Notification {
  message: string;
  /** "info" | "warning" | "error" (from the icon), "" if unknown. */
  severity: string;
  /** The extension's display name, e.g. "Torch Memory Lens"; "" for the workbench's own. */
  source: string;
}

const sel = {
  workbench: '.monaco-workbench',
  quickInput: '.quick-input-widget',
  quickInputBox: '.quick-input-widget .quick-input-box input',
  quickInputRows: '.quick-input-widget .quick-input-list .monaco-list-row',
  activeTab: '.tabs-container .tab.active',
  editor: '.part.editor .editor-instance .monaco-editor',
  activeEditor: '.part.editor .editor-group-container.active .editor-instance .monaco-editor',
  hover: '.monaco-hover:not(.hidden)',
  statusItems: '#workbench\\.parts\\.statusbar .statusbar-item',
  /** One row per notification, in toasts and in the notification center. */
  notificationRows: '.notifications-toasts .monaco-list-row, .notifications-center .monaco-list-row',
  dialog: '.monaco-dialog-box',
  activityBarItems: '.part.activitybar .action-item a, .part.activitybar .action-item .action-label',
  paneHeaders: '.part.sidebar .pane-header',
} as const;

export class Workbench {
  constructor(readonly page: Page) {}

  /** Waits for the workbench shell and for the explorer to list the workspace. */
  async waitReady(): Promise<void> {
    await this.page.locator(sel.workbench).waitFor({ timeout: timeouts.workbench });
    await this.page
      .locator('.explorer-folders-view .monaco-list-row')
      .first()
      .waitFor({ timeout: timeouts.workbench });
  }

  /** Opens a workspace file by name through Quick Open, as a user would. */
  async openFile(name: string): Promise<void> {
    await this.quickInput(name);
    await this.pickRow(name);
    await this.page.locator(`${sel.activeTab}[data-resource-name="${name}"]`).waitFor({ timeout: timeouts.ui });
    await this.page.locator(sel.activeEditor).waitFor({ timeout: timeouts.ui });
  }

  /** Moves the cursor to a line of the active editor (Go to Line), which scrolls it into view. */
  async goToLine(line: number): Promise<void> {
    await this.quickInput(`:${line}`);
    await this.page.keyboard.press('Enter');
    await this.page.locator(sel.quickInput).waitFor({ state: 'hidden', timeout: timeouts.ui });
    await this.page
      .locator('#status\\.editor\\.selection')
      .filter({ hasText: new RegExp(`Ln ${line},`) })
      .waitFor({ timeout: timeouts.ui });
  }

  /** The cursor's line in the active editor, from the status bar ("Ln 12, Col 1"). */
  async cursorLine(): Promise<number | undefined> {
    const text = await this.page.locator('#status\\.editor\\.selection').innerText().catch(() => '');
    const m = /Ln (\d+)/.exec(text);
    return m ? Number(m[1]) : undefined;
  }

  /** Runs a command from the palette (F1) by its visible label, e.g. "Memlens: Trace Memory". */
  /** `opensInput`: the command asks for input in the same quick-input widget at once (Find
   * What Fits): the palette's close may never be seen, so the caller waits for that input. */
  async runCommand(label: string, opts: { opensInput?: boolean } = {}): Promise<void> {
    await this.quickInput(`>${label}`);
    await this.pickRow(label, !opts.opensInput);
  }

  private async quickInput(value: string): Promise<void> {
    const dialog = await this.modalDialog();
    if (dialog) throw new Error(`a dialog blocks the workbench: ${dialog}`);
    await this.page.keyboard.press('F1');
    const box = this.page.locator(sel.quickInputBox);
    await box.waitFor({ timeout: timeouts.ui });
    await box.fill(value);
  }

  /** Clicks the first quick-input row labelled exactly `label`, waiting for it to appear. */
  private async pickRow(label: string, waitClosed = true): Promise<void> {
    const exact = new RegExp(`^${label.replace(/[.*+?^${}()|[\]\\]/g, '\\$&')}$`);
    const row = this.page
      .locator(sel.quickInputRows)
      .filter({ has: this.page.locator('.label-name', { hasText: exact }) })
      .first();
    await row.waitFor({ timeout: timeouts.ui });
    await row.click();
    if (waitClosed) await this.page.locator(sel.quickInput).waitFor({ state: 'hidden', timeout: timeouts.ui });
  }

  /** Text of an open modal dialog (e.g. "Command ... resulted in an error"), if any. */
  async modalDialog(): Promise<string | undefined> {
    const box = this.page.locator(sel.dialog).first();
    if ((await box.count()) === 0 || !(await box.isVisible())) return undefined;
    return box.evaluate((el) =>
      ['.dialog-message-text', '.dialog-message-detail']
        .map((s) => (el.querySelector(s) as HTMLElement | null)?.innerText.trim() ?? '')
        .filter(Boolean)
        .join(': '),
    );
  }

  /**
   * Polls `probe` until it returns a value. For state that has no event to await (computed
   * styles, lists re-rendered in place). A modal dialog blocks the workbench, so one ends the
   * wait at once with its text instead of a timeout a minute later.
   */
  private async poll<T>(what: string, probe: () => Promise<T | undefined>, seen: () => Promise<unknown>): Promise<T> {
    const deadline = Date.now() + timeouts.ui;
    for (;;) {
      const value = await probe();
      if (value !== undefined) return value;
      const dialog = await this.modalDialog();
      if (dialog) throw new Error(`waiting for ${what}, VS Code showed a dialog: ${dialog}`);
      if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}; saw ${JSON.stringify(await seen())}`);
      await this.page.waitForTimeout(200);
    }
  }

  /** What the active editor's visible lines draw besides their text, by line number: the
   * after-line decorations (CSS ::after content) and the inlay hints (VS Code's injected text,
   * spans with a generated `dyn-rule-*` class). */
  private async lineExtras(): Promise<{ line: number; afters: { text: string; italic: boolean }[]; injected: string }[]> {
    const editor = this.page.locator(sel.activeEditor).first();
    await editor.waitFor({ timeout: timeouts.ui });
    return editor.evaluate((root) => {
      // Line numbers live in the margin, at the `top` of their first view line. A wrapped line
      // continues in view lines with no number of their own: they belong to the number above.
      const numbered: { top: number; line: number }[] = [];
      for (const n of root.querySelectorAll<HTMLElement>('.margin-view-overlays > div')) {
        const num = n.querySelector('.line-numbers')?.textContent?.trim();
        if (num) numbered.push({ top: parseFloat(n.style.top), line: Number(num) });
      }
      numbered.sort((a, b) => a.top - b.top);
      const lineAt = (top: number): number | undefined => numbered.filter((n) => n.top <= top).pop()?.line;
      const found: { line: number; afters: { text: string; italic: boolean }[]; injected: string }[] = [];
      for (const viewLine of root.querySelectorAll<HTMLElement>('.view-lines > .view-line')) {
        const line = lineAt(parseFloat(viewLine.style.top));
        if (line === undefined) continue;
        const afters: { text: string; italic: boolean }[] = [];
        for (const span of viewLine.querySelectorAll('span')) {
          const after = getComputedStyle(span, '::after');
          const content = after.content;
          if (!content || content === 'none' || content === 'normal') continue;
          // Serialized as a CSS string: "\"≈ hello\"" with backslash escapes.
          afters.push({ text: content.replace(/^"|"$/g, '').replace(/\\(.)/g, '$1'), italic: after.fontStyle === 'italic' });
        }
        const injected = [...viewLine.querySelectorAll<HTMLElement>('span[class*="dyn-rule-"]')]
          .map((s) => s.textContent ?? '')
          .join('')
          .replace(/\u00a0/g, ' ')
          .trim();
        found.push({ line, afters, injected });
      }
      return found.sort((a, b) => a.line - b.line);
    });
  }

  /** After-line decoration texts in the active editor's visible lines. */
  async lineDecorations(): Promise<LineDecoration[]> {
    return (await this.lineExtras()).flatMap((l) => l.afters.map((a) => ({ line: l.line, ...a })));
  }

  /** Inlay hints of the active editor's visible lines. */
  async inlayHints(): Promise<{ line: number; text: string }[]> {
    return (await this.lineExtras()).filter((l) => l.injected).map((l) => ({ line: l.line, text: l.injected }));
  }

  async waitForInlayHint(text: RegExp, line: number): Promise<{ line: number; text: string }[]> {
    return this.poll(
      `an inlay hint ${String(text)} on line ${line}`,
      async () => {
        const all = await this.inlayHints();
        return all.some((h) => h.line === line && text.test(h.text)) ? all : undefined;
      },
      () => this.inlayHints(),
    );
  }

  /** Waits until a line shows a decoration matching `text` (and, given `italic`, drawn in
   * italics or not); returns all decorations then. */
  async waitForDecoration(text: string | RegExp, line?: number, italic?: boolean): Promise<LineDecoration[]> {
    const matches = (d: LineDecoration): boolean =>
      (line === undefined || d.line === line) &&
      (italic === undefined || d.italic === italic) &&
      (typeof text === 'string' ? d.text === text : text.test(d.text));
    return this.poll(
      `decoration ${String(text)}${line === undefined ? '' : ` on line ${line}`}${italic === undefined ? '' : italic ? ' in italics' : ' upright'}`,
      async () => {
        const all = await this.lineDecorations();
        return all.some(matches) ? all : undefined;
      },
      () => this.lineDecorations(),
    );
  }

  /** Lines (1-based) of the active editor's visible lines with an error (or warning) squiggle. */
  async squiggleLines(kind: 'error' | 'warning' = 'error'): Promise<number[]> {
    const editor = this.page.locator(sel.activeEditor).first();
    return editor.evaluate((root, squiggle) => {
      const numbered: { top: number; line: number }[] = [];
      for (const n of root.querySelectorAll<HTMLElement>('.margin-view-overlays > div')) {
        const num = n.querySelector('.line-numbers')?.textContent?.trim();
        if (num) numbered.push({ top: parseFloat(n.style.top), line: Number(num) });
      }
      numbered.sort((a, b) => a.top - b.top);
      const lines = new Set<number>();
      for (const overlay of root.querySelectorAll<HTMLElement>('.view-overlays > div')) {
        if (!overlay.querySelector(squiggle)) continue;
        const top = parseFloat(overlay.style.top);
        const line = numbered.filter((n) => n.top <= top).pop()?.line;
        if (line !== undefined) lines.add(line);
      }
      return [...lines].sort((a, b) => a - b);
    }, `.squiggly-${kind}`);
  }

  /** Waits until `line` of the active editor shows an error (or warning) squiggle. */
  async waitForSquiggle(line: number, kind: 'error' | 'warning' = 'error'): Promise<number[]> {
    return this.poll(
      `a${kind === 'error' ? 'n' : ''} ${kind} squiggle on line ${line}`,
      async () => {
        const lines = await this.squiggleLines(kind);
        return lines.includes(line) ? lines : undefined;
      },
      () => this.squiggleLines(kind),
    );
  }

  /** The CodeLens titles shown in the active editor. */
  async codeLenses(): Promise<string[]> {
    const editor = this.page.locator(sel.activeEditor).first();
    return editor.evaluate((root) =>
      [...root.querySelectorAll<HTMLElement>('.codelens-decoration a, .codelens-decoration span')]
        .map((a) => a.innerText.trim())
        .filter((t) => t && t !== '|'),
    );
  }

  /** Waits until the active editor shows no CodeLens (its provider gone with the server:
   * VS Code drops the stale ones on its next render, after the server's notification). */
  async waitForNoCodeLens(): Promise<string[]> {
    return this.poll(
      'no CodeLens',
      async () => ((await this.codeLenses()).length === 0 ? [] : undefined),
      () => this.codeLenses(),
    );
  }

  async waitForCodeLens(text: string | RegExp): Promise<string[]> {
    const matches = (t: string): boolean => (typeof text === 'string' ? t === text : text.test(t));
    return this.poll(
      `a CodeLens ${String(text)}`,
      async () => {
        const all = await this.codeLenses();
        return all.some(matches) ? all : undefined;
      },
      () => this.codeLenses(),
    );
  }

  /** Moves the mouse over the first word of a (visible) line, or over `word` on it, and
   * returns the hover's text. */
  async hoverLine(line: number, word?: string): Promise<string> {
    const editor = this.page.locator(sel.activeEditor).first();
    const box = await editor.evaluate((root, wanted) => {
      let top: string | undefined;
      for (const n of root.querySelectorAll<HTMLElement>('.margin-view-overlays > div')) {
        if (n.querySelector('.line-numbers')?.textContent?.trim() === String(wanted.line)) top = n.style.top;
      }
      const viewLine = [...root.querySelectorAll<HTMLElement>('.view-lines > .view-line')].find(
        (l) => l.style.top === top,
      );
      const tokens = [...(viewLine?.querySelectorAll('span span') ?? [])];
      const token = wanted.word
        ? tokens.find((s) => s.textContent?.trim() === wanted.word)
        : tokens.find((s) => s.textContent?.trim());
      const r = token?.getBoundingClientRect();
      return r ? { x: r.left + Math.min(r.width / 2, 10), y: r.top + r.height / 2 } : undefined;
    }, { line, word });
    if (!box) throw new Error(`line ${line} is not visible or has no ${word ? `token "${word}"` : 'text'}`);
    // Monaco shows a hover after the mouse rests; arrive with a real move so it notices.
    await this.page.mouse.move(box.x + 40, box.y + 40);
    await this.page.mouse.move(box.x, box.y, { steps: 5 });
    const hover = this.page.locator(sel.hover).first();
    await hover.waitFor({ timeout: timeouts.ui });
    // The hover opens with "Loading..." while providers answer.
    await this.page.waitForFunction(
      (s) => {
        const t = (document.querySelector(s) as HTMLElement | null)?.innerText.trim();
        return !!t && !/^Loading\.\.\.$/.test(t);
      },
      sel.hover,
      { timeout: timeouts.ui },
    );
    return (await hover.innerText()).trim();
  }

  /** Hides an open hover (Escape) so it does not cover the next screenshot. */
  async dismissHover(): Promise<void> {
    await this.page.mouse.move(0, 0);
    await this.page.keyboard.press('Escape');
    await this.page.locator(sel.hover).waitFor({ state: 'hidden', timeout: timeouts.ui });
  }

  async statusBarItems(): Promise<StatusBarItem[]> {
    return this.page.locator(sel.statusItems).evaluateAll((items) =>
      items.map((el) => ({
        id: el.id,
        text: (el as HTMLElement).innerText.trim(),
        ariaLabel: el.querySelector('a')?.getAttribute('aria-label') ?? el.getAttribute('aria-label') ?? '',
      })),
    );
  }

  /** Notifications shown as toasts, plus any in the (opened) notification center. */
  async notifications(): Promise<Notification[]> {
    return this.page.locator(sel.notificationRows).evaluateAll((items) =>
      items.map((el) => {
        const icon = el.querySelector('.notification-list-item-icon')?.className ?? '';
        // A collapsed toast does not render its source; the row's aria-label always names it.
        const label = el.getAttribute('aria-label') ?? '';
        return {
          message: (el.querySelector('.notification-list-item-message') as HTMLElement | null)?.innerText.trim() ?? '',
          severity: /codicon-(error|warning|info)/.exec(icon)?.[1] ?? '',
          source: /, source: (.*?), notification/.exec(label)?.[1] ?? '',
        };
      }),
    );
  }

  /** Waits until no notification matches `text` (a progress notification ends by going away). */
  async waitForNoNotification(text: string | RegExp, timeout = timeouts.ui): Promise<void> {
    const matches = (n: Notification): boolean =>
      typeof text === 'string' ? n.message.includes(text) : text.test(n.message);
    const deadline = Date.now() + timeout;
    for (;;) {
      const all = await this.notifications();
      if (!all.some(matches)) return;
      const dialog = await this.modalDialog();
      if (dialog) throw new Error(`waiting for notification ${String(text)} to end, VS Code showed a dialog: ${dialog}`);
      if (Date.now() > deadline) throw new Error(`timed out waiting for notification ${String(text)} to end; saw ${JSON.stringify(all)}`);
      await this.page.waitForTimeout(250);
    }
  }

  /** Clicks a button of the notification whose message matches `text`. */
  async clickNotificationButton(text: string | RegExp, button: string): Promise<void> {
    const row = this.page
      .locator(sel.notificationRows)
      .filter({ has: this.page.locator('.notification-list-item-message', { hasText: text }) })
      .first();
    await row.hover();
    await row.locator('.monaco-button', { hasText: button }).first().click({ timeout: timeouts.ui });
  }

  /** Clears every notification (so that the next screenshot shows the editor). */
  async clearNotifications(): Promise<void> {
    await this.runCommand('Notifications: Clear All Notifications');
  }

  async waitForNotification(text: string | RegExp): Promise<Notification> {
    const matches = (n: Notification): boolean =>
      typeof text === 'string' ? n.message.includes(text) : text.test(n.message);
    return this.poll(
      `notification ${String(text)}`,
      async () => (await this.notifications()).find(matches),
      () => this.notifications(),
    );
  }

  /**
   * Content frames of the open webviews. Each webview is an outer iframe (VS Code's host page
   * pre/index.html, whose URL names the owning extension) around an inner frame with the
   * content. The inner frame is told apart by its parent, not by its id: VS Code creates it as
   * "pending-frame" and renames it "active-frame", and Playwright keeps the first name.
   */
  webviewFrames(extensionId?: string): Frame[] {
    return this.page.frames().filter((f) => {
      const host = f.parentFrame()?.url() ?? '';
      if (!/\/webview\/browser\/pre\/index\.html\?/.test(host)) return false;
      return extensionId === undefined || new URL(host).searchParams.get('extensionId') === extensionId;
    });
  }

  /** Waits for a webview (optionally of one extension) whose body text contains `text`. */
  async waitForWebview(text: string, extensionId?: string): Promise<Frame> {
    const bodyOf = (f: Frame): Promise<string> =>
      f.evaluate(() => document.body?.innerText ?? '').catch(() => ''); // frame may be navigating
    return this.poll(
      `a webview showing "${text}"`,
      async () => {
        for (const frame of this.webviewFrames(extensionId)) if ((await bodyOf(frame)).includes(text)) return frame;
        return undefined;
      },
      () => Promise.all(this.webviewFrames(extensionId).map(bodyOf)),
    );
  }

  /** Opens a view container of the activity bar by its title (e.g. "Memory"), unless open. */
  async openViewContainer(title: string): Promise<void> {
    const label = `[aria-label^="${title.replace(/"/g, '\\"')}"]`;
    const item = this.page.locator(sel.activityBarItems.split(', ').map((s) => `${s}${label}`).join(', ')).first();
    await item.waitFor({ timeout: timeouts.ui });
    const checked = await item.evaluate((el) => el.closest('.action-item')?.classList.contains('checked') ?? false);
    if (!checked) await item.click();
    // A container with one view hides that view's pane header: wait for its body instead.
    await this.page.locator('.part.sidebar .pane-body').first().waitFor({ timeout: timeouts.ui });
  }

  /** The rows of a side bar view (by its pane title): each row's label and description. */
  async viewRows(paneTitle: string): Promise<string[]> {
    const pane = this.page.locator('.part.sidebar .pane').filter({ has: this.page.locator('.pane-header', { hasText: paneTitle }) }).first();
    // "label description": the two are separate elements with no space between them.
    return pane.locator('.monaco-list-row').evaluateAll((rows) =>
      rows.map((r) =>
        ['.label-name', '.label-description']
          .map((s) => (r.querySelector(s) as HTMLElement | null)?.innerText.trim() ?? '')
          .filter(Boolean)
          .join(' '),
      ),
    );
  }

  async waitForViewRow(paneTitle: string, text: string | RegExp): Promise<string[]> {
    const matches = (r: string): boolean => (typeof text === 'string' ? r.includes(text) : text.test(r));
    return this.poll(
      `a row ${String(text)} in the ${paneTitle} view`,
      async () => {
        const rows = await this.viewRows(paneTitle);
        return rows.some(matches) ? rows : undefined;
      },
      () => this.viewRows(paneTitle),
    );
  }

  /** Saves test/e2e/artifacts/<name>.png (name may hold a subfolder) and returns its path. */
  async screenshot(name: string): Promise<string> {
    const file = path.join(artifactsDir, `${name}.png`);
    mkdirSync(path.dirname(file), { recursive: true });
    await this.page.screenshot({ path: file });
    return file;
  }
}
