// A real browser for the tests that look at the dashboard: Debian's Chromium, headless, driven by
// Playwright. Shared by test/src/dashboard.test.ts and test/src/vm.test.ts (which shows its
// desktop's screen in the dashboard on the VM it has already booted: a second boot under TCG
// costs more than a minute).
import { existsSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { chromium, type Browser, type BrowserContext, type Page } from 'playwright-core';

/** Debian's Chromium (scripts/setup.sh --test installs it). */
const CHROMIUM = '/usr/bin/chromium';
/** Screenshots the tests take, kept for people to look at (test/output/dashboard). */
export const SHOTS = join(dirname(fileURLToPath(import.meta.url)), '..', 'output', 'dashboard');
const DASHBOARD_BUILT = existsSync(fileURLToPath(new URL('../../packages/dashboard/dist/index.html', import.meta.url)));

/** Why the dashboard cannot be shown in a browser here, or false when it can. */
export const noBrowser = (): string | false => (!existsSync(CHROMIUM) ? 'no Chromium' : !DASHBOARD_BUILT ? 'the dashboard is not built' : false);

export function launchBrowser(): Promise<Browser> {
  return chromium.launch({
    executablePath: CHROMIUM,
    headless: true,
    args: ['--no-sandbox', '--disable-gpu', '--disable-background-networking', '--disable-component-update', '--disable-sync', '--no-first-run'],
  });
}

/**
 * A fresh browser tab (its own session storage) on `url`; `errors` collects what the page throws.
 * Its context is added to `contexts`, for the caller to close.
 */
export async function openTab(browser: Browser, contexts: BrowserContext[], url: string): Promise<{ page: Page; errors: string[] }> {
  const context = await browser.newContext({ viewport: { width: 1400, height: 900 } });
  contexts.push(context);
  const page = await context.newPage();
  const errors: string[] = [];
  page.on('pageerror', (e) => errors.push(String(e)));
  page.on('dialog', (d) => void d.accept());
  await page.goto(url + '/');
  return { page, errors };
}

/** Logs in on the page's key form. */
export async function logIn(page: Page, key: string): Promise<void> {
  await page.fill('input[name=key]', key);
  await page.click('button[type=submit]');
}
