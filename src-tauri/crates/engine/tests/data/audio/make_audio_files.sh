#!/usr/bin/env bash
# Regenerates the small encoded recordings tests/audio_input.rs and the `audio_decode` fuzz target
# start from (needs espeak-ng and ffmpeg, which `make system-deps` installs):
#     bash src-tauri/crates/engine/tests/data/audio/make_audio_files.sh
set -euo pipefail
cd "$(dirname "$0")"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
espeak-ng -w "$tmp/hello.wav" "Hello from Gemma Desk."
ff() { ffmpeg -loglevel error -y -bitexact -i "$tmp/hello.wav" -ar 16000 -ac 1 -map_metadata -1 "$@"; }
ff -c:a libmp3lame -b:a 24k hello.mp3
ff -c:a flac hello.flac
ff -c:a libvorbis -q:a 0 hello.ogg
ff -c:a aac -b:a 24k hello.m4a
ls -l hello.*
