//! Every command is registered, allowed and in the manifest.

use super::*;

#[test]
fn every_command_is_registered_allowed_and_in_the_manifest() {
    // A command missing from build.rs or the capability is refused in the real window only.
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let read = |p: &str| std::fs::read_to_string(root.join(p)).unwrap();
    let main = read("src/main.rs");
    let mut registered: Vec<String> = main
        .lines()
        .filter_map(|l| {
            l.trim()
                .strip_prefix("commands::")?
                .strip_suffix(',')
                .map(str::to_owned)
        })
        .collect();
    let build = read("build.rs");
    let manifest = &build[build.find("COMMANDS").unwrap()..];
    let manifest = &manifest[..manifest.find("];").unwrap()];
    let mut listed: Vec<String> = manifest
        .lines()
        .filter_map(|l| {
            l.trim()
                .strip_prefix('"')?
                .strip_suffix("\",")
                .map(str::to_owned)
        })
        .collect();
    let capability: serde_json::Value =
        serde_json::from_str(&read("capabilities/default.json")).unwrap();
    let mut allowed: Vec<String> = capability["permissions"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|p| {
            p.as_str()?
                .strip_prefix("allow-")
                .map(|n| n.replace('-', "_"))
        })
        .collect();
    registered.sort();
    listed.sort();
    allowed.sort();
    assert!(registered.len() > 20, "{registered:?}");
    assert_eq!(listed, registered, "build.rs COMMANDS");
    assert_eq!(allowed, registered, "capabilities/default.json");
}
