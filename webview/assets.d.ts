// esbuild collects imported CSS into dist/webview.css.
declare module '*.css';
