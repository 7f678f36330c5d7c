//! Python's `repr()` of a marshal object that is a dict key but not text
//! (a tuple, a number, a code object): what `str()` of the key gives,
//! which is what a result's JSON key is.

use super::*;

impl Reader<'_> {
    /// Appends Python's `repr()` of one object (for keys that are not
    /// text: the str() of a tuple is the repr of its items).
    pub(super) fn repr(&mut self, depth: usize, out: &mut String) -> Result<(), MarshalError> {
        let start = self.pos;
        let (code, slot) = match self.head(depth)? {
            Head::Reference { start, end } => {
                return self.replay(start, end, |reader| reader.repr(depth, out))
            }
            Head::Object { code, slot } => (code, slot),
        };
        match code {
            b'N' => out.push_str("None"),
            b'T' => out.push_str("True"),
            b'F' => out.push_str("False"),
            b'i' => out.push_str(&self.int32()?.to_string()),
            b'l' => {
                let (negative, digits) = self.long_digits()?;
                out.push_str(&decimal_text(negative, &digits)?);
            }
            b'g' => out.push_str(&python_text::float_repr(self.float64()?)),
            b's' => {
                let n = self.length(false, 1)?;
                out.push_str(&python_text::bytes_repr(self.take(n)?));
            }
            b'u' | b't' | b'a' | b'A' | b'z' | b'Z' => {
                let n = self.length(matches!(code, b'z' | b'Z'), 1)?;
                let bytes = self.take(n)?;
                let points: Vec<u32> = if matches!(code, b'u' | b't') {
                    code_points(bytes).ok_or_else(|| self.invalid("text that is not UTF-8"))?
                } else {
                    bytes.iter().map(|&b| u32::from(b)).collect()
                };
                python_text::str_repr(&points, out);
            }
            b'(' | b')' | b'[' | b'<' | b'>' => {
                let n = self.length(code == b')', 1)?;
                let (open, close) = match code {
                    b'[' => ("[", "]"),
                    b'<' if n == 0 => ("set(", ")"),
                    b'<' => ("{", "}"),
                    b'>' if n == 0 => ("frozenset(", ")"),
                    b'>' => ("frozenset({", "})"),
                    _ => ("(", ")"),
                };
                out.push_str(open);
                for i in 0..n {
                    if i > 0 {
                        out.push_str(", ");
                    }
                    self.repr(depth + 1, out)?;
                }
                if n == 1 && matches!(code, b'(' | b')') {
                    out.push(',');
                }
                out.push_str(close);
            }
            b'{' => {
                out.push('{');
                let mut first = true;
                while self.bytes.get(self.pos) != Some(&b'0') {
                    if !first {
                        out.push_str(", ");
                    }
                    first = false;
                    self.repr(depth + 1, out)?;
                    out.push_str(": ");
                    self.repr(depth + 1, out)?;
                }
                self.pos += 1;
                out.push('}');
            }
            _ => {
                let text = self.text_or_str(code, depth)?;
                out.push_str(&text);
            }
        }
        self.close(slot, start);
        Ok(())
    }

    /// `c`: a code object, as `<code object NAME, file "FILE", line N>`.
    /// Python 3.11 to 3.14 write five 32-bit counts, then code, constants,
    /// names, local names, local kinds, file name, name, qualified name, the
    /// first line (32 bits), line table and exception table; 3.10 writes six
    /// counts and code, constants, names, variable, free and cell names,
    /// file name, name, first line and line table. The bytes after the
    /// counts tell which: in 3.11 and later the sixth item is the code,
    /// `bytes`, where 3.10's is a 32-bit count.
    pub(super) fn code_object(&mut self, depth: usize) -> Result<String, MarshalError> {
        let depth = depth + 1;
        self.take(4 * 5)?;
        let modern = matches!(self.bytes.get(self.pos), Some(&code) if code & !FLAG_REF == b's');
        let skipped_before_file = if modern { 5 } else { 6 };
        if !modern {
            self.take(4)?;
        }
        let mut scratch = String::new();
        for _ in 0..skipped_before_file {
            scratch.clear();
            self.repr(depth, &mut scratch)?;
        }
        let file = self.key(depth)?;
        let name = self.key(depth)?;
        if modern {
            scratch.clear();
            self.repr(depth, &mut scratch)?; // the qualified name
        }
        let line = self.int32()?;
        for _ in 0..(if modern { 2 } else { 1 }) {
            scratch.clear();
            self.repr(depth, &mut scratch)?;
        }
        Ok(format!(
            "<code object {name}, file \"{file}\", line {line}>"
        ))
    }
}
