//! Document parts: chat completions' `{"type": "file", "file": {"file_data", "filename"}}` and
//! responses' `input_file`, read by the `documents` crate as the app reads an attached file and
//! put into the user turn as text (data, through the one protected prompt path). A file that
//! cannot be read is a 400 naming the field, with the reason in words. docs/DOCUMENTS.md.

use std::sync::atomic::AtomicBool;

use documents::{extract, Limits};
use serde_json::Value;

use crate::error::ApiError;

/// The prompt text of a document part whose fields are in `fields` (`file` of a chat
/// completions part, the part itself for responses); `param` names `fields` in errors.
pub fn file_text(fields: Option<&Value>, param: &str) -> Result<String, ApiError> {
    let fields = fields.ok_or_else(|| {
        ApiError::invalid(
            param,
            "a file part needs `file_data` (the file's bytes in base64) and `filename`",
        )
    })?;
    let data_param = format!("{param}.file_data");
    let Some(data) = fields.get("file_data").and_then(Value::as_str) else {
        let why = if fields.get("file_id").is_some() {
            "file ids are not served; send the file inline as `file_data` (base64)"
        } else {
            "a file part needs `file_data`: the file's bytes in base64"
        };
        return Err(ApiError::invalid(&data_param, why));
    };
    let name = fields
        .get("filename")
        .and_then(Value::as_str)
        .unwrap_or("document");
    let bytes = crate::messages::decode_base64_data(data).map_err(|e| {
        ApiError::invalid(
            &data_param,
            format!("the file's base64 data is not valid: {e}"),
        )
    })?;
    if bytes.is_empty() {
        return Err(ApiError::invalid(&data_param, "the file is empty"));
    }
    let document = extract(
        &bytes,
        name,
        &Limits::default(),
        &AtomicBool::new(false),
        &mut |_| {},
    )
    .map_err(|e| ApiError::invalid(&data_param, format!("{name}: {e}")))?;
    Ok(document.for_prompt(name))
}

#[cfg(test)]
mod tests {
    use super::*;
    use base64::Engine as _;
    use serde_json::json;

    fn b64(bytes: &[u8]) -> String {
        base64::engine::general_purpose::STANDARD.encode(bytes)
    }

    fn refusal(fields: Value) -> (String, String) {
        match file_text(Some(&fields), "messages[0].content[1].file").unwrap_err() {
            ApiError::Invalid { message, param } => (param.unwrap_or_default(), message),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn a_text_file_becomes_prompt_text_and_a_data_url_is_accepted() {
        let fields = json!({"filename": "notes.md", "file_data": b64(b"# Plan\n\nShip it.")});
        let text = file_text(Some(&fields), "p").unwrap();
        assert_eq!(
            text,
            "Attached document: notes.md (Markdown)\n# Plan\n\nShip it.\n"
        );
        let url = json!({"filename": "notes.md", "file_data": format!("data:text/markdown;base64,{}", b64(b"hi"))});
        assert!(file_text(Some(&url), "p").unwrap().ends_with("\nhi\n"));
    }

    #[test]
    fn unreadable_files_are_400s_naming_the_field() {
        let field = "messages[0].content[1].file.file_data".to_string();
        let (param, message) =
            refusal(json!({"filename": "menu.txt", "file_data": b64(b"caf\xe9")}));
        assert_eq!(param, field);
        assert!(
            message.starts_with("menu.txt: the file is not UTF-8"),
            "{message}"
        );
        let (_, message) =
            refusal(json!({"filename": "x.pdf", "file_data": b64(b"%PDF-1.7 garbage")}));
        assert!(message.contains("the PDF could not be read"), "{message}");
        let (param, message) = refusal(json!({"file_id": "file-123"}));
        assert_eq!(
            (param.as_str(), message.contains("file ids are not served")),
            (field.as_str(), true)
        );
        let (_, message) = refusal(json!({"file_data": "not base64!"}));
        assert!(message.contains("base64"), "{message}");
        let (_, message) = refusal(json!({"file_data": ""}));
        assert_eq!(message, "the file is empty");
    }
}
