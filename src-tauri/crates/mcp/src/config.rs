//! The servers a user configures, and the import of the `mcpServers` object that Claude Desktop
//! (`claude_desktop_config.json`), LM Studio (`mcp.json`) and Cursor (`.cursor/mcp.json`) write.

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::path::PathBuf;

use serde::{Deserialize, Serialize};

/// One server as the user added it. Nothing starts unless `enabled` is on.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "ts", derive(ts_rs::TS))]
pub struct ServerConfig {
    /// Unique among the user's servers: the key of the `mcpServers` object.
    pub name: String,
    pub enabled: bool,
    pub transport: TransportConfig,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "ts", derive(ts_rs::TS))]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum TransportConfig {
    /// A child process speaking JSON-RPC on its stdin/stdout.
    Stdio {
        command: String,
        #[serde(default)]
        args: Vec<String>,
        #[serde(default)]
        env: BTreeMap<String, String>,
        /// The working folder; the app's when absent.
        #[serde(default)]
        #[cfg_attr(feature = "ts", ts(type = "string | null"))]
        cwd: Option<PathBuf>,
    },
    /// Streamable HTTP on a loopback address only (`http://127.0.0.1:…`, `localhost`, `[::1]`).
    Http { url: String },
}

impl ServerConfig {
    /// The exact command line shown to the user before the first start.
    pub fn command_line(&self) -> String {
        match &self.transport {
            TransportConfig::Stdio { command, args, .. } => std::iter::once(command.as_str())
                .chain(args.iter().map(String::as_str))
                .map(shell_quote)
                .collect::<Vec<_>>()
                .join(" "),
            TransportConfig::Http { url } => url.clone(),
        }
    }
}

impl ServerConfig {
    /// The config without its environment variables' values (they often hold API keys): what
    /// may leave the machine in a plain export. The names stay, so the user knows what to set.
    pub fn without_secrets(&self) -> ServerConfig {
        let mut out = self.clone();
        if let TransportConfig::Stdio { env, .. } = &mut out.transport {
            for value in env.values_mut() {
                value.clear();
            }
        }
        out
    }
}

fn shell_quote(word: &str) -> String {
    let plain = !word.is_empty()
        && word
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_./:=@%+,".contains(c));
    if plain {
        word.to_string()
    } else {
        format!("'{}'", word.replace('\'', r"'\''"))
    }
}

#[derive(Debug, thiserror::Error, PartialEq)]
pub enum ConfigError {
    #[error("the file is not JSON: {0}")]
    NotJson(String),
    #[error("the file has no \"mcpServers\" object (Claude Desktop, LM Studio and Cursor keep their servers there)")]
    NoServers,
    #[error("server \"{name}\": {reason}")]
    Server { name: String, reason: String },
    #[error("{0}")]
    Url(String),
}

/// Reads the `mcpServers` object of a Claude Desktop / LM Studio / Cursor config file. Every
/// imported server starts disabled: the user sees its command line and turns it on.
/// A server with neither `command` nor `url`, or with a non-loopback `url`, is refused with
/// its name; nothing else of the file is kept.
pub fn import_mcp_servers(text: &str) -> Result<Vec<ServerConfig>, ConfigError> {
    let value: serde_json::Value =
        serde_json::from_str(text).map_err(|e| ConfigError::NotJson(e.to_string()))?;
    let servers = value
        .get("mcpServers")
        .and_then(|s| s.as_object())
        .ok_or(ConfigError::NoServers)?;
    let mut out = Vec::new();
    for (name, entry) in servers {
        let fail = |reason: &str| ConfigError::Server {
            name: name.clone(),
            reason: reason.to_string(),
        };
        let entry = entry
            .as_object()
            .ok_or_else(|| fail("its entry is not an object"))?;
        let strings = |key: &str| -> Result<Vec<String>, ConfigError> {
            match entry.get(key) {
                None | Some(serde_json::Value::Null) => Ok(Vec::new()),
                Some(serde_json::Value::Array(items)) => items
                    .iter()
                    .map(|v| {
                        v.as_str().map(str::to_string).ok_or_else(|| {
                            fail(&format!("\"{key}\" holds a value that is not text"))
                        })
                    })
                    .collect(),
                Some(_) => Err(fail(&format!("\"{key}\" is not a list"))),
            }
        };
        let transport = if let Some(command) = entry.get("command") {
            let command = command
                .as_str()
                .filter(|c| !c.trim().is_empty())
                .ok_or_else(|| fail("\"command\" is empty or not text"))?;
            let mut env = BTreeMap::new();
            if let Some(vars) = entry.get("env") {
                let vars = vars
                    .as_object()
                    .ok_or_else(|| fail("\"env\" is not an object"))?;
                for (k, v) in vars {
                    let v = v
                        .as_str()
                        .ok_or_else(|| fail(&format!("env \"{k}\" is not text")))?;
                    env.insert(k.clone(), v.to_string());
                }
            }
            let cwd = entry.get("cwd").and_then(|c| c.as_str()).map(PathBuf::from);
            TransportConfig::Stdio {
                command: command.to_string(),
                args: strings("args")?,
                env,
                cwd,
            }
        } else if let Some(url) = entry.get("url").or_else(|| entry.get("serverUrl")) {
            let url = url.as_str().ok_or_else(|| fail("\"url\" is not text"))?;
            check_loopback_url(url).map_err(|e| fail(&e.to_string()))?;
            TransportConfig::Http {
                url: url.to_string(),
            }
        } else {
            return Err(fail("it has neither \"command\" nor \"url\""));
        };
        out.push(ServerConfig {
            name: name.clone(),
            enabled: false,
            transport,
        });
    }
    Ok(out)
}

