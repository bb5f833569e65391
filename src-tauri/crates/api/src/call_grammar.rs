//! `tool_choice: "required"` or a named function: the answer held to Gemma 4's tool-call
//! format while sampling, as a Lark grammar for the engine's constraint (llguidance).
//!
//! A call is written as the chat template writes one, `<|tool_call>call:NAME{key:VALUE,…}<tool_call|>`
//! with strings between `<|"|>` delimiters (control tokens, named in the grammar, never text),
//! numbers, `true`/`false`/`null`, objects and arrays. The arguments follow the function's
//! `parameters` schema: every required property, optional ones in their declared order, values of
//! the declared type; `enum`/`const`, `anyOf`/`oneOf`, `maxLength`/`minLength`, `minItems`, an
//! integer's `minimum`..`maximum` when the range is under 256 values (written out) and a
//! non-negative `minimum` otherwise are kept; other keywords (`pattern`, `format`, other numeric
//! bounds, `$ref`) are not enforced, and a value without a usable schema may be
//! any value. With thinking on, a thought may come first. `"required"` allows one or more calls
//! of any offered function (exactly one with `parallel_tool_calls: false`); a named function
//! exactly one call of it. When the calls are written
//! the grammar is complete and only the end of the turn is allowed.

use serde_json::Value;

use crate::tools::{ToolChoice, Tools};

/// How deep a schema is followed before its values may be anything.
const MAX_DEPTH: usize = 8;

/// The grammar for `tools`' choice, or `None` when the choice does not force a call. `parallel`
/// (the request's `parallel_tool_calls`, default true) lets `"required"` write several calls.
pub fn call_grammar(tools: &Tools, thinking: bool, parallel: bool) -> Option<String> {
    let functions: Vec<&Value> = match &tools.choice {
        ToolChoice::Required => tools.declared.iter().map(|t| &t["function"]).collect(),
        ToolChoice::Named(name) => tools
            .declared
            .iter()
            .map(|t| &t["function"])
            .filter(|f| f["name"].as_str() == Some(name.as_str()))
            .collect(),
        ToolChoice::None | ToolChoice::Auto => return None,
    };
    let mut lark = Lark::default();
    let calls: Vec<String> = functions
        .iter()
        .map(|function| {
            let name = function["name"].as_str().unwrap_or_default();
            let args = match function.get("parameters") {
                Some(schema) => lark.object(schema, 0),
                None => lark.any(),
            };
            let body = format!(
                "<|tool_call> \"call:\" {} {args} <tool_call|>",
                literal(name)
            );
            lark.rule(&body)
        })
        .collect();
    let call = lark.rule(&calls.join(" | "));
    let calls = match tools.choice {
        ToolChoice::Required if parallel => format!("{call}+"),
        _ => call,
    };
    let start = if thinking {
        format!("(<|channel> /(?s:.+)/? <channel|>)? {calls}")
    } else {
        calls
    };
    let mut grammar = format!("start: {start}\n");
    for rule in &lark.rules {
        grammar.push_str(rule);
        grammar.push('\n');
    }
    Some(grammar)
}

/// Rules being written: `r0`, `r1`, … in order.
#[derive(Default)]
struct Lark {
    rules: Vec<String>,
    any: Option<String>,
}

impl Lark {
    /// A new rule with `body`; returns its name.
    fn rule(&mut self, body: &str) -> String {
        let name = format!("r{}", self.rules.len());
        self.rules.push(format!("{name}: {body}"));
        name
    }

    /// Any value (one shared rule).
    fn any(&mut self) -> String {
        if let Some(any) = &self.any {
            return any.clone();
        }
        let name = format!("r{}", self.rules.len());
        self.any = Some(name.clone());
        let key = r#"(/[A-Za-z0-9_.\-]+/ | <|"|> /(?s:.+)/ <|"|>)"#;
        let body = format!(
            "{} | {} | \"true\" | \"false\" | \"null\" | \"{{\" ({key} \":\" {name} (\",\" {key} \":\" {name})*)? \"}}\" | \"[\" ({name} (\",\" {name})*)? \"]\"",
            string(None, None),
            number(false, false),
        );
        self.rules.push(format!("{name}: {body}"));
        name
    }

