//! The canary's fixed questions, the one prompt that asks them, and how a reply is read back,
//! normalised, scored and fingerprinted. Nothing here varies between runs, so the same model
//! served the same way answers the same text.

use sha2::{Digest, Sha256};

/// One checkable question with a short exact answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Question {
    /// The question as asked.
    pub text: &'static str,
    /// The one accepted answer after normalisation.
    pub answer: &'static str,
    /// Whether case matters (the formatting instructions).
    pub case_sensitive: bool,
}

/// The fixed set: arithmetic, counting tasks and formatting instructions. Changing it changes
/// every target's fingerprint, so it is versioned by [`PROMPT_VERSION`].
pub const QUESTIONS: [Question; 6] = [
    Question { text: "What is 17 * 23?", answer: "391", case_sensitive: false },
    Question { text: "What is 1000 - 7 * 8?", answer: "944", case_sensitive: false },
    Question {
        text: "How many words are in this sentence: \"the quick brown fox jumps over the lazy dog\"?",
        answer: "9",
        case_sensitive: false,
    },
    Question {
        text: "How many times does the letter r occur in the word \"strawberry\"?",
        answer: "3",
        case_sensitive: false,
    },
    Question { text: "Write the word \"canary\" reversed, in upper case.", answer: "YRANAC", case_sensitive: true },
    Question {
        text: "List the first five prime numbers, separated by commas, without spaces.",
        answer: "2,3,5,7,11",
        case_sensitive: true,
    },
];

/// Bumped whenever [`QUESTIONS`] or [`SYSTEM`] change: runs of different versions are not compared.
pub const PROMPT_VERSION: u32 = 1;

/// The canary's instruction; fixed text, no nonce (the answers must be comparable run to run).
pub const SYSTEM: &str = "You are a test harness. Answer each numbered question with only its answer, \
one per line, in the form `N. answer`. No explanations, no other text.";

/// The user turn: the numbered questions.
pub fn user_prompt() -> String {
    QUESTIONS.iter().enumerate().map(|(i, q)| format!("{}. {}", i + 1, q.text)).collect::<Vec<_>>().join("\n")
}

/// A reply read back against the questions.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Scored {
    /// Normalised answer per question, in order (empty when the reply had no line for it).
    pub answers: Vec<String>,
    /// Answers equal to the expected one.
    pub correct: u32,
    /// Questions asked.
    pub total: u32,
    /// First 16 hex digits of SHA-256 over the normalised answers: equal text, equal fingerprint.
    pub fingerprint: String,
}

/// Normalises one answer: trimmed, markdown emphasis and code marks, quotes and one trailing
/// full stop removed, inner runs of whitespace collapsed.
pub fn normalise(raw: &str) -> String {
    let mut s: &str = raw.trim();
    loop {
        let before = s;
        s = s.trim_matches(|c: char| matches!(c, '*' | '`' | '"' | '\'' | '_')).trim();
        s = s.strip_suffix('.').unwrap_or(s).trim();
        if s == before {
            break;
        }
    }
    s.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// Splits a reply into answers by their `N.` (or `N)` / `N:`) prefixes; lines without a number
/// are ignored, a repeated number keeps its first answer.
fn answers_of(reply: &str) -> Vec<String> {
    let mut out = vec![String::new(); QUESTIONS.len()];
    let mut seen = vec![false; QUESTIONS.len()];
    for line in reply.lines() {
        let line = line.trim().trim_start_matches(['*', '-', ' ']);
        let digits: String = line.chars().take_while(char::is_ascii_digit).collect();
        let Ok(n) = digits.parse::<usize>() else { continue };
        let rest = &line[digits.len()..];
        let Some(rest) = rest.strip_prefix(['.', ')', ':']) else { continue };
        if let Some(slot) = n.checked_sub(1).filter(|i| *i < out.len()) {
            if !seen[slot] {
                seen[slot] = true;
                out[slot] = normalise(rest);
            }
        }
    }
    out
}

/// Scores a reply: normalised answers, exact matches, fingerprint.
pub fn score(reply: &str) -> Scored {
    let answers = answers_of(reply);
    let correct = answers
        .iter()
        .zip(QUESTIONS.iter())
        .filter(|(a, q)| if q.case_sensitive { a.as_str() == q.answer } else { a.eq_ignore_ascii_case(q.answer) })
        .count();
    let mut h = Sha256::new();
    h.update(format!("v{PROMPT_VERSION}"));
    for a in &answers {
        h.update(b"\n");
        h.update(a.as_bytes());
    }
    let digest = hex::encode(h.finalize());
    Scored {
        answers,
        correct: u32::try_from(correct).unwrap_or(u32::MAX),
        total: u32::try_from(QUESTIONS.len()).unwrap_or(u32::MAX),
        fingerprint: digest[..16].to_string(),
    }
}

/// The reply a model that gets everything right gives (for stand-ins and tests).
pub fn perfect_reply() -> String {
    QUESTIONS.iter().enumerate().map(|(i, q)| format!("{}. {}", i + 1, q.answer)).collect::<Vec<_>>().join("\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_perfect_reply_scores_every_question() {
        let s = score(&perfect_reply());
        assert_eq!((s.correct, s.total), (6, 6));
        assert_eq!(s.fingerprint.len(), 16);
    }

    #[test]
    fn formatting_noise_does_not_change_answers_but_wrong_case_is_wrong() {
        let a = score(&perfect_reply());
        let noisy = "1. **391**\n2) 944.\n3: `9`\n\n4. 3\n5. YRANAC\n6. 2,3,5,7,11";
        let b = score(noisy);
        assert_eq!(b.correct, 6);
        assert_eq!(a.fingerprint, b.fingerprint, "normalised answers are equal");
        let c = score("1. 391\n2. 944\n3. 9\n4. 3\n5. yranac\n6. 2, 3, 5, 7, 11");
        assert_eq!(c.correct, 4);
        assert_ne!(c.fingerprint, a.fingerprint);
    }

    #[test]
    fn missing_extra_and_repeated_lines_are_handled() {
        let s = score("Sure!\n1. 391\n1. 392\n9. extra\n3. 9");
        assert_eq!(s.correct, 2);
        assert_eq!(s.answers[0], "391");
        assert_eq!(s.answers[1], "");
        assert_eq!(score("").correct, 0);
    }

    #[test]
    fn the_prompt_numbers_every_question() {
        let p = user_prompt();
        assert_eq!(p.lines().count(), QUESTIONS.len());
        assert!(p.starts_with("1. What is 17 * 23?"));
    }
}
