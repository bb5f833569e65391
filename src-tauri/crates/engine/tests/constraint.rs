//! Constrained output on the tiny random-weight checkpoint: whatever a random model would say,
//! an answer under a JSON schema parses and validates, one under `json_object` is an object,
//! a Lark grammar can force control tokens, and an answer without a constraint is unchanged.

mod common;
use common::{greedy, load_f32};

use std::sync::atomic::AtomicBool;

use engine::constraint::{ConstraintError, Grammar};
use engine::error::{EngineError, GenerateError};
use engine::generate::{StopReason, Usage};
use engine::loaded::LoadedModel;
use engine::options::GenerateOptions;
use engine::prompt::Prompt;
use engine::sampler::SamplerConfig;
use engine::stream::{Session, StreamRequest};
use engine::template::{Message, Role};
use serde_json::{json, Value};

fn prompt(m: &LoadedModel) -> Prompt {
    let messages = vec![Message::text(
        Role::User,
        "Describe a person as JSON: name, age, member, color.",
    )];
    m.prompt(&messages, false, &[]).unwrap()
}

/// Generates with `options` in a fresh session: the ids, the text and the usage.
fn answer(m: &LoadedModel, options: &GenerateOptions) -> (Vec<u32>, String, Usage) {
    let mut session = Session::new(&m.model);
    let cancel = AtomicBool::new(false);
    let (mut ids, mut text) = (Vec::new(), String::new());
    let usage = m
        .generate(
            StreamRequest::new(&mut session, &prompt(m), options, &cancel),
            |d| {
                ids.extend(d.token);
                text.push_str(&d.text);
            },
        )
        .unwrap();
    (ids, text, usage)
}

fn sampled(seed: u64, max_tokens: usize) -> GenerateOptions {
    GenerateOptions {
        sampler: SamplerConfig {
            temperature: 1.0,
            top_k: Some(64),
            top_p: Some(0.95),
            seed,
            ..SamplerConfig::default()
        },
        max_tokens,
        ..GenerateOptions::default()
    }
}

/// Every kind of bound that makes an answer end: required properties, no others, an enum, a
/// boolean, a bounded integer, a string of at most 8 characters.
fn person_schema() -> Value {
    json!({
        "type": "object",
        "properties": {
            "name": { "type": "string", "maxLength": 8 },
            "age": { "type": "integer", "minimum": 0, "maximum": 120 },
            "member": { "type": "boolean" },
            "color": { "enum": ["red", "green", "blue"] }
        },
        "required": ["name", "age", "member", "color"],
        "additionalProperties": false
    })
}

/// Checks `value` against [`person_schema`], field by field.
fn assert_person(value: &Value, text: &str) {
    let object = value
        .as_object()
        .unwrap_or_else(|| panic!("not an object: {text}"));
    let mut keys: Vec<&str> = object.keys().map(String::as_str).collect();
    keys.sort_unstable();
    assert_eq!(keys, ["age", "color", "member", "name"], "{text}");
    let name = object["name"].as_str().unwrap_or_else(|| panic!("{text}"));
    assert!(name.chars().count() <= 8, "name too long: {text}");
    let age = object["age"].as_i64().unwrap_or_else(|| panic!("{text}"));
    assert!((0..=120).contains(&age), "age out of range: {text}");
    assert!(object["member"].is_boolean(), "{text}");
    let color = object["color"].as_str().unwrap_or_else(|| panic!("{text}"));
    assert!(["red", "green", "blue"].contains(&color), "{text}");
}

#[test]
fn an_answer_under_a_schema_parses_and_validates_greedy_and_sampled() {
    let m = load_f32();
    let schema = Grammar::JsonSchema(person_schema());
    let mut runs = vec![("greedy".to_string(), greedy(200))];
    for seed in [1, 2, 3] {
        runs.push((format!("seed {seed}"), sampled(seed, 200)));
    }
    for (name, mut options) in runs {
        options.constraint = Some(schema.clone());
        let (ids, text, usage) = answer(&m, &options);
        assert_eq!(
            usage.stop_reason,
            StopReason::EndOfTurn,
            "{name}: the answer ends when the object is complete: {text}"
        );
        assert_ids_follow(&m, &schema, &ids);
        let value: Value = serde_json::from_str(&text)
            .unwrap_or_else(|e| panic!("{name}: not JSON ({e}): {text:?}"));
        assert_person(&value, &text);
    }
}

