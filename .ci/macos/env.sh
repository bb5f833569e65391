# The environment for building the workspace for aarch64-apple-darwin on a non-Mac (make check-macos).
# Source it from bash, in a subshell: `(. .ci/macos/env.sh && cargo check --target aarch64-apple-darwin)`.
# Needs what `make macos-deps` installs: the rust target, zig in .deps/zig, the wheel in .deps/mlx-metal.
# Host builds (build scripts, proc macros) are untouched, so the Linux build's serve here: the tool
# variables name the target, and the rest matter only to Apple targets.

macos_dir=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
macos_root=$(cd "$macos_dir/../.." && pwd)

# The app's minimumSystemVersion and libmlx.dylib's minimum; rustc and the zig wrappers read it.
export MACOSX_DEPLOYMENT_TARGET=14.0
# The Linux build's target dir (or the caller's): cargo puts the Mac's crates in its
# aarch64-apple-darwin/ and reuses the build scripts and proc macros already compiled for the
# host (all but a few of them), which a target dir of its own would compile again.
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$macos_root/target}
export MLX_WHEEL_DIR=$macos_root/.deps/mlx-metal

export ZIG=$macos_root/.deps/zig/ziglang/zig
# rustc looks for an SDK (xcrun) and warns without one; zig's stand-in (libSystem.tbd) answers it.
export SDKROOT=$macos_root/.deps/zig/ziglang/lib/libc/darwin
export ZIG_GLOBAL_CACHE_DIR=$CARGO_TARGET_DIR/zig-cache
export ZIG_LOCAL_CACHE_DIR=$CARGO_TARGET_DIR/zig-cache
export CC_aarch64_apple_darwin=$macos_dir/zig-cc
export CXX_aarch64_apple_darwin=$macos_dir/zig-c++
export AR_aarch64_apple_darwin=$macos_dir/zig-ar
export CARGO_TARGET_AARCH64_APPLE_DARWIN_LINKER=$macos_dir/zig-cc
# stubs/: libiconv.tbd, which Rust's std asks for and zig does not ship.
export CARGO_TARGET_AARCH64_APPLE_DARWIN_RUSTFLAGS="-L native=$macos_dir/stubs"

# bindgen (mlx-sys) parses mlx-c as macOS: clang's own headers (float.h, stdint.h), the macOS libc
# headers zig ships, and bf16, which mlx-c's half types use on aarch64. The resource dir must be
# the one of the libclang bindgen loads: the newest installed (libclang-dev, `make system-deps`).
macos_clang_resource=$(ls -d /usr/lib/llvm-*/lib/clang/* 2>/dev/null | sort -V | tail -n 1)
export BINDGEN_EXTRA_CLANG_ARGS_aarch64_apple_darwin="-isystem $macos_clang_resource/include \
-isystem $macos_root/.deps/zig/ziglang/lib/libc/include/any-macos-any \
-Xclang -target-feature -Xclang +bf16"
