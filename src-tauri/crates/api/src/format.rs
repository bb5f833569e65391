//! `response_format`: what a chat completion's answer must be, as a grammar the engine
//! enforces while sampling (not checked afterwards). `text` (or none) leaves the model free;
//! `json_object` is any JSON object; `json_schema` is a value valid under its `schema`.
//! Whether a schema can be enforced is decided by the engine with the model's vocabulary,
//! before anything is generated; a refusal names `response_format` (see `error.rs`).

use engine::constraint::Grammar;
use serde_json::Value;

use crate::error::ApiError;

const PARAM: &str = "response_format";

/// The grammar `format` asks for; `None` for free text.
pub fn grammar(format: Option<&Value>) -> Result<Option<Grammar>, ApiError> {
    let Some(format) = format.filter(|f| !f.is_null()) else {
        return Ok(None);
    };
    let invalid = |message: String| ApiError::invalid(PARAM, message);
    let Some(object) = format.as_object() else {
        return Err(invalid(format!(
            "`response_format` must be an object such as {{\"type\": \"json_object\"}}, not {format}"
        )));
    };
    match object.get("type").and_then(Value::as_str) {
        Some("text") => Ok(None),
        Some("json_object") => Ok(Some(Grammar::JsonObject)),
        Some("json_schema") => {
            let Some(spec) = object.get("json_schema").and_then(Value::as_object) else {
                return Err(invalid(
                    "`response_format.json_schema` must be an object with `name` and `schema`"
                        .into(),
                ));
            };
            match spec.get("name") {
                Some(Value::String(name)) if !name.is_empty() => {}
                _ => {
                    return Err(invalid(
                        "`response_format.json_schema.name` must be a non-empty string".into(),
                    ))
                }
            }
            // Enforced either way: `strict` is taken, and must be a boolean.
            if spec
                .get("strict")
                .is_some_and(|s| !s.is_boolean() && !s.is_null())
            {
                return Err(invalid(
                    "`response_format.json_schema.strict` must be true or false".into(),
                ));
            }
            match spec.get("schema") {
                Some(schema @ Value::Object(_)) => Ok(Some(Grammar::JsonSchema(schema.clone()))),
                // No schema: any JSON value, as OpenAI reads it.
                None | Some(Value::Null) => Ok(Some(Grammar::JsonSchema(Value::Object(
                    serde_json::Map::new(),
                )))),
                Some(other) => Err(invalid(format!(
                    "`response_format.json_schema.schema` must be a JSON schema object, not {other}"
                ))),
            }
        }
        Some(other) => Err(invalid(format!(
            "`response_format.type` must be `text`, `json_object` or `json_schema`, not `{other}`"
        ))),
        None => Err(invalid(
            "`response_format.type` is required: `text`, `json_object` or `json_schema`".into(),
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn each_type_becomes_its_grammar() {
        assert_eq!(grammar(None).unwrap(), None);
        assert_eq!(grammar(Some(&Value::Null)).unwrap(), None);
        assert_eq!(grammar(Some(&json!({ "type": "text" }))).unwrap(), None);
        assert_eq!(
            grammar(Some(&json!({ "type": "json_object" }))).unwrap(),
            Some(Grammar::JsonObject)
        );
        let schema = json!({ "type": "object", "properties": { "a": { "type": "boolean" } } });
        for strict in [json!(true), json!(false), Value::Null] {
            let format = json!({ "type": "json_schema",
                "json_schema": { "name": "a", "schema": schema, "strict": strict } });
            assert_eq!(
                grammar(Some(&format)).unwrap(),
                Some(Grammar::JsonSchema(schema.clone()))
            );
        }
    }

    #[test]
    fn a_malformed_format_is_refused_naming_response_format() {
        for format in [
            json!("json"),
            json!({}),
            json!({ "type": "xml" }),
            json!({ "type": "json_schema" }),
            json!({ "type": "json_schema", "json_schema": { "schema": {} } }),
            json!({ "type": "json_schema", "json_schema": { "name": "a", "schema": [] } }),
            json!({ "type": "json_schema", "json_schema": { "name": "a", "strict": "yes" } }),
        ] {
            let error = grammar(Some(&format)).unwrap_err();
            assert_eq!(error.param(), Some("response_format"), "{format}");
        }
    }
}
