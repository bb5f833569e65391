//! What an answer's ids mean beyond their text: Gemma 4 writes a thought between
//! `<|channel>` and `<channel|>`, and a tool call as `<|tool_call>call:NAME{key:VALUE,…}<tool_call|>`
//! with strings between `<|"|>` delimiters. These markers are control ids (hidden from the
//! streamed text, see `detokenize::Shown`), so the split is made on the ids, never on text:
//! text the model writes that merely looks like a marker stays text.

use serde_json::{Map, Number, Value};

use crate::detokenize::{Detokenizer, Shown};
use crate::template::ToolCall;
use crate::tokenizer::{Tokenizer, TokenizerError, CHANNEL_CLOSE, CHANNEL_OPEN};

/// Opens a tool call.
pub const TOOL_CALL_OPEN: &str = "<|tool_call>";
/// Closes a tool call.
pub const TOOL_CALL_CLOSE: &str = "<tool_call|>";
/// Opens and closes a string inside a tool call (or a tool declaration or response).
pub const STRING_DELIMITER: &str = "<|\"|>";

/// A control id that gives structure to an answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Marker {
    ThoughtOpen,
    ThoughtClose,
    CallOpen,
    CallClose,
    /// `<|"|>`: a string's start or end inside a call.
    Quote,
}

/// The ids of the [`Marker`]s in one tokenizer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Markers {
    ids: [(Option<u32>, Marker); 5],
}

impl Markers {
    /// The markers of `tokenizer` (a marker it lacks is never seen).
    pub fn new(tokenizer: &Tokenizer) -> Self {
        let id = |text: &str| {
            tokenizer
                .token_id(text)
                .filter(|&id| tokenizer.is_special(id))
        };
        Self {
            ids: [
                (id(CHANNEL_OPEN), Marker::ThoughtOpen),
                (id(CHANNEL_CLOSE), Marker::ThoughtClose),
                (id(TOOL_CALL_OPEN), Marker::CallOpen),
                (id(TOOL_CALL_CLOSE), Marker::CallClose),
                (id(STRING_DELIMITER), Marker::Quote),
            ],
        }
    }

    /// What `id` marks, if anything.
    pub fn of(&self, id: u32) -> Option<Marker> {
        self.ids
            .iter()
            .find(|(known, _)| *known == Some(id))
            .map(|(_, marker)| *marker)
    }
}

/// The deltas the generator streams for an answer of `ids` (each id's marker, and the text it
/// completes), as `Event::Delta` carries them; the end-of-turn id is not among `ids`. For
/// replaying an answer, and for tests that need a real answer's events.
pub fn replay(
    tokenizer: &Tokenizer,
    ids: &[u32],
) -> Result<Vec<(Option<Marker>, String)>, TokenizerError> {
    let shown = Shown::new(tokenizer);
    let markers = Markers::new(tokenizer);
    let mut detok = Detokenizer::new(tokenizer, false);
    let mut out = Vec::with_capacity(ids.len() + 1);
    for &id in ids {
        let text = if shown.shows(tokenizer, id) {
            detok.push(id)?.unwrap_or_default()
        } else {
            String::new()
        };
        out.push((markers.of(id), text));
    }
    if let Some(rest) = detok.finish()? {
        out.push((None, rest));
    }
    Ok(out)
}

/// One piece of an answer, as a client is shown it.
#[derive(Debug, Clone, PartialEq)]
pub enum Piece {
    /// The answer's text.
    Content(String),
    /// Text of the thought.
    Reasoning(String),
    /// A whole tool call that parsed.
    Call(ToolCall),
}

/// Where the answer is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Place {
    Content,
    /// In a thought; `head` holds its first characters until the channel name is known.
    Thought,
    Call,
}

/// Splits an answer's deltas (the marker of each id, if any, and its shown text) into
/// content, thought and tool calls. Calls are parsed only when `calls` is set (the request
/// offered tools); a call that does not parse is given back as content, markers included.
#[derive(Debug)]
pub struct Splitter {
    calls: bool,
    place: Place,
    /// The first characters of a thought, held until its `thought\n` channel name is dropped.
    head: Option<String>,
    call: Vec<CallText>,
}

/// A call's text as it came: ordinary text and string delimiters apart, so that text that
/// looks like a delimiter stays text.
#[derive(Debug, Clone, PartialEq)]
pub enum CallText {
    Text(String),
    Quote,
}

/// The channel name a thought starts with.
const THOUGHT_CHANNEL: &str = "thought";

impl Splitter {
    /// A splitter for one answer; `calls`: parse tool calls.
    pub fn new(calls: bool) -> Self {
        Self {
            calls,
            place: Place::Content,
            head: None,
            call: Vec::new(),
        }
    }

