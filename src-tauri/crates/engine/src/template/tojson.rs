//! transformers' `tojson` filter for chat templates: Python's `json.dumps`, not
//! minijinja's HTML-safe JSON.

use minijinja::value::Kwargs;
use minijinja::{Error as JinjaError, ErrorKind, Value};

/// `tojson` as transformers defines it: `json.dumps(x, ensure_ascii=False, indent=indent,
/// separators=separators, sort_keys=sort_keys)`; minijinja's own escapes `<`, `>` and `&`.
pub(super) fn python_tojson(
    value: &Value,
    kwargs: Kwargs,
) -> std::result::Result<Value, JinjaError> {
    let indent: Option<usize> = kwargs.get("indent")?;
    let separators: Option<Vec<String>> = kwargs.get("separators")?;
    let sort_keys: Option<bool> = kwargs.get("sort_keys")?;
    let ensure_ascii: Option<bool> = kwargs.get("ensure_ascii")?;
    kwargs.assert_all_used()?;
    let (item_sep, key_sep) = match separators.as_deref() {
        Some([item, key]) => (item.clone(), key.clone()),
        Some(_) => {
            return Err(JinjaError::new(
                ErrorKind::InvalidOperation,
                "tojson: separators must be a pair",
            ))
        }
        None if indent.is_some() => (",".to_owned(), ": ".to_owned()),
        None => (", ".to_owned(), ": ".to_owned()),
    };
    let style = PyJson {
        indent,
        item_sep,
        key_sep,
        sort_keys: sort_keys.unwrap_or(false),
        ensure_ascii: ensure_ascii.unwrap_or(false),
    };
    let mut out = String::new();
    style.write(&mut out, value, 0)?;
    Ok(Value::from_safe_string(out))
}

struct PyJson {
    indent: Option<usize>,
    item_sep: String,
    key_sep: String,
    sort_keys: bool,
    ensure_ascii: bool,
}

impl PyJson {
    fn write(
        &self,
        out: &mut String,
        value: &Value,
        depth: usize,
    ) -> std::result::Result<(), JinjaError> {
        use minijinja::value::ValueKind;
        match value.kind() {
            ValueKind::Undefined | ValueKind::None => out.push_str("null"),
            ValueKind::Bool => out.push_str(if value.is_true() { "true" } else { "false" }),
            ValueKind::Number => {
                if let Ok(int) = i64::try_from(value.clone()) {
                    out.push_str(&int.to_string());
                } else if let Ok(float) = f64::try_from(value.clone()) {
                    out.push_str(&python_float(float));
                } else {
                    out.push_str(&value.to_string());
                }
            }
            ValueKind::String | ValueKind::Bytes => {
                self.write_string(out, value.as_str().unwrap_or_default())
            }
            ValueKind::Seq | ValueKind::Iterable => {
                let items: Vec<Value> = value.try_iter()?.collect();
                self.write_container(out, '[', ']', items.len(), depth, |this, out, i| {
                    this.write(out, &items[i], depth + 1)
                })?;
            }
            ValueKind::Map => {
                let mut keys: Vec<Value> = value.try_iter()?.collect();
                if self.sort_keys {
                    keys.sort();
                }
                self.write_container(out, '{', '}', keys.len(), depth, |this, out, i| {
                    let key = &keys[i];
                    match key.as_str() {
                        Some(text) => this.write_string(out, text),
                        None => this.write_string(out, &key.to_string()),
                    }
                    out.push_str(&this.key_sep);
                    this.write(out, &value.get_item(key)?, depth + 1)
                })?;
            }
            _ => self.write_string(out, &value.to_string()),
        }
        Ok(())
    }

    fn write_container(
        &self,
        out: &mut String,
        open: char,
        close: char,
        len: usize,
        depth: usize,
        mut item: impl FnMut(&Self, &mut String, usize) -> std::result::Result<(), JinjaError>,
    ) -> std::result::Result<(), JinjaError> {
        out.push(open);
        if len == 0 {
            out.push(close);
            return Ok(());
        }
        for i in 0..len {
            if i > 0 {
                out.push_str(&self.item_sep);
            }
            if let Some(indent) = self.indent {
                out.push('\n');
                out.push_str(&" ".repeat(indent * (depth + 1)));
            }
            item(self, out, i)?;
        }
        if let Some(indent) = self.indent {
            out.push('\n');
            out.push_str(&" ".repeat(indent * depth));
        }
        out.push(close);
        Ok(())
    }

    fn write_string(&self, out: &mut String, text: &str) {
        out.push('"');
        for c in text.chars() {
            match c {
                '"' => out.push_str("\\\""),
                '\\' => out.push_str("\\\\"),
                '\n' => out.push_str("\\n"),
                '\r' => out.push_str("\\r"),
                '\t' => out.push_str("\\t"),
                '\u{08}' => out.push_str("\\b"),
                '\u{0c}' => out.push_str("\\f"),
                c if (c as u32) < 0x20 || (self.ensure_ascii && !c.is_ascii()) => {
                    let mut units = [0u16; 2];
                    for unit in c.encode_utf16(&mut units) {
                        out.push_str(&format!("\\u{unit:04x}"));
                    }
                }
                c => out.push(c),
            }
        }
        out.push('"');
    }
}

/// Python's `repr(float)` for the values JSON can carry.
fn python_float(value: f64) -> String {
    if value.is_nan() {
        "NaN".to_owned()
    } else if value.is_infinite() {
        if value > 0.0 { "Infinity" } else { "-Infinity" }.to_owned()
    } else if value.fract() == 0.0 && value.abs() < 1e16 {
        format!("{value:.1}")
    } else {
        format!("{value}")
    }
}