#[test]
fn an_answer_under_json_object_is_an_object() {
    let m = load_f32();
    let mut finished = 0;
    let mut runs = vec![greedy(400)];
    runs.extend((1..=4).map(|seed| sampled(seed, 400)));
    for mut options in runs {
        options.constraint = Some(Grammar::JsonObject);
        let (ids, text, usage) = answer(&m, &options);
        assert!(text.starts_with('{'), "an object begins: {text:?}");
        // Every id was one the grammar allowed, whether it ended or ran out of tokens.
        assert_ids_follow(&m, &Grammar::JsonObject, &ids);
        if usage.stop_reason == StopReason::EndOfTurn {
            // serde_json refuses numbers past f64 (a random model writes 300 digits), so the
            // syntax is checked by hand.
            assert_eq!(
                json_value(text.as_bytes(), 0),
                Some(('{', text.len())),
                "{text:?}"
            );
            finished += 1;
        } else {
            assert_eq!(usage.stop_reason, StopReason::MaxTokens);
        }
    }
    assert!(finished > 0, "at least one answer completed its object");
}

/// The kind (first byte) and end of the compact JSON value at `at`, if there is one.
fn json_value(s: &[u8], at: usize) -> Option<(char, usize)> {
    let first = *s.get(at)?;
    let end = match first {
        b'{' | b'[' => {
            let close = if first == b'{' { b'}' } else { b']' };
            let mut i = at + 1;
            if s.get(i) == Some(&close) {
                return Some((first as char, i + 1));
            }
            loop {
                if first == b'{' {
                    let (kind, end) = json_value(s, i)?;
                    if kind != '"' || s.get(end) != Some(&b':') {
                        return None;
                    }
                    i = end + 1;
                }
                i = json_value(s, i)?.1;
                match s.get(i)? {
                    b',' => i += 1,
                    c if *c == close => break i + 1,
                    _ => return None,
                }
            }
        }
        b'"' => {
            let mut i = at + 1;
            loop {
                match s.get(i)? {
                    b'"' => break i + 1,
                    b'\\' => i += 2,
                    c if *c < 0x20 => return None,
                    _ => i += 1,
                }
            }
        }
        b't' | b'f' | b'n' => {
            let word: &[u8] = match first {
                b't' => b"true",
                b'f' => b"false",
                _ => b"null",
            };
            s[at..].starts_with(word).then_some(at + word.len())?
        }
        b'-' | b'0'..=b'9' => {
            let len = s[at..]
                .iter()
                .take_while(|c| c.is_ascii_digit() || b"+-.eE".contains(c))
                .count();
            std::str::from_utf8(&s[at..at + len]).ok()?;
            at + len
        }
        _ => return None,
    };
    Some((first as char, end))
}

/// Feeds `ids` to a fresh matcher of `grammar`: each must have been allowed where it came.
fn assert_ids_follow(m: &LoadedModel, grammar: &Grammar, ids: &[u32]) {
    let mut check = m.constraint(grammar).unwrap();
    for (k, &id) in ids.iter().enumerate() {
        let allowed = check.allowed().unwrap();
        assert!(allowed[id as usize], "id {k} ({id}) was not allowed there");
        check.consume(id).unwrap();
    }
}

#[test]
fn max_tokens_ends_a_constrained_answer_with_only_allowed_ids() {
    let m = load_f32();
    let grammar = Grammar::JsonSchema(json!({
        "type": "object",
        "properties": { "story": { "type": "string", "minLength": 200, "maxLength": 400 } },
        "required": ["story"],
        "additionalProperties": false
    }));
    for mut options in [greedy(6), sampled(7, 6)] {
        options.constraint = Some(grammar.clone());
        let (ids, text, usage) = answer(&m, &options);
        assert_eq!(usage.stop_reason, StopReason::MaxTokens, "{text}");
        assert_eq!(ids.len(), 6);
        assert_eq!(usage.generated_tokens, 6);
        assert!(text.starts_with("{\"story\":"), "{text:?}");
        assert_ids_follow(&m, &grammar, &ids);
    }
}

