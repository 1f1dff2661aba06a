// Entry point of the panel bundle (dist/webview.js + dist/webview.css), the same in VS Code and
// in the standalone HTML report.
import '@vscode-elements/elements/dist/vscode-button/index.js';
import '@vscode-elements/elements/dist/vscode-checkbox/index.js';
import '@vscode-elements/elements/dist/vscode-option/index.js';
import '@vscode-elements/elements/dist/vscode-single-select/index.js';
import '@vscode-elements/elements/dist/vscode-tab-header/index.js';
import '@vscode-elements/elements/dist/vscode-tab-panel/index.js';
import '@vscode-elements/elements/dist/vscode-tabs/index.js';
import '@vscode-elements/elements/dist/vscode-textfield/index.js';
import './style.css';
import { App } from './app';
import { createHost } from './host';

function boot(): void {
  const root = document.getElementById('memlens-root') ?? document.body;
  let app: App | null = null;
  const host = createHost((text) => app?.notify(text));
  app = new App(root, host);
  app.start();
}

if (document.readyState === 'loading') document.addEventListener('DOMContentLoaded', boot);
else boot();
