//! Formatting helpers shared by the renderers (text, HTML, charts, JUnit XML) and the
//! sections' own rendering. A leaf: it imports nothing from the crate.

/// Escape text for HTML element content and attribute values.
pub fn escape(s: &str) -> String {
    let mut o = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '<' => o.push_str("&lt;"),
            '>' => o.push_str("&gt;"),
            '&' => o.push_str("&amp;"),
            '"' => o.push_str("&quot;"),
            '\'' => o.push_str("&#39;"),
            c => o.push(c),
        }
    }
    o
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
