#!/usr/bin/env bash
# Fetches the documents corpus (tests/documents/corpus.txt: sdists pinned by version and hash) into
# $1 (default .deps/documents-corpus) and unpacks it there; a second run with the same list does nothing.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
dest="${1:-$here/../../.deps/documents-corpus}"
python="${PYTHON:-python3}"
stamp="$dest/.fetched"
if [ -f "$stamp" ] && cmp -s "$stamp" "$here/corpus.txt"; then exit 0; fi
rm -rf "$dest" && mkdir -p "$dest/sdists"
"$python" -m pip download -q --disable-pip-version-check --no-deps --no-binary :all: \
  --require-hashes -r "$here/corpus.txt" -d "$dest/sdists"
for f in "$dest"/sdists/*.tar.gz; do tar -xzf "$f" -C "$dest"; done
cp "$here/corpus.txt" "$stamp"
