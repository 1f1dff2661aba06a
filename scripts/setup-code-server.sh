#!/usr/bin/env bash
# Installs code-server (a full VS Code build served to a browser) into .tools/code-server/,
# plus the Debian packages the e2e tests need. Offline-friendly: only the npm registry and
# Debian mirrors are used. Native modules compile from source (~3.5 min on 2 cores), so the
# install is skipped when the pinned version is already complete.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
version="${CODE_SERVER_VERSION:-4.139.1}"
prefix="$root/.tools/code-server"
pkg_dir="$prefix/node_modules/code-server"
# Written last, so a half-finished install (e.g. interrupted compile) is redone.
marker="$prefix/.installed-$version"

log() { echo "code-server: [${SECONDS}s] $*" >&2; }

# --- Debian prerequisites -----------------------------------------------------------------
# libkrb5-dev: headers for the kerberos native module; chromium: the browser the tests drive;
# a compiler toolchain for node-gyp.
missing=()
for p in libkrb5-dev chromium; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done
command -v g++ >/dev/null || missing+=(g++)
command -v make >/dev/null || missing+=(make)
command -v python3 >/dev/null || missing+=(python3)

if [ "${#missing[@]}" -gt 0 ]; then
  sudo=()
  [ "$(id -u)" -eq 0 ] || sudo=(sudo)
  log "installing Debian packages: ${missing[*]}"
  # Fresh machines may have no package lists yet.
  "${sudo[@]}" apt-get update -qq >&2
  DEBIAN_FRONTEND=noninteractive "${sudo[@]}" apt-get install -y -qq --no-install-recommends \
    "${missing[@]}" >&2
else
  log "Debian prerequisites present"
fi

# --- code-server -------------------------------------------------------------------------
if [ -f "$marker" ] && [ -f "$pkg_dir/out/node/entry.js" ]; then
  log "$version already installed in $prefix"
  exit 0
fi

node_bin="$("$root/scripts/setup-node24.sh")"
# code-server refuses other Node majors, and its postinstall compiles native modules for the
# running Node: Node 24 must come first on PATH for the whole install...
export PATH="$node_bin:$PATH"
# ...and node-gyp must use Node 24's headers. A `nodedir` in an npmrc (this machine's points at
# /usr, i.e. the system Node 20) would otherwise build modules code-server cannot load.
export npm_config_nodedir="$(dirname "$node_bin")"
[ -f "$npm_config_nodedir/include/node/node_version.h" ] || {
  log "no Node headers under $npm_config_nodedir/include/node"
  exit 1
}
log "installing code-server@$version with Node $(node --version) (compiles native modules)"
# Start clean: a half-built tree may hold modules compiled for another Node.
rm -rf "$prefix"
mkdir -p "$prefix"
npm install --prefix "$prefix" --no-audit --no-fund --loglevel=error "code-server@$version" >&2

installed="$(node -p "require('$pkg_dir/package.json').version")"
if [ "$installed" != "$version" ]; then
  log "expected version $version, found $installed"
  exit 1
fi
# Load every addon compiled here once: a wrong ABI or a missing library shows up now, not as
# a blank workbench in the e2e tests. Windows-only addons compile to empty stubs on Linux.
node -e '
  const { execSync } = require("node:child_process");
  const path = require("node:path");
  const dir = process.argv[1];
  const addons = execSync("find . -path \"*/build/Release/*.node\" -not -path \"*/obj.target/*\"",
    { cwd: dir, encoding: "utf8" }).split("\n").filter((a) => a && !/windows|winreg/.test(a));
  if (addons.length === 0) throw new Error("no native addons found: did the postinstall run?");
  for (const a of addons) require(path.join(dir, a));
  console.error(`code-server: ${addons.length} native addons load under Node ${process.version}`);
' "$pkg_dir/lib/vscode"
touch "$marker"
log "installed $installed"
