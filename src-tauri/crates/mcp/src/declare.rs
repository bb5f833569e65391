//! The enabled tools as the chat template declares them: OpenAI's function-tool objects
//! (`{"type": "function", "function": {"name", "description", "parameters"}}`), the shape
//! `engine::template::ChatTemplate::prompt_ids_with_tools` takes and the local API declares.
//! The name the model sees is the tool's own where no other enabled tool has it, else
//! `server.tool`; [`Declared::resolve`] maps a call's name back to its server and tool.

use serde_json::{json, Value};

use crate::hub::ToolInfo;

#[derive(Debug, Clone, PartialEq)]
pub struct Declared {
    /// (name the model sees, server, tool), in the order declared.
    names: Vec<(String, String, String)>,
    /// The function-tool objects, in the same order.
    pub tools: Vec<Value>,
}

impl Declared {
    /// Declares `tools` (the enabled ones, in a stable order). The description and schema are
    /// the server's text, passed as data: the engine's protected prompt path writes every
    /// string of a declaration as text, never as control tokens.
    pub fn new(tools: &[ToolInfo]) -> Declared {
        let mut names = Vec::new();
        let mut declared = Vec::new();
        for tool in tools {
            let shared = tools
                .iter()
                .filter(|t| t.name == tool.name)
                .nth(1)
                .is_some();
            let name = if shared {
                format!("{}.{}", tool.server, tool.name)
            } else {
                tool.name.clone()
            };
            let parameters = if tool.input_schema.is_object() {
                tool.input_schema.clone()
            } else {
                json!({"type": "object", "properties": {}})
            };
            declared.push(json!({
                "type": "function",
                "function": {
                    "name": name,
                    "description": tool.description,
                    "parameters": parameters,
                }
            }));
            names.push((name, tool.server.clone(), tool.name.clone()));
        }
        Declared {
            names,
            tools: declared,
        }
    }

    /// The server and tool a call named `name` is for; `None` for a name not declared (the
    /// model made it up): the loop answers it as an unknown tool.
    pub fn resolve(&self, name: &str) -> Option<(&str, &str)> {
        self.names
            .iter()
            .find(|(n, _, _)| n == name)
            .map(|(_, server, tool)| (server.as_str(), tool.as_str()))
    }

    /// The name the model sees for `tool` of `server` (the composer's "/" forces this one).
    pub fn name_of(&self, server: &str, tool: &str) -> Option<&str> {
        self.names
            .iter()
            .find(|(_, s, t)| s == server && t == tool)
            .map(|(n, _, _)| n.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn info(server: &str, name: &str) -> ToolInfo {
        ToolInfo {
            server: server.into(),
            name: name.into(),
            description: format!("{name} of {server} <|tool_call>"),
            input_schema: json!({"type": "object", "properties": {"path": {"type": "string"}}}),
        }
    }

    #[test]
    fn unique_names_stay_plain_shared_ones_get_their_server() {
        let tools = [
            info("files", "read"),
            info("notes", "read"),
            info("time", "now"),
        ];
        let d = Declared::new(&tools);
        let names: Vec<&str> = d
            .tools
            .iter()
            .map(|t| t["function"]["name"].as_str().unwrap())
            .collect();
        assert_eq!(names, ["files.read", "notes.read", "now"]);
        assert_eq!(d.resolve("notes.read"), Some(("notes", "read")));
        assert_eq!(d.resolve("now"), Some(("time", "now")));
        assert_eq!(d.resolve("read"), None);
        assert_eq!(d.name_of("files", "read"), Some("files.read"));
        // The server's text is carried as is (as data), schema included.
        assert_eq!(
            d.tools[2]["function"]["description"],
            "now of time <|tool_call>"
        );
        assert_eq!(
            d.tools[2]["function"]["parameters"]["properties"]["path"]["type"],
            "string"
        );
    }

    #[test]
    fn a_tool_without_an_object_schema_takes_no_arguments() {
        let mut tool = info("s", "t");
        tool.input_schema = Value::Null;
        let d = Declared::new(&[tool]);
        assert_eq!(
            d.tools[0]["function"]["parameters"],
            json!({"type": "object", "properties": {}})
        );
    }
}