    /// A value valid under `schema` (an expression).
    fn value(&mut self, schema: &Value, depth: usize) -> String {
        if depth > MAX_DEPTH || !schema.is_object() {
            return self.any();
        }
        if let Some(values) = schema.get("enum").and_then(Value::as_array) {
            let alternatives: Vec<String> = values.iter().map(constant).collect();
            if !alternatives.is_empty() {
                return format!("({})", alternatives.join(" | "));
            }
        }
        if let Some(value) = schema.get("const") {
            return constant(value);
        }
        for key in ["anyOf", "oneOf"] {
            if let Some(options) = schema.get(key).and_then(Value::as_array) {
                let alternatives: Vec<String> =
                    options.iter().map(|o| self.value(o, depth + 1)).collect();
                if !alternatives.is_empty() {
                    return format!("({})", alternatives.join(" | "));
                }
            }
        }
        match schema.get("type") {
            Some(Value::String(kind)) => self.typed(kind, schema, depth),
            Some(Value::Array(kinds)) => {
                let alternatives: Vec<String> = kinds
                    .iter()
                    .filter_map(Value::as_str)
                    .map(|kind| self.typed(kind, schema, depth))
                    .collect();
                if alternatives.is_empty() {
                    self.any()
                } else {
                    format!("({})", alternatives.join(" | "))
                }
            }
            _ if schema.get("properties").is_some() => self.object(schema, depth),
            _ => self.any(),
        }
    }

    fn typed(&mut self, kind: &str, schema: &Value, depth: usize) -> String {
        let count = |key: &str| schema.get(key).and_then(Value::as_u64);
        match kind {
            "string" => string(count("minLength"), count("maxLength")),
            "integer" => match integer_range(schema) {
                Some((low, high)) => {
                    let values: Vec<String> =
                        (low..=high).map(|n| literal(&n.to_string())).collect();
                    format!("({})", values.join(" | "))
                }
                None => number(true, non_negative(schema)),
            },
            "number" => number(false, non_negative(schema)),
            "boolean" => "(\"true\" | \"false\")".into(),
            "null" => "\"null\"".into(),
            "array" => {
                let item = match schema.get("items") {
                    Some(items) => self.value(items, depth + 1),
                    None => self.any(),
                };
                let item = self.rule(&item);
                if count("minItems").unwrap_or(0) > 0 {
                    format!("\"[\" {item} (\",\" {item})* \"]\"")
                } else {
                    format!("\"[\" ({item} (\",\" {item})*)? \"]\"")
                }
            }
            "object" => self.object(schema, depth),
            _ => self.any(),
        }
    }

    /// An object under `schema`: its properties, required ones always, optional ones in their
    /// declared order after them. Without properties: `{}`, or any object when extra properties
    /// are allowed and the schema says nothing more.
    fn object(&mut self, schema: &Value, depth: usize) -> String {
        let Some(properties) = schema.get("properties").and_then(Value::as_object) else {
            return match schema.get("additionalProperties") {
                Some(Value::Bool(false)) => "\"{}\"".into(),
                _ => self.any_object(),
            };
        };
        if properties.is_empty() {
            return "\"{}\"".into();
        }
        let required: Vec<&str> = schema
            .get("required")
            .and_then(Value::as_array)
            .map(|r| r.iter().filter_map(Value::as_str).collect())
            .unwrap_or_default();
        let mut must = Vec::new();
        let mut may = Vec::new();
        for (key, property) in properties {
            let value = self.value(property, depth + 1);
            let item = self.rule(&format!("{} {value}", key_literal(key)));
            if required.contains(&key.as_str()) {
                must.push(item);
            } else {
                may.push(item);
            }
        }
        let optional_tail = |from: usize| -> String {
            may[from..]
                .iter()
                .map(|i| format!(" (\",\" {i})?"))
                .collect()
        };
        if !must.is_empty() {
            let body: Vec<String> = must.iter().map(|i| i.to_string()).collect();
            return format!("\"{{\" {}{} \"}}\"", body.join(" \",\" "), optional_tail(0));
        }
        // No required property: empty, or any in-order selection of the optional ones.
        let starts: Vec<String> = (0..may.len())
            .map(|i| format!("{}{}", may[i], optional_tail(i + 1)))
            .collect();
        format!("\"{{\" ({})? \"}}\"", starts.join(" | "))
    }

    fn any_object(&mut self) -> String {
        let any = self.any();
        let key = r#"(/[A-Za-z0-9_.\-]+/ | <|"|> /(?s:.+)/ <|"|>)"#;
        format!("\"{{\" ({key} \":\" {any} (\",\" {key} \":\" {any})*)? \"}}\"")
    }
}

/// Most integers a bounded range is written out as (each one an alternative).
const MAX_RANGE: i64 = 256;

