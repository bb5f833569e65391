//! Builds mlx-c against the prebuilt MLX of the official PyPI wheel and generates bindings.
//!
//! Inputs (environment):
//! - `MLX_WHEEL_DIR` (required): a `pip install --no-deps --target` folder holding one of
//!   `mlx-cpu`, `mlx-metal` or `mlx-cuda-13` at the version mlx-c pins (`make deps` makes it).
//! - `MLX_C_SRC_DIR` (optional): mlx-c sources; by default those shipped inside the registry
//!   package `mlx-sys` 0.7.0, found with `cargo metadata` on a throw-away manifest.
//!
//! Outputs for dependents (`DEP_MLX_*`): `LIB_DIR` (folder of `libmlx`), `WHEEL_DIR`,
//! `VERSION`, `FLAVOR` (cpu | cuda | metal). Binaries add an rpath to `LIB_DIR` themselves:
//! an rpath emitted here would not reach them.

use std::env;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

fn main() {
    println!("cargo:rerun-if-env-changed=MLX_WHEEL_DIR");
    println!("cargo:rerun-if-env-changed=MLX_C_SRC_DIR");
    println!("cargo:rerun-if-changed=shim/half_shim.h");

    let wheel = wheel_dir();
    let (flavor, wheel_version) = wheel_flavor_and_version(&wheel);
    let mlx_c = mlx_c_dir();
    let pinned = mlx_c_pinned_version(&mlx_c);
    if wheel_version != pinned {
        fail(&format!(
            "the MLX wheel in {} is {flavor} {wheel_version}, but mlx-c (in {}) is written for MLX \
             {pinned}. Install the matching wheel: `make deps` (pip install --no-deps --target {} \
             mlx-{flavor}=={pinned}).",
            wheel.display(),
            mlx_c.display(),
            wheel.display()
        ));
    }

    let include = wheel.join("mlx/include");
    let lib_dir = wheel.join("mlx/lib");
    let shim = PathBuf::from(env::var("CARGO_MANIFEST_DIR").unwrap()).join("shim/half_shim.h");
    compile_mlx_c(&mlx_c, &include, &shim);

    println!("cargo:rustc-link-search=native={}", lib_dir.display());
    println!("cargo:rustc-link-lib=dylib=mlx");
    if env::var("CARGO_CFG_TARGET_VENDOR").as_deref() == Ok("apple") {
        println!("cargo:rustc-link-lib=dylib=c++");
    } else {
        println!("cargo:rustc-link-lib=dylib=stdc++");
    }
    println!("cargo:lib_dir={}", lib_dir.display());
    println!("cargo:wheel_dir={}", wheel.display());
    println!("cargo:version={wheel_version}");
    println!("cargo:flavor={flavor}");
    println!("cargo:rustc-env=MLX_FLAVOR={flavor}");

    generate_bindings(&mlx_c, &include, &shim);
}

fn fail(message: &str) -> ! {
    eprintln!("\nmlx-sys: {message}\n");
    panic!("mlx-sys: {message}");
}

fn wheel_dir() -> PathBuf {
    let Some(dir) = env::var_os("MLX_WHEEL_DIR") else {
        fail("MLX_WHEEL_DIR is not set. Run `make deps` (it installs the MLX wheel into .deps/).");
    };
    let dir = PathBuf::from(dir);
    if !dir.join("mlx/include/mlx/mlx.h").exists() {
        fail(&format!(
            "no MLX wheel found in {} (expected mlx/include/mlx/mlx.h). Run `make deps`.",
            dir.display()
        ));
    }
    dir
}

/// Reads the flavour and version from the wheel's `.dist-info` folder name.
fn wheel_flavor_and_version(wheel: &Path) -> (String, String) {
    let entries =
        fs::read_dir(wheel).unwrap_or_else(|e| fail(&format!("{}: {e}", wheel.display())));
    for entry in entries.flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        let Some(stem) = name.strip_suffix(".dist-info") else {
            continue;
        };
        for (prefix, flavor) in [
            ("mlx_cpu-", "cpu"),
            ("mlx_metal-", "metal"),
            ("mlx_cuda_13-", "cuda-13"),
        ] {
            if let Some(version) = stem.strip_prefix(prefix) {
                return (flavor.to_owned(), version.to_owned());
            }
        }
    }
    fail(&format!(
        "{} holds no mlx-cpu / mlx-metal / mlx-cuda-13 .dist-info; run `make deps`.",
        wheel.display()
    ));
}

fn mlx_c_pinned_version(mlx_c: &Path) -> String {
    let cmake = fs::read_to_string(mlx_c.join("CMakeLists.txt"))
        .unwrap_or_else(|e| fail(&format!("{}/CMakeLists.txt: {e}", mlx_c.display())));
    cmake
        .lines()
        .find_map(|line| {
            let tag = line.trim().strip_prefix("GIT_TAG v")?;
            tag.split(|c: char| c == ')' || c.is_whitespace())
                .next()
                .map(str::to_owned)
        })
        .unwrap_or_else(|| fail("cannot find MLX's GIT_TAG in mlx-c's CMakeLists.txt"))
}

