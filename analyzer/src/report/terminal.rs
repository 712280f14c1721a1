//! Text for a terminal from names a trace carries (task names, cgroup and file paths, devices,
//! labels): a crafted or unlucky name must not move the cursor, retitle the window or clear
//! the screen of whoever reads the report. Control characters are written as escapes.

use std::io::{self, Write};

/// Writes through to `inner`, with C0 controls but tab and newline, DEL, and C1 controls
/// (U+0080-U+009F, which some terminals obey in UTF-8) written as `\xNN` / `\u{NN}`.
pub struct Escaped<W: Write> {
    inner: W,
    /// A 0xC2 byte whose next byte decides whether it starts a C1 control.
    held: bool,
}

impl<W: Write> Escaped<W> {
    pub fn new(inner: W) -> Escaped<W> {
        Escaped { inner, held: false }
    }
}

impl<W: Write> Write for Escaped<W> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let mut out = Vec::with_capacity(buf.len());
        for &b in buf {
            if self.held {
                self.held = false;
                if (0x80..=0x9f).contains(&b) {
                    write!(out, "\\u{{{b:x}}}")?;
                    continue;
                }
                out.push(0xc2);
            }
            match b {
                b'\n' | b'\t' => out.push(b),
                0xc2 => self.held = true,
                0..=0x1f | 0x7f => write!(out, "\\x{b:02x}")?,
                _ => out.push(b),
            }
        }
        self.inner.write_all(&out)?;
        Ok(buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        if self.held {
            self.held = false;
            self.inner.write_all(&[0xc2])?;
        }
        self.inner.flush()
    }
}

impl<W: Write> Drop for Escaped<W> {
    fn drop(&mut self) {
        #[expect(
            clippy::let_underscore_must_use,
            reason = "a lone 0xC2 at the very end (not UTF-8 then): nothing to report to on drop"
        )]
        let _ = self.flush();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn escaped(parts: &[&[u8]]) -> Vec<u8> {
        let mut out = Vec::new();
        {
            let mut e = Escaped::new(&mut out);
            for p in parts {
                e.write_all(p).unwrap();
            }
            e.flush().unwrap();
        }
        out
    }

    #[test]
    fn controls_are_escaped_and_text_is_not() {
        assert_eq!(
            escaped(&[b"fio\x1b]0;owned\x07 \x1b[2J\r\x7f\tok\n"]),
            b"fio\\x1b]0;owned\\x07 \\x1b[2J\\x0d\\x7f\tok\n"
        );
        // UTF-8 text, with 0xC2 starting printable characters (micro, plus-minus) and a bar.
        let text = "5\u{b5}s \u{b1}1 \u{2588}\n".as_bytes();
        assert_eq!(escaped(&[text]), text);
        // A C1 control (CSI) in UTF-8, also when a write splits it.
        assert_eq!(escaped(&[b"a\xc2\x9b2Jb"]), b"a\\u{9b}2Jb");
        assert_eq!(escaped(&[b"a\xc2", b"\x9b2J"]), b"a\\u{9b}2J");
        assert_eq!(escaped(&[b"\xc2", b"\xb5"]), "\u{b5}".as_bytes());
        assert_eq!(escaped(&[b"\xc2\xc2\xb5"]), b"\xc2\xc2\xb5");
    }
}
