//! Text a tool wrote, made safe to show on a terminal: control characters
//! (C0 but newline and tab, DEL, C1) written as visible escapes, so that a
//! result or a log line cannot move the cursor, overwrite a line (`\r`),
//! set the title or the clipboard (OSC 0, OSC 52) or reprogram the terminal.

use std::borrow::Cow;

/// `text` with every control character but `\n` and `\t` as `\x1b`, `\r`,
/// `\u{9b}`; borrowed when there is none.
pub fn escape_controls(text: &str) -> Cow<'_, str> {
    if !text.chars().any(is_dangerous) {
        return Cow::Borrowed(text);
    }
    let mut escaped = String::with_capacity(text.len() + 16);
    for c in text.chars() {
        match c {
            '\r' => escaped.push_str("\\r"),
            c if is_dangerous(c) && (c as u32) < 0x80 => {
                escaped.push_str(&format!("\\x{:02x}", c as u32))
            }
            c if is_dangerous(c) => escaped.push_str(&format!("\\u{{{:x}}}", c as u32)),
            c => escaped.push(c),
        }
    }
    Cow::Owned(escaped)
}

fn is_dangerous(c: char) -> bool {
    c.is_control() && c != '\n' && c != '\t'
}

#[cfg(test)]
mod tests {
    use super::escape_controls;

    #[test]
    fn terminal_sequences_are_shown_not_obeyed() {
        assert_eq!(escape_controls("plain\ttext\n"), "plain\ttext\n");
        assert!(matches!(
            escape_controls("plain"),
            std::borrow::Cow::Borrowed(_)
        ));
        // OSC 52 (clipboard), a carriage return, DEL and C1 CSI.
        assert_eq!(
            escape_controls("\x1b]52;c;cm0gLXJmIH4=\x07ok\rfake\x7f\u{9b}2J"),
            "\\x1b]52;c;cm0gLXJmIH4=\\x07ok\\rfake\\x7f\\u{9b}2J"
        );
    }
}
