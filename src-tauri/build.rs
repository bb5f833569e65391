fn main() {
    // Every app command is listed here, so it is denied unless a capability allows it.
    let manifest = tauri_build::AppManifest::new().commands(&["app_status"]);
    tauri_build::try_build(tauri_build::Attributes::new().app_manifest(manifest))
        .unwrap_or_else(|err| panic!("tauri-build failed: {err:#}"));
}