    /// Takes one delta; returns the pieces it completes.
    pub fn push(&mut self, marker: Option<Marker>, text: &str) -> Vec<Piece> {
        let mut out = Vec::new();
        match (self.place, marker) {
            (Place::Content, Some(Marker::ThoughtOpen)) => {
                self.place = Place::Thought;
                self.head = Some(String::new());
            }
            (Place::Thought, Some(Marker::ThoughtClose)) => {
                self.flush_head(&mut out, true);
                self.place = Place::Content;
            }
            (Place::Content, Some(Marker::CallOpen)) if self.calls => {
                self.place = Place::Call;
                self.call.clear();
            }
            (Place::Call, Some(Marker::CallClose)) => {
                self.place = Place::Content;
                let call = std::mem::take(&mut self.call);
                match parse_call(&call) {
                    Some(parsed) => out.push(Piece::Call(parsed)),
                    None => out.push(Piece::Content(raw_call(&call, true))),
                }
            }
            (Place::Call, Some(Marker::Quote)) => self.call.push(CallText::Quote),
            (Place::Call, _) => {
                if !text.is_empty() {
                    if let Some(CallText::Text(last)) = self.call.last_mut() {
                        last.push_str(text);
                    } else {
                        self.call.push(CallText::Text(text.to_owned()));
                    }
                }
            }
            (Place::Thought, _) => {
                if let Some(head) = &mut self.head {
                    head.push_str(text);
                    self.flush_head(&mut out, false);
                } else if !text.is_empty() {
                    out.push(Piece::Reasoning(text.to_owned()));
                }
            }
            (Place::Content, _) => {
                if !text.is_empty() {
                    out.push(Piece::Content(text.to_owned()));
                }
            }
        }
        out
    }

    /// Ends the answer: a call left open is given back as content (the model stopped inside
    /// it, at a limit), a thought's held head as reasoning.
    pub fn finish(&mut self) -> Vec<Piece> {
        let mut out = Vec::new();
        match self.place {
            Place::Call => {
                let call = std::mem::take(&mut self.call);
                out.push(Piece::Content(raw_call(&call, false)));
            }
            Place::Thought => self.flush_head(&mut out, true),
            Place::Content => {}
        }
        self.place = Place::Content;
        out
    }

    /// Gives out a thought's head once it is known whether it starts with the channel name
    /// (`thought` and a newline), which is dropped.
    fn flush_head(&mut self, out: &mut Vec<Piece>, ended: bool) {
        let Some(head) = &self.head else { return };
        let named = format!("{THOUGHT_CHANNEL}\n");
        let text = if let Some(rest) = head.strip_prefix(&named) {
            rest.to_owned()
        } else if !ended && named.starts_with(head.as_str()) {
            return;
        } else if ended && head == THOUGHT_CHANNEL {
            String::new()
        } else {
            head.clone()
        };
        self.head = None;
        if !text.is_empty() {
            out.push(Piece::Reasoning(text));
        }
    }
}

/// A call that did not parse, as the text it was (markers written out).
fn raw_call(call: &[CallText], closed: bool) -> String {
    let mut text = String::from(TOOL_CALL_OPEN);
    for part in call {
        match part {
            CallText::Text(t) => text.push_str(t),
            CallText::Quote => text.push_str(STRING_DELIMITER),
        }
    }
    if closed {
        text.push_str(TOOL_CALL_CLOSE);
    }
    text
}

/// A call's text, `call:NAME{key:VALUE,…}`, as a [`ToolCall`] whose arguments are JSON:
/// strings (between delimiters, anything inside), numbers, `true`/`false`/`null`, objects
/// and arrays, nested. `None` when it does not parse.
pub fn parse_call(call: &[CallText]) -> Option<ToolCall> {
    let mut reader = Reader::new(call);
    reader.skip_space();
    reader.expect_str("call:")?;
    let name = reader.take_while(|c| c.is_alphanumeric() || "_-.".contains(c));
    if name.is_empty() {
        return None;
    }
    reader.skip_space();
    let arguments = reader.object()?;
    reader.skip_space();
    reader.at_end().then_some(ToolCall { name, arguments })
}

/// A cursor over a call's text: characters, and the string delimiters between them.
struct Reader {
    items: Vec<Item>,
    at: usize,
}

#[derive(Debug, Clone, Copy, PartialEq)]
enum Item {
    Char(char),
    Quote,
}

impl Reader {
    fn new(call: &[CallText]) -> Self {
        let mut items = Vec::new();
        for part in call {
            match part {
                CallText::Text(text) => items.extend(text.chars().map(Item::Char)),
                CallText::Quote => items.push(Item::Quote),
            }
        }
        Self { items, at: 0 }
    }

    fn peek(&self) -> Option<Item> {
        self.items.get(self.at).copied()
    }

    fn at_end(&self) -> bool {
        self.at >= self.items.len()
    }

    fn skip_space(&mut self) {
        while matches!(self.peek(), Some(Item::Char(c)) if c.is_whitespace()) {
            self.at += 1;
        }
    }

    fn eat(&mut self, want: char) -> bool {
        if self.peek() == Some(Item::Char(want)) {
            self.at += 1;
            true
        } else {
            false
        }
    }

