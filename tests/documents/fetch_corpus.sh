#!/usr/bin/env bash
# Fetches the documents corpus into $1 (default .deps/documents-corpus) and unpacks it there: the
# sdists of tests/documents/corpus.txt (pinned by version and hash) and, for the retrieval test, the
# gnuplot 5.4 manual from Debian's gnuplot-doc (pinned below). A second run does nothing.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
dest="${1:-$here/../../.deps/documents-corpus}"
python="${PYTHON:-python3}"
stamp="$dest/.fetched"
DEB=gnuplot-doc DEB_VERSION=5.4.4+dfsg1-2
DEB_SHA256=73fe1816a296594cf6a1d38528f8d740fd650f57a2cb62e029f7920fcd5b31f0
want="$(cat "$here/corpus.txt"; echo "$DEB=$DEB_VERSION $DEB_SHA256")"
if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ]; then exit 0; fi
rm -rf "$dest" && mkdir -p "$dest/sdists"
"$python" -m pip download -q --disable-pip-version-check --no-deps --no-binary :all: \
  --require-hashes -r "$here/corpus.txt" -d "$dest/sdists"
for f in "$dest"/sdists/*.tar.gz; do tar -xzf "$f" -C "$dest"; done
command -v apt-get >/dev/null || { echo "apt-get is needed to fetch $DEB"; exit 1; }
(cd "$dest" && apt-get download -q "$DEB=$DEB_VERSION" 2>&1 | grep -v "^W: Download is performed unsandboxed" || true)
echo "$DEB_SHA256  $dest/${DEB}_${DEB_VERSION}_all.deb" | sha256sum -c --quiet
dpkg-deb -x "$dest/${DEB}_${DEB_VERSION}_all.deb" "$dest/$DEB"
echo "$want" > "$stamp"
