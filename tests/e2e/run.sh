#!/usr/bin/env bash
# End-to-end tests against the real app window: tauri-driver + WebKitWebDriver, under Xvfb,
# with the native folder dialog, file drops (an image, a WAV spoken by espeak-ng) and a clipboard
# paste driven through xdotool and xclip, the microphone as WebKitGTK's mock device, offline (a
# network namespace with only loopback).
# Usage: tests/e2e/run.sh path/to/gemma-desk     (installs nothing; checks what it needs)
# The tiny fixture model comes from $GEMMA_FIXTURES/tiny (default tests/out/fixtures/tiny,
# written by `make fixtures`); screenshots and logs go to $E2E_OUT (default tests/out/e2e).
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

fixtures="${GEMMA_FIXTURES:-$root/tests/out/fixtures}"
model="$fixtures/tiny"
out="${E2E_OUT:-$root/tests/out/e2e}"

# Debian's python3-gi serves the system interpreter, which may not be the first python3 on PATH.
gtk_python=""
for candidate in /usr/bin/python3 python3; do
  if "$candidate" -c 'import gi; gi.require_version("Gtk", "3.0"); from gi.repository import Gtk' 2>/dev/null; then
    gtk_python="$(command -v "$candidate")"
    break
  fi
done

missing=()
[ -f "$model/config.json" ] || missing+=("the tiny fixture model at $model: make fixtures (or set GEMMA_FIXTURES)")
[ -n "$gtk_python" ] || missing+=("python3 with GTK 3 bindings: apt-get install python3-gi gir1.2-gtk-3.0")
command -v xdotool >/dev/null || missing+=("xdotool: apt-get install xdotool")
command -v xclip >/dev/null || missing+=("xclip (puts an image on the clipboard to paste): apt-get install xclip")
command -v espeak-ng >/dev/null || missing+=("espeak-ng (speaks the WAV dropped on the window): apt-get install espeak-ng")
[ -n "$tauri_driver" ] ||
  missing+=("tauri-driver: cargo install tauri-driver --version 2.1.0 --locked --root .deps/cargo")
command -v WebKitWebDriver >/dev/null || missing+=("WebKitWebDriver: apt-get install webkit2gtk-driver")
command -v xvfb-run >/dev/null || missing+=("xvfb-run: apt-get install xvfb")
command -v xauth >/dev/null || missing+=("xauth: apt-get install xauth")
# Offline is part of what is tested: everything runs in a network namespace with only loopback
# (tauri-driver and WebKitWebDriver talk over it). Root makes one directly; other users through a
# user namespace where they are root.
netns=(unshare --net)
[ "$(id -u)" = 0 ] || netns=(unshare --net --map-root-user)
ip_tool="$(PATH="$PATH:/usr/sbin:/sbin" command -v ip || true)"
if [ -z "$ip_tool" ]; then
  missing+=("ip (to bring up loopback in the offline namespace): apt-get install iproute2")
elif ! "${netns[@]}" "$ip_tool" link set lo up 2>/dev/null; then
  missing+=("a network namespace for the offline run (${netns[*]} failed): run as root, or allow unprivileged user namespaces (sysctl kernel.unprivileged_userns_clone=1; on Ubuntu 24.04 also kernel.apparmor_restrict_unprivileged_userns=0)")
fi
if ! python3 -c 'import sys; sys.exit(sys.version_info < (3, 9))' 2>/dev/null; then
  missing+=("python3 (3.9 or newer)")
fi
if [ "${#missing[@]}" -gt 0 ]; then
  echo "e2e: missing prerequisites:" >&2
  printf '  - %s\n' "${missing[@]}" >&2
  exit 2
fi

"${netns[@]}" sh -c '"$0" link set lo up && exec "$@"' "$ip_tool" \
  xvfb-run --auto-servernum --server-args="-screen 0 1280x900x24" \
  python3 "$here/scenario.py" --app "$app" --tauri-driver "$tauri_driver" --model "$model" \
  --gtk-python "$gtk_python" --out "$out" --offline
exec "${netns[@]}" sh -c '"$0" link set lo up && exec "$@"' "$ip_tool" \
  xvfb-run --auto-servernum --server-args="-screen 0 1280x900x24" \
  "$here/damaged_history.sh" "$app" "$gtk_python" "$out"
