//! The one escaping path for the HTML vigil writes (status page, weekly report, alert email):
//! maud's escaper, plus the apostrophe, which maud leaves alone.

use maud::{Escaper, Render};
use std::fmt::Write;

/// Text from config, a provider or the store, spliced into `maud::html!` as `(Text(s))`:
/// escapes `& < > "` as maud does, and `'` as `&#39;` so the text is safe in any attribute quoting.
#[derive(Debug, Clone, Copy)]
pub struct Text<'a>(pub &'a str);

impl Render for Text<'_> {
    fn render_to(&self, buffer: &mut String) {
        for (i, part) in self.0.split('\'').enumerate() {
            if i > 0 {
                buffer.push_str("&#39;");
            }
            // Writing into a String cannot fail.
            let _ = Escaper::new(buffer).write_str(part);
        }
    }
}

/// `s` escaped for HTML content or a quoted attribute value, for the rare string built outside
/// `html!`.
pub fn escape(s: &str) -> String {
    Text(s).render().into_string()
}

/// A name that breaks out of any HTML context unless escaped, and how it must read once escaped;
/// the status page and weekly report tests feed it through every field they show.
#[cfg(test)]
pub(crate) mod hostile {
    /// Opens a tag, closes both attribute quotings and starts an entity.
    pub const HOSTILE: &str = r#"<script>'x'&""#;
    /// [`HOSTILE`] as [`crate::Text`] renders it.
    pub const ESCAPED: &str = "&lt;script&gt;&#39;x&#39;&amp;&quot;";
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn all_five_specials_are_escaped() {
        assert_eq!(escape(r#"<a href="x">'&'</a>"#), "&lt;a href=&quot;x&quot;&gt;&#39;&amp;&#39;&lt;/a&gt;");
        assert_eq!(escape("plain · text"), "plain · text");
        assert_eq!(
            maud::html! { p title=(Text("'")) { (Text("a'b")) } }.into_string(),
            r#"<p title="&#39;">a&#39;b</p>"#
        );
        assert_eq!(escape(hostile::HOSTILE), hostile::ESCAPED);
    }
}
