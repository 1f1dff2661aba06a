// The flags both browser harnesses (the e2e tests in code-server, the panel's browser tests)
// start Debian's Chromium with: headless, as root in a container, nothing fetched from outside.
export const CHROMIUM_ARGS = [
  '--headless',
  '--no-sandbox', // running as root in a container
  '--disable-gpu',
  '--disable-quic',
  '--no-first-run',
  '--disable-background-networking',
  '--disable-component-update',
  '--disable-sync',
];