/// Streamable HTTP servers are reached on this machine only: `http://` with a loopback host.
pub fn check_loopback_url(url: &str) -> Result<(), ConfigError> {
    let refuse = |why: &str| ConfigError::Url(format!("{url}: {why}"));
    let rest = url
        .strip_prefix("http://")
        .ok_or_else(|| refuse("only http:// addresses on this machine are allowed"))?;
    let authority = rest.split(['/', '?', '#']).next().unwrap_or("");
    if authority.contains('@') {
        return Err(refuse("an address with a user name is not allowed"));
    }
    let host = if let Some(v6) = authority.strip_prefix('[') {
        v6.split(']').next().unwrap_or("")
    } else {
        authority.split(':').next().unwrap_or("")
    };
    let loopback = host.eq_ignore_ascii_case("localhost")
        || host.parse::<IpAddr>().is_ok_and(|ip| ip.is_loopback());
    if loopback {
        Ok(())
    } else {
        Err(refuse(
            "only loopback hosts (127.0.0.1, ::1, localhost) are allowed",
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn claude_desktop_config_imports_disabled_with_its_command_line() {
        let text = r#"{
          "globalShortcut": "Ctrl+Space",
          "mcpServers": {
            "filesystem": {"command": "npx", "args": ["-y", "@modelcontextprotocol/server-filesystem", "/Users/me/My Notes"]},
            "time": {"command": "uvx", "args": ["mcp-server-time"], "env": {"TZ": "Europe/Paris"}},
            "local": {"url": "http://127.0.0.1:3001/mcp"}
          }
        }"#;
        let servers = import_mcp_servers(text).unwrap();
        assert_eq!(servers.len(), 3);
        assert!(servers.iter().all(|s| !s.enabled));
        let fs = servers.iter().find(|s| s.name == "filesystem").unwrap();
        assert_eq!(
            fs.command_line(),
            "npx -y @modelcontextprotocol/server-filesystem '/Users/me/My Notes'"
        );
        let time = servers.iter().find(|s| s.name == "time").unwrap();
        let TransportConfig::Stdio { env, .. } = &time.transport else {
            panic!("time is stdio")
        };
        assert_eq!(env["TZ"], "Europe/Paris");
    }

    #[test]
    fn exports_carry_env_names_without_values() {
        let text = r#"{"mcpServers": {"gh": {"command": "gh-mcp", "env": {"GITHUB_TOKEN": "ghp_secret"}}}}"#;
        let server = &import_mcp_servers(text).unwrap()[0];
        let plain = serde_json::to_string(&server.without_secrets()).unwrap();
        assert!(!plain.contains("ghp_secret"), "{plain}");
        assert!(plain.contains("GITHUB_TOKEN"), "{plain}");
        // The stored config keeps the value, and round-trips.
        let stored = serde_json::to_string(server).unwrap();
        assert_eq!(
            &serde_json::from_str::<ServerConfig>(&stored).unwrap(),
            server
        );
    }

    #[test]
    fn bad_files_name_the_problem() {
        assert!(matches!(
            import_mcp_servers("{"),
            Err(ConfigError::NotJson(_))
        ));
        assert_eq!(
            import_mcp_servers(r#"{"servers": {}}"#),
            Err(ConfigError::NoServers)
        );
        let err = import_mcp_servers(r#"{"mcpServers": {"x": {"args": []}}}"#).unwrap_err();
        assert_eq!(
            err.to_string(),
            "server \"x\": it has neither \"command\" nor \"url\""
        );
        let err =
            import_mcp_servers(r#"{"mcpServers": {"far": {"url": "http://example.com/mcp"}}}"#)
                .unwrap_err();
        assert!(err.to_string().contains("only loopback hosts"), "{err}");
    }

    #[test]
    fn only_loopback_http_urls() {
        for ok in [
            "http://127.0.0.1:8080/mcp",
            "http://localhost/mcp",
            "http://[::1]:9/mcp",
            "http://127.1.2.3:1",
        ] {
            assert!(check_loopback_url(ok).is_ok(), "{ok}");
        }
        for bad in [
            "https://127.0.0.1/mcp",
            "http://192.168.1.2/mcp",
            "http://localhost.evil.com/mcp",
            "http://127.0.0.1@evil.com/",
            "ftp://localhost",
        ] {
            assert!(check_loopback_url(bad).is_err(), "{bad}");
        }
    }
}
