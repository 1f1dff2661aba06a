// Debian's Chromium driven by playwright-core (no browser download: the machine is offline).
import { chromium, type Browser, type Page } from 'playwright-core';
import { CHROMIUM_ARGS } from './chromium';
import { chromiumPath } from './paths';

export interface BrowserLog {
  /** Uncaught exceptions in the page (the workbench or a webview). */
  pageErrors: string[];
  /** console.error / console.warning messages, prefixed by their type. */
  console: string[];
}

export interface OpenBrowser {
  browser: Browser;
  page: Page;
  log: BrowserLog;
}

export async function launchBrowser(): Promise<OpenBrowser> {
  const browser = await chromium.launch({ executablePath: chromiumPath, headless: true, args: CHROMIUM_ARGS });
  try {
    const context = await browser.newContext({ viewport: { width: 1400, height: 900 } });
    const page = await context.newPage();
    const log: BrowserLog = { pageErrors: [], console: [] };
    page.on('pageerror', (e) => log.pageErrors.push(`${e.name}: ${e.message}`));
    page.on('console', (m) => {
      if (m.type() !== 'error' && m.type() !== 'warning') return;
      // "Failed to load resource" names no URL in its text: the location has it.
      const where = m.location().url;
      log.console.push(`[${m.type()}] ${m.text()}${where ? ` (at ${where})` : ''}`);
    });
    return { browser, page, log };
  } catch (e) {
    await browser.close();
    throw e;
  }
}