/// An integer schema's `minimum..=maximum`, when both are given and the range is small.
fn integer_range(schema: &Value) -> Option<(i64, i64)> {
    let low = schema.get("minimum").and_then(Value::as_f64)?.ceil() as i64;
    let high = schema.get("maximum").and_then(Value::as_f64)?.floor() as i64;
    (low <= high && high - low < MAX_RANGE).then_some((low, high))
}

fn non_negative(schema: &Value) -> bool {
    schema
        .get("minimum")
        .or_else(|| schema.get("exclusiveMinimum"))
        .and_then(Value::as_f64)
        .is_some_and(|m| m >= 0.0)
}

/// A string value between delimiters, of `min..=max` characters.
fn string(min: Option<u64>, max: Option<u64>) -> String {
    // A lexeme may not match the empty string: an empty string is the optional one left out.
    let at_least = min.unwrap_or(0).max(1);
    let body = match max {
        None => format!("/(?s:.{{{at_least},}})/"),
        Some(0) => return "<|\"|> <|\"|>".into(),
        Some(max) => format!("/(?s:.{{{at_least},{}}})/", max.max(at_least)),
    };
    if min.unwrap_or(0) == 0 {
        format!("<|\"|> {body}? <|\"|>")
    } else {
        format!("<|\"|> {body} <|\"|>")
    }
}

/// A number as the template writes one (bounded in digits, so a call always ends).
fn number(integer: bool, non_negative: bool) -> String {
    let sign = if non_negative { "" } else { "-?" };
    if integer {
        format!("/{sign}(0|[1-9][0-9]{{0,15}})/")
    } else {
        format!("/{sign}(0|[1-9][0-9]{{0,15}})(\\.[0-9]{{1,8}})?/")
    }
}

/// One allowed value, written as the template writes it.
fn constant(value: &Value) -> String {
    match value {
        Value::String(s) if s.is_empty() => "<|\"|> <|\"|>".into(),
        Value::String(s) => format!("<|\"|> {} <|\"|>", literal(s)),
        Value::Null => "\"null\"".into(),
        other => literal(&other.to_string()),
    }
}

/// A property name and its colon: bare when the template's bare form reads back, between
/// delimiters otherwise.
fn key_literal(key: &str) -> String {
    let bare = !key.is_empty()
        && key
            .chars()
            .all(|c| c.is_alphanumeric() || "_-.$@".contains(c));
    if bare {
        literal(&format!("{key}:"))
    } else {
        format!("<|\"|> {} <|\"|> \":\"", literal(key))
    }
}

/// A Lark string literal for `text`.
fn literal(text: &str) -> String {
    serde_json::to_string(text).unwrap_or_else(|_| "\"\"".into())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn tools(choice: &Value) -> Tools {
        let declared = vec![
            json!({"type": "function", "function": {"name": "get_weather", "parameters": {
                "type": "object",
                "properties": {"city": {"type": "string", "maxLength": 10},
                               "unit": {"enum": ["c", "f"]}},
                "required": ["city"]}}}),
            json!({"type": "function", "function": {"name": "now"}}),
        ];
        Tools::new(Some(&declared), Some(choice)).unwrap()
    }

    #[test]
    fn only_forced_choices_get_a_grammar() {
        assert!(call_grammar(&tools(&json!("auto")), false, true).is_none());
        assert!(call_grammar(&tools(&json!("none")), false, true).is_none());
        let required = call_grammar(&tools(&json!("required")), false, true).unwrap();
        assert!(
            required.contains("\"get_weather\"") && required.contains("\"now\""),
            "{required}"
        );
        let named = call_grammar(
            &tools(&json!({"type": "function", "function": {"name": "now"}})),
            false,
            true,
        )
        .unwrap();
        assert!(
            named.contains("\"now\"") && !named.contains("get_weather"),
            "{named}"
        );
    }

    #[test]
    fn required_properties_come_first_and_optional_ones_may_follow() {
        let grammar = call_grammar(&tools(&json!("required")), true, true).unwrap();
        assert!(grammar.starts_with("start: (<|channel>"), "{grammar}");
        assert!(
            grammar.contains("\"city:\" <|\"|> /(?s:.{1,10})/? <|\"|>"),
            "{grammar}"
        );
        assert!(
            grammar.contains("\"unit:\" (<|\"|> \"c\" <|\"|> | <|\"|> \"f\" <|\"|>)"),
            "{grammar}"
        );
        assert!(grammar.contains("(\",\" r"), "{grammar}");
    }
}