    fn expect_str(&mut self, want: &str) -> Option<()> {
        for c in want.chars() {
            self.eat(c).then_some(())?;
        }
        Some(())
    }

    fn take_while(&mut self, keep: impl Fn(char) -> bool) -> String {
        let mut out = String::new();
        while let Some(Item::Char(c)) = self.peek() {
            if !keep(c) {
                break;
            }
            out.push(c);
            self.at += 1;
        }
        out
    }

    /// A string between delimiters (the opening one already next).
    fn string(&mut self) -> Option<String> {
        (self.peek() == Some(Item::Quote)).then_some(())?;
        self.at += 1;
        let mut out = String::new();
        loop {
            match self.peek()? {
                Item::Quote => {
                    self.at += 1;
                    return Some(out);
                }
                Item::Char(c) => {
                    out.push(c);
                    self.at += 1;
                }
            }
        }
    }

    fn object(&mut self) -> Option<Value> {
        self.eat('{').then_some(())?;
        let mut map = Map::new();
        self.skip_space();
        if self.eat('}') {
            return Some(Value::Object(map));
        }
        loop {
            self.skip_space();
            let key = if self.peek() == Some(Item::Quote) {
                self.string()?
            } else {
                self.take_while(|c| c != ':' && c != '{' && c != '}' && c != ',')
                    .trim()
                    .to_owned()
            };
            if key.is_empty() {
                return None;
            }
            self.skip_space();
            self.eat(':').then_some(())?;
            let value = self.value()?;
            map.insert(key, value);
            self.skip_space();
            if self.eat(',') {
                continue;
            }
            self.eat('}').then_some(())?;
            return Some(Value::Object(map));
        }
    }

    fn array(&mut self) -> Option<Value> {
        self.eat('[').then_some(())?;
        let mut items = Vec::new();
        self.skip_space();
        if self.eat(']') {
            return Some(Value::Array(items));
        }
        loop {
            items.push(self.value()?);
            self.skip_space();
            if self.eat(',') {
                continue;
            }
            self.eat(']').then_some(())?;
            return Some(Value::Array(items));
        }
    }

    fn value(&mut self) -> Option<Value> {
        self.skip_space();
        match self.peek()? {
            Item::Quote => self.string().map(Value::String),
            Item::Char('{') => self.object(),
            Item::Char('[') => self.array(),
            Item::Char(_) => {
                let word = self.take_while(|c| !",}]".contains(c) && !c.is_whitespace());
                match word.as_str() {
                    "true" => Some(Value::Bool(true)),
                    "false" => Some(Value::Bool(false)),
                    "null" | "None" => Some(Value::Null),
                    number => number_value(number),
                }
            }
        }
    }
}

fn number_value(text: &str) -> Option<Value> {
    if let Ok(n) = text.parse::<i64>() {
        return Some(Value::Number(n.into()));
    }
    let float: f64 = text.parse().ok()?;
    Number::from_f64(float).map(Value::Number)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn text(t: &str) -> CallText {
        CallText::Text(t.to_owned())
    }

    #[test]
    fn values_of_every_kind_parse() {
        let call = [
            text("call:plan{a:"),
            CallText::Quote,
            text("x, }{ y"),
            CallText::Quote,
            text(",n:-2.5,i:3,t:true,f:false,z:null,list:["),
            CallText::Quote,
            text("p"),
            CallText::Quote,
            text(",[1],{k:1}],obj:{inner:{deep:"),
            CallText::Quote,
            CallText::Quote,
            text("}}}"),
        ];
        let parsed = parse_call(&call).unwrap();
        assert_eq!(parsed.name, "plan");
        assert_eq!(
            parsed.arguments,
            json!({"a": "x, }{ y", "n": -2.5, "i": 3, "t": true, "f": false, "z": null,
                   "list": ["p", [1], {"k": 1}], "obj": {"inner": {"deep": ""}}})
        );
    }

    #[test]
    fn broken_calls_do_not_parse() {
        for call in [
            vec![text("call:f{a:1")],
            vec![text("call:{a:1}")],
            vec![text("f{a:1}")],
            vec![text("call:f{a:1}x")],
            vec![text("call:f{a:bare}")],
            vec![text("call:f{a:"), CallText::Quote, text("open}")],
        ] {
            assert_eq!(parse_call(&call), None, "{call:?}");
        }
    }

    #[test]
    fn a_thought_loses_its_channel_name_and_never_reaches_the_content() {
        let mut s = Splitter::new(false);
        let mut pieces = s.push(Some(Marker::ThoughtOpen), "");
        for t in ["tho", "ught\n", "hmm"] {
            pieces.extend(s.push(None, t));
        }
        pieces.extend(s.push(Some(Marker::ThoughtClose), ""));
        pieces.extend(s.push(None, "Hi"));
        pieces.extend(s.finish());
        assert_eq!(
            pieces,
            [Piece::Reasoning("hmm".into()), Piece::Content("Hi".into())]
        );
    }
}
