#!/usr/bin/env bash
# End-to-end tests against the real app window: tauri-driver + WebKitWebDriver, under Xvfb.
# Usage: tests/e2e/run.sh path/to/gemma-desk     (installs nothing; checks what it needs)
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/../.." && pwd)"

if [ "$#" -ne 1 ]; then
  echo "usage: $0 <path to the gemma-desk binary>" >&2
  exit 2
fi
app="$1"
if [ ! -x "$app" ]; then
  echo "e2e: no app binary at $app; build it with: cargo build -p gemma-desk" >&2
  exit 2
fi

tauri_driver="${TAURI_DRIVER:-$root/.deps/cargo/bin/tauri-driver}"
[ -x "$tauri_driver" ] || tauri_driver="$(command -v tauri-driver || true)"

missing=()
[ -n "$tauri_driver" ] ||
  missing+=("tauri-driver: cargo install tauri-driver --version 2.1.0 --locked --root .deps/cargo")
command -v WebKitWebDriver >/dev/null || missing+=("WebKitWebDriver: apt-get install webkit2gtk-driver")
command -v xvfb-run >/dev/null || missing+=("xvfb-run: apt-get install xvfb")
command -v xauth >/dev/null || missing+=("xauth: apt-get install xauth")
if ! python3 -c 'import sys; sys.exit(sys.version_info < (3, 9))' 2>/dev/null; then
  missing+=("python3 (3.9 or newer)")
fi
if [ "${#missing[@]}" -gt 0 ]; then
  echo "e2e: missing prerequisites:" >&2
  printf '  - %s\n' "${missing[@]}" >&2
  exit 2
fi

exec xvfb-run --auto-servernum --server-args="-screen 0 1280x900x24" \
  python3 "$here/first_run.py" --app "$app" --tauri-driver "$tauri_driver" --out "$root/tests/out/e2e"
