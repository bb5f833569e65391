//! `stop` strings over streamed text: text that could still become a stop string is held
//! back; once one appears, the answer ends just before it.

/// Where the answer is, as far as stop strings go.
#[derive(Debug)]
pub struct StopMatcher {
    stops: Vec<String>,
    held: String,
    hit: bool,
}

impl StopMatcher {
    /// Empty strings stop nothing and are dropped.
    pub fn new(stops: Vec<String>) -> Self {
        Self {
            stops: stops.into_iter().filter(|s| !s.is_empty()).collect(),
            held: String::new(),
            hit: false,
        }
    }

    /// Whether a stop string has appeared (nothing more is let through then).
    pub fn hit(&self) -> bool {
        self.hit
    }

    /// Takes new text; returns what can be shown now.
    pub fn push(&mut self, text: &str) -> String {
        if self.hit {
            return String::new();
        }
        if self.stops.is_empty() {
            return text.to_owned();
        }
        self.held.push_str(text);
        let first = self
            .stops
            .iter()
            .filter_map(|s| self.held.find(s.as_str()))
            .min();
        if let Some(at) = first {
            self.hit = true;
            let shown = self.held[..at].to_owned();
            self.held.clear();
            return shown;
        }
        let keep = self.held_back_len();
        let shown = self.held[..self.held.len() - keep].to_owned();
        self.held.drain(..self.held.len() - keep);
        shown
    }

    /// The text still held back, once the answer has ended without a stop string.
    pub fn finish(&mut self) -> String {
        std::mem::take(&mut self.held)
    }

    /// Bytes at the end of `held` that begin some stop string (the longest such tail).
    fn held_back_len(&self) -> usize {
        let held = &self.held;
        held.char_indices()
            .map(|(i, _)| i)
            .find(|&i| {
                let tail = &held[i..];
                self.stops.iter().any(|s| s.starts_with(tail))
            })
            .map_or(0, |i| held.len() - i)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(stops: &[&str], pieces: &[&str]) -> (String, bool) {
        let mut m = StopMatcher::new(stops.iter().map(|s| s.to_string()).collect());
        let mut out: String = pieces.iter().map(|p| m.push(p)).collect();
        if !m.hit() {
            out.push_str(&m.finish());
        }
        (out, m.hit())
    }

    #[test]
    fn the_answer_ends_before_a_stop_split_across_pieces() {
        assert_eq!(
            run(&["END"], &["one E", "N", "D two"]),
            ("one ".into(), true)
        );
        assert_eq!(run(&["\n\n", "x"], &["a\n", "b"]), ("a\nb".into(), false));
        assert_eq!(run(&["b", "ab"], &["zab"]), ("z".into(), true));
        assert_eq!(run(&[""], &["kept"]), ("kept".into(), false));
    }

    #[test]
    fn held_back_text_is_released_when_it_cannot_stop() {
        let mut m = StopMatcher::new(vec!["STOP".into()]);
        assert_eq!(m.push("go ST"), "go ");
        assert_eq!(m.push("é"), "STé");
        assert_eq!(m.push("S"), "");
        assert_eq!(m.finish(), "S");
    }
}
