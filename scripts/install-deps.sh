#!/usr/bin/env bash
# Installs the Debian packages toolgate builds and tests with, when they are missing.
# Says what it does; fails with a clear message when it cannot install.
set -euo pipefail

packages=(
  build-essential cmake pkg-config clang libclang-rt-14-dev
  libjansson-dev libmicrohttpd-dev libcurl4-openssl-dev libsqlite3-dev sqlite3 libpq-dev
  libgit2-dev libyaml-dev libpcre2-dev libgnutls28-dev libcmocka-dev valgrind git jq curl
)
# The tests and the benchmark install their pinned npm packages (Node 22 among them) with
# npm. Any Node.js that runs npm will do: Debian's only when there is none.
command -v npm >/dev/null 2>&1 || packages+=(npm)

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done

if [ ${#missing[@]} -eq 0 ]; then
  echo "install-deps: all ${#packages[@]} Debian packages are present"
  exit 0
fi

echo "install-deps: installing missing Debian packages: ${missing[*]}"
sudo=""
if [ "$(id -u)" -ne 0 ]; then
  if command -v sudo >/dev/null 2>&1; then sudo="sudo"; else
    echo "install-deps: error: not root and no sudo; install these packages by hand: ${missing[*]}" >&2
    exit 1
  fi
fi
export DEBIAN_FRONTEND=noninteractive
if ! $sudo apt-get update -qq; then
  echo "install-deps: error: 'apt-get update' failed; check the Debian mirror configuration" >&2
  exit 1
fi
if ! $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}"; then
  echo "install-deps: error: could not install: ${missing[*]}" >&2
  exit 1
fi
echo "install-deps: done"
