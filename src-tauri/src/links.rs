//! Links in answers are untrusted: only web links leave the app, and only to the system browser.

use crate::error::Error;

/// Returns `url` if it is an absolute http or https URL with a host, else why not.
pub fn checked(url: &str) -> Result<&str, Error> {
    let url = url.trim();
    let rest = url
        .strip_prefix("https://")
        .or_else(|| url.strip_prefix("http://"))
        .ok_or_else(|| Error::Invalid("only http and https links can be opened".into()))?;
    let host = rest.split(['/', '?', '#']).next().unwrap_or("");
    if host.is_empty() || url.chars().any(|c| c.is_control() || c.is_whitespace()) {
        return Err(Error::Invalid("this link is malformed".into()));
    }
    Ok(url)
}

#[cfg(test)]
mod tests {
    use super::checked;

    #[test]
    fn web_links_pass_and_everything_else_is_refused() {
        assert_eq!(
            checked("https://example.com/a?b#c").unwrap(),
            "https://example.com/a?b#c"
        );
        assert!(checked("http://localhost:8080").is_ok());
        for bad in [
            "javascript:alert(1)",
            "file:///etc/passwd",
            "data:text/html,<script>",
            "https://",
            "https:///path",
            "ftp://example.com",
            "https://exa mple.com",
            "https://example.com/\u{0}",
            "vbscript:msgbox",
            "/relative",
        ] {
            assert!(checked(bad).is_err(), "{bad}");
        }
    }
}
