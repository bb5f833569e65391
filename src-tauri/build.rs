/// Every app command, so each is denied unless a capability allows it.
const COMMANDS: &[&str] = &[
    "app_status",
    "choose_model_folder",
    "download_model",
    "cancel_download",
    "forget_model",
    "recent_models",
    "open_recent_model",
    "memory_usage",
    "list_conversations",
    "get_conversation",
    "rename_conversation",
    "set_pinned",
    "delete_conversation",
    "search_conversations",
    "send_message",
    "regenerate",
    "edit_message",
    "stop_generation",
    "get_settings",
    "save_settings",
    "pick_files",
    "add_pasted_file",
    "pending_audio",
    "attachment_audio",
    "paste_clipboard_image",
    "remove_pending_attachment",
    "attachment_thumbnail",
    "open_link",
    "select_version",
    "open_message",
    "conversation_markdown",
    "export_markdown",
    "export_json",
    "import_json",
    "attachment_view",
    "faster_answers",
    "set_faster_answers",
    "set_tower_idle",
    "download_drafter",
    "cancel_drafter_download",
    "set_system_prompt",
    "count_tokens",
    "drafts",
    "save_draft",
    "set_last_open",
    "quit",
    "local_api",
    "set_local_api",
    "regenerate_api_key",
    "api_log",
    "copy_text",
    "speak",
    "stop_speaking",
    "quick_ask_shortcut",
    "set_quick_ask_shortcut",
    "show_quick_ask",
    "hide_quick_ask",
    "quick_ask_hand_over",
    "mcp_servers",
    "mcp_save_server",
    "mcp_remove_server",
    "mcp_set_enabled",
    "mcp_tools",
    "mcp_set_tool_enabled",
    "mcp_import_file",
    "add_document",
    "message_documents",
];

fn main() {
    link_mlx();
    let manifest = tauri_build::AppManifest::new().commands(COMMANDS);
    tauri_build::try_build(tauri_build::Attributes::new().app_manifest(manifest))
        .unwrap_or_else(|err| panic!("tauri-build failed: {err:#}"));
}

/// Where the app finds libmlx at run time: next to the wheel it was linked against (`make run`,
/// tests), and, in the macOS bundle, in `Contents/Frameworks` beside mlx.metallib (see README).
fn link_mlx() {
    if let Ok(dir) = std::env::var("DEP_MLX_LIB_DIR") {
        println!("cargo:rustc-link-arg=-Wl,-rpath,{dir}");
    }
    if std::env::var("CARGO_CFG_TARGET_OS").as_deref() == Ok("macos") {
        println!("cargo:rustc-link-arg=-Wl,-rpath,@executable_path/../Frameworks");
    }
}
