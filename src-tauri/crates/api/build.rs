// Test binaries of this crate load libmlx from the wheel folder mlx-sys linked against.
fn main() {
    if let Ok(dir) = std::env::var("DEP_MLX_LIB_DIR") {
        println!("cargo:rustc-link-arg=-Wl,-rpath,{dir}");
    }
}
