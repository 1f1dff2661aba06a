#!/usr/bin/env bash
# System packages the tests need, from Debian's archive. Idempotent: installs only what is
# missing, with sudo when not root. Each entry: a command that proves the package is there, and
# the package that provides it.
#   g++: compiles the fake-CUDA shim (python/memlens/cuda) at first use, for GPU targets
#   neovim: the second, independent LSP client of the language-server tests
set -euo pipefail

SUDO=""
if [ "$(id -u)" -ne 0 ]; then
  SUDO="sudo"
fi

missing=()
command -v "${CXX:-g++}" >/dev/null 2>&1 || missing+=(g++)
command -v nvim >/dev/null 2>&1 || missing+=(neovim)

if [ "${#missing[@]}" -gt 0 ]; then
  echo "installing system packages: ${missing[*]}"
  $SUDO apt-get update -qq || echo "apt-get update failed; trying the install with the lists at hand"
  $SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends "${missing[@]}"
fi
