#!/usr/bin/env bash
# A conversations database that cannot be opened, in the real app: it says so in a native dialog
# (opened from Finder, nobody reads stderr). "Quit" leaves every file as it was; "Move Aside and
# Start Fresh" moves the database and its attachments into damaged-<time>/, deletes nothing, and
# opens the window with an empty history.
#
# Usage: damaged_history.sh APP GTK_PYTHON OUT_DIR   (under an X server without a window
# manager, as run.sh provides; needs xdotool)
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
app=$1 gtk_python=$2 out=$3
home="$(mktemp -d)"
data="$home/data"
pid=""
cleanup() {
  if [ -n "$pid" ]; then
    kill "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
  fi
  rm -rf "$home"
}
trap cleanup EXIT
export HOME="$home" WEBKIT_DISABLE_DMABUF_RENDERER=1
mkdir -p "$out"

shot() { "$gtk_python" "$here/screen_grab.py" "$out/$1.png" || true; }
fail() {
  echo "damaged history: FAILED: $*" >&2
  shot FAILED-12-damaged-history
  exit 1
}
step() { echo "damaged history: $*"; }

# A window whose name matches $1 (an extended regex), within $2 seconds.
wait_window() {
  local id
  for _ in $(seq $(($2 * 4))); do
    id=$(xdotool search --name "$1" 2>/dev/null | head -1 || true)
    if [ -n "$id" ]; then echo "$id"; return 0; fi
    sleep 0.25
  done
  return 1
}

# Clicks the dialog's button row at $1 percent of its width (buttons share the row equally).
click_dialog_button() {
  local id X Y WIDTH HEIGHT
  id=$(wait_window "cannot open your conversations" 90) ||
    fail "no dialog about the damaged conversations within 90 s"
  sleep 1 # mapped and drawn
  eval "$(xdotool getwindowgeometry --shell "$id" | grep -E '^(X|Y|WIDTH|HEIGHT)=')"
  shot "12-$2"
  xdotool mousemove $((X + WIDTH * $1 / 100)) $((Y + HEIGHT - 17)) click 1
}

listing() { (cd "$data" && find . -type f -print0 | sort -z | xargs -0 sha256sum); }

mkdir -p "$data/attachments"
for _ in $(seq 200); do printf 'not a database, '; done > "$data/chats.sqlite3"
printf 'the bytes of a photo' > "$data/attachments/photo.png"
before="$(listing)"

step "Quit leaves everything as it was"
"$app" --data-dir "$data" 2>"$home/quit.log" & pid=$!
click_dialog_button 75 damaged-dialog
status=0
for _ in $(seq 80); do kill -0 "$pid" 2>/dev/null || break; sleep 0.25; done
kill -0 "$pid" 2>/dev/null && fail "the app did not quit within 20 s of Quit"
wait "$pid" || status=$?
pid=""
[ "$status" -ne 0 ] || fail "the app exited with status 0 after refusing to start"
grep -q "not a database" "$home/quit.log" || fail "stderr does not name the error: $(cat "$home/quit.log")"
[ "$(listing)" = "$before" ] || fail "files changed after Quit: $(listing)"

step "Move Aside and Start Fresh keeps the old files and opens an empty history"
"$app" --data-dir "$data" 2>"$home/fresh.log" & pid=$!
click_dialog_button 25 damaged-dialog-again
wait_window '^Gemma Desk$' 90 >/dev/null || fail "no main window within 90 s of Move Aside"
aside=$(find "$data" -maxdepth 1 -type d -name 'damaged-*' | head -1)
[ -n "$aside" ] || fail "no damaged-* folder in $data"
[ "$( (cd "$aside" && find . -type f -print0 | sort -z | xargs -0 sha256sum))" = "$before" ] ||
  fail "the set-aside folder does not hold the old files unchanged"
for _ in $(seq 40); do
  [ "$(head -c 15 "$data/chats.sqlite3" 2>/dev/null)" = "SQLite format 3" ] && break
  sleep 0.25
done
[ "$(head -c 15 "$data/chats.sqlite3")" = "SQLite format 3" ] || fail "no fresh database in $data"
kill -0 "$pid" 2>/dev/null || fail "the app is not running after Move Aside: $(cat "$home/fresh.log")"
sleep 3 # the page renders
shot 12-fresh-history
step "ok"