#[test]
fn a_lark_grammar_can_force_control_tokens() {
    let m = load_f32();
    let grammar = Grammar::Lark(
        r#"start: <|tool_call> "call:" NAME "{}" <tool_call|>
NAME: /[a-z]{1,6}/"#
            .into(),
    );
    let open = m.tokenizer.token_id("<|tool_call>").unwrap();
    let close = m.tokenizer.token_id("<tool_call|>").unwrap();
    for mut options in [greedy(40), sampled(5, 40)] {
        options.constraint = Some(grammar.clone());
        let (ids, text, usage) = answer(&m, &options);
        assert_eq!(usage.stop_reason, StopReason::EndOfTurn, "{ids:?}");
        assert_eq!(ids[0], open, "{ids:?}");
        let end = ids.iter().position(|&id| id == close).expect("closed");
        assert_eq!(
            end,
            ids.len() - 1,
            "the close ends it (then a stop id): {ids:?}"
        );
        let inner = m.tokenizer.decode(&ids[1..end], false).unwrap();
        let name = inner
            .strip_prefix("call:")
            .and_then(|s| s.strip_suffix("{}"))
            .unwrap_or_else(|| panic!("{inner:?}"));
        assert!(
            (1..=6).contains(&name.len()) && name.chars().all(|c| c.is_ascii_lowercase()),
            "{inner:?}"
        );
        // Control ids are not shown: the text is what is between them.
        assert_eq!(text, inner);
    }
}

#[test]
fn a_schema_that_cannot_be_enforced_is_refused_before_generating() {
    let m = load_f32();
    let mut session = Session::new(&m.model);
    let cancel = AtomicBool::new(false);
    for bad in [
        json!({ "type": "object", "properties": { "a": { "type": "nonsense" } } }),
        json!({ "type": "string", "pattern": "(" }),
        json!(["not", "a", "schema"]),
    ] {
        let options = GenerateOptions {
            constraint: Some(Grammar::JsonSchema(bad.clone())),
            ..greedy(8)
        };
        let mut deltas = 0;
        let error = m
            .generate(
                StreamRequest::new(&mut session, &prompt(&m), &options, &cancel),
                |_| deltas += 1,
            )
            .unwrap_err();
        assert!(
            matches!(
                error,
                EngineError::Generate(GenerateError::Constraint(ConstraintError::Invalid(_)))
            ),
            "{bad}: {error}"
        );
        assert_eq!(deltas, 0, "{bad}: nothing was generated");
        assert!(session.tokens().is_empty(), "{bad}: nothing was prefilled");
    }
    let error = m
        .constraint(&Grammar::Lark("start: missing_rule".into()))
        .unwrap_err();
    assert!(
        matches!(error, EngineError::Generate(GenerateError::Constraint(_))),
        "{error}"
    );
}

#[test]
fn an_answer_without_a_constraint_is_unchanged_by_constrained_ones() {
    let fresh = load_f32();
    let used = load_f32();
    // `used` has built its token trie and answered under a grammar.
    let options = GenerateOptions {
        constraint: Some(Grammar::JsonSchema(person_schema())),
        ..greedy(60)
    };
    answer(&used, &options);
    for options in [greedy(24), sampled(11, 24)] {
        let (expected, text, _) = answer(&fresh, &options);
        let (got, _, _) = answer(&used, &options);
        assert_eq!(got, expected, "{text:?}");
        // The random model left free does not write the schema's object.
        assert!(serde_json::from_str::<Value>(&text).is_err(), "{text:?}");
    }
}

#[test]
fn a_constrained_answer_does_not_speculate_and_is_the_same_with_a_drafter() {
    let mut m = load_f32();
    let options = GenerateOptions {
        constraint: Some(Grammar::JsonSchema(person_schema())),
        ..greedy(120)
    };
    let (plain, text, _) = answer(&m, &options);
    let drafter = common::fixture().with_file_name("tiny-assistant");
    m.load_drafter(&drafter, None).unwrap();
    let (ids, _, usage) = answer(&m, &options);
    assert_eq!(ids, plain, "{text}");
    let stats = usage
        .speculative
        .expect("the stats say why it did not speculate");
    assert_eq!(stats.rounds, 0);
    assert!(
        stats.stopped.as_deref().unwrap().contains("constrained"),
        "{stats:?}"
    );
    assert_person(&serde_json::from_str(&text).unwrap(), &text);
}
