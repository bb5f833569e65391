//! A request's `tools` and `tool_choice`: the function tools declared to the model (other tool
//! types are ignored, as ik_llama.cpp does), and whether the model may, must or must not call
//! one.

use serde_json::{json, Value};

use crate::error::ApiError;

/// What the model may do with the tools.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ToolChoice {
    /// Tools are not shown to the model (`"none"`, or no tools given).
    None,
    /// The model decides (`"auto"`, the default with tools).
    Auto,
    /// The model must call a tool (`"required"`).
    Required,
    /// The model must call this function.
    Named(String),
}

impl ToolChoice {
    /// Whether sampling must be constrained to a call: needs the engine's grammar constraint,
    /// which is not plugged in yet (see `completions::Plan`).
    pub fn needs_constraint(&self) -> bool {
        matches!(self, Self::Required | Self::Named(_))
    }
}

/// The tools of one request.
#[derive(Debug, Clone)]
pub struct Tools {
    /// The function tools to declare, as the chat template takes them (`{"type": "function",
    /// "function": {"name", "description", "parameters"}}`); empty when `choice` is `None`.
    pub declared: Vec<Value>,
    pub choice: ToolChoice,
}

impl Tools {
    /// Checks `tools` (chat-completions shape) and `tool_choice`.
    pub fn new(tools: Option<&[Value]>, choice: Option<&Value>) -> Result<Self, ApiError> {
        let mut declared = Vec::new();
        for (i, tool) in tools.unwrap_or_default().iter().enumerate() {
            let param = format!("tools[{i}]");
            match tool.get("type").and_then(Value::as_str) {
                Some("function") => {}
                Some(_) => continue,
                None => return Err(ApiError::invalid(&param, "a tool needs a `type`")),
            }
            let function = tool
                .get("function")
                .filter(|f| f.is_object())
                .ok_or_else(|| {
                    ApiError::invalid(&param, "a function tool needs a `function` object")
                })?;
            function_name(function, &param)?;
            if function.get("parameters").is_some_and(|p| !p.is_object()) {
                return Err(ApiError::invalid(
                    &format!("{param}.function.parameters"),
                    "`parameters` must be a JSON Schema object",
                ));
            }
            declared.push(tool.clone());
        }
        let choice = match choice {
            None | Some(Value::Null) => ToolChoice::Auto,
            Some(Value::String(s)) if s == "auto" => ToolChoice::Auto,
            Some(Value::String(s)) if s == "none" => ToolChoice::None,
            Some(Value::String(s)) if s == "required" => ToolChoice::Required,
            Some(object @ Value::Object(_)) => {
                let name = object
                    .get("function")
                    .and_then(|f| f.get("name"))
                    .or_else(|| object.get("name"))
                    .and_then(Value::as_str)
                    .ok_or_else(|| {
                        ApiError::invalid(
                            "tool_choice",
                            "a named tool choice is `{\"type\": \"function\", \"function\": {\"name\": …}}`",
                        )
                    })?;
                let known = declared
                    .iter()
                    .any(|t| t["function"]["name"].as_str() == Some(name));
                if !known {
                    return Err(ApiError::invalid(
                        "tool_choice",
                        format!("`tool_choice` names `{name}`, which is not among the tools"),
                    ));
                }
                ToolChoice::Named(name.to_owned())
            }
            Some(other) => {
                return Err(ApiError::invalid(
                    "tool_choice",
                    format!(
                        "`tool_choice` must be \"auto\", \"none\", \"required\" or a named function, not {other}"
                    ),
                ))
            }
        };
        if declared.is_empty() && choice.needs_constraint() {
            return Err(ApiError::invalid(
                "tool_choice",
                "`tool_choice` asks for a tool call, but no function tools were given",
            ));
        }
        let choice = if declared.is_empty() {
            ToolChoice::None
        } else {
            choice
        };
        if choice == ToolChoice::None {
            declared.clear();
        }
        Ok(Self { declared, choice })
    }
}

fn function_name<'v>(function: &'v Value, param: &str) -> Result<&'v str, ApiError> {
    function
        .get("name")
        .and_then(Value::as_str)
        .filter(|n| !n.is_empty())
        .ok_or_else(|| ApiError::invalid(param, "a function tool needs a `name`"))
}

/// A Responses API function tool (`{"type": "function", "name", "description",
/// "parameters"}`) in the chat-completions shape; other tool types are passed through (and
/// ignored by [`Tools::new`]).
pub fn from_responses_tool(tool: &Value) -> Value {
    if tool.get("type").and_then(Value::as_str) != Some("function")
        || tool.get("function").is_some()
    {
        return tool.clone();
    }
    let mut function = json!({ "name": tool.get("name").cloned().unwrap_or(Value::Null) });
    for field in ["description", "parameters", "strict"] {
        if let Some(value) = tool.get(field) {
            function[field] = value.clone();
        }
    }
    json!({ "type": "function", "function": function })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn weather() -> Value {
        json!({"type": "function", "function": {"name": "get_weather",
            "parameters": {"type": "object", "properties": {}}}})
    }

    #[test]
    fn function_tools_are_declared_and_others_ignored() {
        let tools = [weather(), json!({"type": "web_search"})];
        let auto = Tools::new(Some(&tools[..]), None).unwrap();
        assert_eq!(auto.declared, [weather()]);
        assert_eq!(auto.choice, ToolChoice::Auto);
        let none = Tools::new(Some(&tools[..]), Some(&json!("none"))).unwrap();
        assert!(none.declared.is_empty(), "`none` shows the model no tools");
        let named = json!({"type": "function", "function": {"name": "get_weather"}});
        let forced = Tools::new(Some(&tools[..]), Some(&named)).unwrap();
        assert_eq!(forced.choice, ToolChoice::Named("get_weather".into()));
        assert!(forced.choice.needs_constraint());
        assert!(Tools::new(Some(&tools[..]), Some(&json!("required")))
            .unwrap()
            .choice
            .needs_constraint());
    }

    #[test]
    fn bad_tools_and_choices_are_refused_in_words() {
        let other = json!({"type": "function", "function": {"name": "nope"}});
        for (tools, choice) in [
            (vec![json!({"type": "function"})], None),
            (vec![json!({"function": {"name": "f"}})], None),
            (
                vec![json!({"type": "function", "function": {"name": "f", "parameters": 3}})],
                None,
            ),
            (vec![weather()], Some(other)),
            (vec![weather()], Some(json!(7))),
            (vec![], Some(json!("required"))),
        ] {
            let error = Tools::new(Some(&tools[..]), choice.as_ref()).unwrap_err();
            assert_eq!(error.status(), axum::http::StatusCode::BAD_REQUEST);
        }
    }

    #[test]
    fn a_responses_tool_becomes_a_chat_tool() {
        let tool = json!({"type": "function", "name": "get_weather", "description": "d",
            "parameters": {"type": "object"}});
        assert_eq!(
            from_responses_tool(&tool),
            json!({"type": "function", "function": {"name": "get_weather", "description": "d",
                "parameters": {"type": "object"}}})
        );
    }
}
