// Polling for conditions outside the page (processes, HTTP, files). Inside the page use
// Playwright's own waits (locator.waitFor, page.waitForFunction).

export interface WaitOptions {
  timeout: number;
  /** Shown in the error when the condition never holds. */
  what: string;
  interval?: number;
  /** Checked before each probe: a message here ends the wait at once with that error. */
  fail?: () => string | undefined;
}

/** Resolves with the first truthy value `probe` returns; a throwing probe counts as "not yet". */
export async function waitFor<T>(
  probe: () => Promise<T | undefined | null | false> | T | undefined | null | false,
  { timeout, what, interval = 250, fail }: WaitOptions,
): Promise<T> {
  const deadline = Date.now() + timeout;
  let lastError: unknown;
  for (;;) {
    const fatal = fail?.();
    if (fatal !== undefined) throw new Error(`while waiting for ${what}: ${fatal}`);
    try {
      const value = await probe();
      if (value) return value;
    } catch (e) {
      lastError = e;
    }
    if (Date.now() > deadline) {
      const cause = lastError instanceof Error ? ` (last error: ${lastError.message})` : '';
      throw new Error(`timed out after ${timeout} ms waiting for ${what}${cause}`);
    }
    await new Promise((r) => setTimeout(r, interval));
  }
}
