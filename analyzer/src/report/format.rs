//! Formatting helpers shared by the renderers (text, HTML, charts, JUnit XML) and the
//! sections' own rendering. A leaf: it imports nothing from the crate.

use askama::filters::Escaper as _;

/// The entity of a character that HTML element content and attribute values cannot hold as
/// is; None for the others.
fn entity(c: char) -> Option<&'static str> {
    match c {
        '<' => Some("&lt;"),
        '>' => Some("&gt;"),
        '&' => Some("&amp;"),
        '"' => Some("&quot;"),
        '\'' => Some("&#39;"),
        _ => None,
    }
}

/// Escape text for HTML element content and attribute values.
///
/// # Panics
///
/// Never: the escaper's only errors are its writer's, and writing into a String does not fail.
pub fn escape(s: &str) -> String {
    let mut o = String::with_capacity(s.len());
    HtmlEntities
        .write_escaped_str(&mut o, s)
        .expect("writing into a String does not fail");
    o
}

/// The HTML templates' escaper (analyzer/askama.toml): the same entities as [`escape`], so
/// the page reads as it did before templates (askama's own writes `&#60;` for `<`).
#[derive(Clone, Copy)]
pub struct HtmlEntities;

impl askama::filters::Escaper for HtmlEntities {
    fn write_escaped_str<W: std::fmt::Write>(&self, mut dest: W, s: &str) -> std::fmt::Result {
        let mut rest = s;
        while let Some((i, e)) = rest.char_indices().find_map(|(i, c)| Some((i, entity(c)?))) {
            dest.write_str(&rest[..i])?;
            dest.write_str(e)?;
            rest = &rest[i + 1..];
        }
        dest.write_str(rest)
    }
}

/// Decimal byte count: 512 B, 4.1 KB, 1.2 GB.
pub(crate) fn bytes(b: u64) -> String {
    const U: [&str; 5] = ["B", "KB", "MB", "GB", "TB"];
    let mut v = b as f64;
    let mut i = 0;
    while v >= 1000.0 && i < U.len() - 1 {
        v /= 1000.0;
        i += 1;
    }
    if i == 0 {
        format!("{b} B")
    } else {
        format!("{v:.1} {}", U[i])
    }
}

/// Microseconds, switching to milliseconds from 1000 us: 850us, 1.2ms.
pub(crate) fn fmt_us(us: f64) -> String {
    if us >= 1000.0 {
        format!("{:.1}ms", us / 1000.0)
    } else {
        format!("{us:.0}us")
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn escapes_markup() {
        assert_eq!(
            super::escape("<img src=x onerror=alert(1)>&'\""),
            "&lt;img src=x onerror=alert(1)&gt;&amp;&#39;&quot;"
        );
    }
}