/// mlx-c ships inside the registry package of mlx-sys 0.7.0; `cargo metadata` on a throw-away
/// manifest tells where cargo unpacked it (it is a dependency of mlx-rs, so it is already fetched).
fn mlx_c_dir() -> PathBuf {
    if let Some(dir) = env::var_os("MLX_C_SRC_DIR") {
        return PathBuf::from(dir);
    }
    let out = PathBuf::from(env::var("OUT_DIR").unwrap()).join("locate-mlx-c");
    fs::create_dir_all(out.join("src")).unwrap();
    fs::write(
        out.join("Cargo.toml"),
        "[package]\nname = \"locate-mlx-c\"\nversion = \"0.0.0\"\nedition = \"2021\"\n\
         [lib]\npath = \"src/lib.rs\"\n[dependencies]\nmlx-sys = { version = \"=0.7.0\", \
         default-features = false }\n[workspace]\n",
    )
    .unwrap();
    fs::write(out.join("src/lib.rs"), "").unwrap();
    let cargo = env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let mut cmd = Command::new(cargo);
    cmd.args(["metadata", "--format-version", "1", "--manifest-path"])
        .arg(out.join("Cargo.toml"));
    if env::var_os("CARGO_NET_OFFLINE").is_some() {
        cmd.arg("--offline");
    }
    let output = cmd
        .output()
        .unwrap_or_else(|e| fail(&format!("running cargo metadata: {e}")));
    if !output.status.success() {
        fail(&format!(
            "cargo metadata could not locate the mlx-sys 0.7.0 package (set MLX_C_SRC_DIR to \
             mlx-c sources instead): {}",
            String::from_utf8_lossy(&output.stderr)
        ));
    }
    let meta: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    let packages = meta["packages"].as_array().cloned().unwrap_or_default();
    for package in packages {
        if package["name"] == "mlx-sys" && package["version"] == "0.7.0" {
            let manifest = PathBuf::from(package["manifest_path"].as_str().unwrap_or_default());
            let dir = manifest.parent().unwrap().join("src/mlx-c");
            if dir.join("mlx/c/mlx.h").exists() {
                return dir;
            }
        }
    }
    fail("mlx-sys 0.7.0 from the registry does not contain src/mlx-c; set MLX_C_SRC_DIR");
}

fn mlx_c_sources(mlx_c: &Path) -> Vec<PathBuf> {
    let mut sources: Vec<PathBuf> = fs::read_dir(mlx_c.join("mlx/c"))
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|e| e == "cpp"))
        .collect();
    sources.sort();
    sources
}

/// Compiles mlx-c as a few unity translation units (much faster than one unit per file).
fn compile_mlx_c(mlx_c: &Path, include: &Path, shim: &Path) {
    let sources = mlx_c_sources(mlx_c);
    for source in &sources {
        println!("cargo:rerun-if-changed={}", source.display());
    }
    let out = PathBuf::from(env::var("OUT_DIR").unwrap()).join("unity");
    fs::create_dir_all(&out).unwrap();
    // ops.cpp alone is about half of the work; the rest is split so both cores stay busy.
    let (big, rest): (Vec<_>, Vec<_>) = sources.iter().partition(|p| p.ends_with("ops.cpp"));
    let mut groups: Vec<Vec<&PathBuf>> = vec![big];
    let half = rest.len().div_ceil(2);
    groups.extend(rest.chunks(half.max(1)).map(|c| c.to_vec()));

    let mut build = cc::Build::new();
    build
        .cpp(true)
        .std("c++20")
        .include(include)
        .include(mlx_c)
        .warnings(false)
        .flag_if_supported("-fPIC")
        .flag("-include")
        .flag(shim.to_str().unwrap());
    for (i, group) in groups.iter().enumerate().filter(|(_, g)| !g.is_empty()) {
        let unit = out.join(format!("mlxc_unity_{i}.cpp"));
        let body: String = group
            .iter()
            .map(|p| format!("#include \"{}\"\n", p.display()))
            .collect();
        if fs::read_to_string(&unit).ok().as_deref() != Some(body.as_str()) {
            fs::write(&unit, body).unwrap();
        }
        build.file(unit);
    }
    build.compile("mlxc");
}

fn generate_bindings(mlx_c: &Path, include: &Path, shim: &Path) {
    let mut headers: Vec<PathBuf> = fs::read_dir(mlx_c.join("mlx/c"))
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|e| e == "h"))
        .collect();
    headers.sort();
    let arm = env::var("CARGO_CFG_TARGET_ARCH").as_deref() == Ok("aarch64");
    let mut builder = bindgen::Builder::default()
        .rust_target("1.73.0".parse().expect("rust-version"))
        .clang_arg(format!("-I{}", mlx_c.display()))
        .clang_arg(format!("-I{}", include.display()))
        .header(shim.to_string_lossy())
        .blocklist_function("malloc")
        .blocklist_function("realloc");
    if !arm {
        // Supplied by src/lib.rs with the shapes bindgen gives them on ARM.
        builder = builder
            .blocklist_type("float16_t")
            .blocklist_type("bfloat16_t");
    }
    for header in &headers {
        builder = builder.header(header.to_string_lossy());
    }
    let bindings = builder
        .generate()
        .unwrap_or_else(|e| fail(&format!("bindgen failed (is libclang-dev installed?): {e}")));
    let out = PathBuf::from(env::var("OUT_DIR").unwrap());
    bindings.write_to_file(out.join("bindings.rs")).unwrap();
}
