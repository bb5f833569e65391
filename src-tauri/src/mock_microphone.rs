//! The e2e suite's microphone. WebKitGTK (the Linux webview) ships with `getUserMedia` off and
//! no one to grant it. When the e2e harness sets [`ENV`], the window turns on media streams and
//! WebKit's mock capture devices (a generated tone, no hardware) and grants the page's requests
//! for user media, so the composer's microphone runs end to end under Xvfb. Without the
//! variable nothing changes, and nothing here exists on macOS, where WKWebView leaves the
//! question to the OS (docs/MACOS.md).

use tauri::WebviewWindow;

/// Set only by tests/e2e (`harness.isolated_env`); read on Linux alone.
#[cfg(target_os = "linux")]
pub const ENV: &str = "GEMMA_DESK_E2E_MOCK_MICROPHONE";

/// Gives `window` the mock microphone when the e2e harness asks for it.
pub fn install(window: &WebviewWindow) -> tauri::Result<()> {
    #[cfg(target_os = "linux")]
    if std::env::var_os(ENV).is_some() {
        window.with_webview(|webview| {
            use webkit2gtk::glib::ObjectExt;
            use webkit2gtk::{
                PermissionRequestExt, SettingsExt, UserMediaPermissionRequest, WebViewExt,
            };
            let view = webview.inner();
            if let Some(settings) = WebViewExt::settings(&view) {
                settings.set_enable_media_stream(true);
                settings.set_enable_mock_capture_devices(true);
            }
            view.connect_permission_request(|_, request| {
                let user_media = request.is::<UserMediaPermissionRequest>();
                if user_media {
                    request.allow();
                }
                user_media
            });
        })?;
    }
    #[cfg(not(target_os = "linux"))]
    let _ = window;
    Ok(())
}
