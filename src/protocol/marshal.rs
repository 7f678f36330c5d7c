//! A result sent as one `marshal` blob (`value_marshal`, written by
//! `marshal.dumps(value, 4)` in the shim) turned into the JSON value the
//! shim's walk (`results.to_jsonable`) gives for the same value, in one pass.
//!
//! marshal (CPython's `Python/marshal.c`) is a type code per object — with
//! bit 0x80 (`FLAG_REF`) when the object may be referred to again — then its
//! body; `r` + a 32-bit index refers to the index-th flagged object, counted
//! in the order objects begin. The shim only sends what marshal accepts,
//! exact builtin types; everything else takes the JSON or walk path.
//!
//! Nothing the worker sends is trusted: nesting past [`MAX_RESULT_DEPTH`],
//! a reference to a container still being read (a list inside itself),
//! unknown codes, truncated bodies and trailing bytes are errors; a declared
//! length only sizes an allocation up to what the remaining bytes can hold;
//! and the parts a reference repeats are counted, so a small blob cannot
//! expand to more than [`MAX_EXPANDED`] bytes.
//!
//! Conversions, as the walk makes them: tuples, lists, sets and frozensets
//! are arrays (sets in marshal's order: it sorts their elements by their
//! marshalled bytes); bytes are base64 text; integers outside
//! [-2**63, 2**64-1] are their decimal text; NaN and the infinities are null;
//! complex numbers, `...` and `StopIteration` are their `str()`; dict keys
//! are spelled as `json.dumps` spells them, or as their `str()`
//! (`python_text`). A code object becomes `<code object NAME, file "FILE",
//! line N>` (its `str()` without the address, which the blob does not hold).

use base64::Engine as _;
use serde_json::{Map, Number, Value};

use super::python_text;
use super::{DEFAULT_MAX_FRAME, MAX_RESULT_DEPTH};

/// The most bytes that references may make the decoder read again: a blob
/// under the frame limit expands to no more than a frame's worth.
pub const MAX_EXPANDED: usize = DEFAULT_MAX_FRAME;

/// Why a blob is not a result.
#[derive(Debug, thiserror::Error, PartialEq)]
#[non_exhaustive]
pub enum MarshalError {
    #[error("the result is nested deeper than {MAX_RESULT_DEPTH} levels of lists and dicts")]
    TooDeep,
    #[error("the result contains itself (a {0} inside itself)")]
    ContainsItself(&'static str),
    #[error(
        "the result expands to more than {} MB (parts it holds more than once count each time)",
        MAX_EXPANDED >> 20
    )]
    TooLarge,
    #[error(
        "Exceeds the limit ({} digits) for integer string conversion; use sys.set_int_max_str_digits() to increase the limit",
        python_text::INT_MAX_STR_DIGITS
    )]
    IntTooLong,
    #[error("the result cannot be encoded: 'utf-8' codec can't encode character '\\u{code:04x}' in position {position}: surrogates not allowed")]
    Surrogate { code: u32, position: usize },
    #[error("the result is not a valid marshal blob: {what} at byte {at}")]
    Invalid { what: String, at: usize },
}

impl MarshalError {
    /// The Python exception type the walk raises for the same result.
    pub fn python_type(&self) -> &'static str {
        match self {
            MarshalError::Surrogate { .. } => "UnicodeEncodeError",
            MarshalError::TooLarge => "ResultTooLarge",
            _ => "ValueError",
        }
    }
}

/// Decodes `bytes` (one marshal object, nothing after it) into JSON.
pub fn from_marshal(bytes: &[u8]) -> Result<Value, MarshalError> {
    let mut reader = Reader {
        bytes,
        pos: 0,
        refs: Vec::new(),
        replaying: 0,
        expanded: 0,
    };
    let value = reader.value(0)?;
    if reader.pos != bytes.len() {
        return Err(reader.invalid("trailing bytes after the result"));
    }
    Ok(value)
}

const FLAG_REF: u8 = 0x80;

/// A flagged object: still being read (a reference to it is the object
/// inside itself), or read, where its bytes are.
#[derive(Clone, Copy)]
enum Slot {
    Open(&'static str),
    Read { start: usize, end: usize },
}

struct Reader<'a> {
    bytes: &'a [u8],
    pos: usize,
    refs: Vec<Slot>,
    /// References being followed: their objects' flags are not counted again.
    replaying: usize,
    /// Bytes read again for references.
    expanded: usize,
}

/// What a type code begins, for reading it as a value, a key or a repr.
enum Head {
    /// A scalar or a container of its kind; `slot` is its reference index.
    Object { code: u8, slot: Option<usize> },
    /// A reference, already resolved to where its object's bytes are.
    Reference { start: usize, end: usize },
}

impl<'a> Reader<'a> {
    fn invalid(&self, what: impl Into<String>) -> MarshalError {
        MarshalError::Invalid {
            what: what.into(),
            at: self.pos,
        }
    }

    fn take(&mut self, n: usize) -> Result<&'a [u8], MarshalError> {
        let end = self
            .pos
            .checked_add(n)
            .filter(|&end| end <= self.bytes.len())
            .ok_or_else(|| {
                let left = self.bytes.len() - self.pos;
                self.invalid(format!("it ends early ({n} bytes needed, {left} left)"))
            })?;
        let taken = &self.bytes[self.pos..end];
        self.pos = end;
        Ok(taken)
    }

    fn byte(&mut self) -> Result<u8, MarshalError> {
        Ok(self.take(1)?[0])
    }

    fn int32(&mut self) -> Result<i32, MarshalError> {
        let bytes = self.take(4)?;
        Ok(i32::from_le_bytes([bytes[0], bytes[1], bytes[2], bytes[3]]))
    }

    fn float64(&mut self) -> Result<f64, MarshalError> {
        let bytes = self.take(8)?;
        let mut raw = [0u8; 8];
        raw.copy_from_slice(bytes);
        Ok(f64::from_le_bytes(raw))
    }

    /// A length (32-bit, or one byte for the short forms), refused when
    /// negative; `min_item` is the fewest bytes one item takes, so that a
    /// length more bytes than remain could hold is refused before anything
    /// is allocated for it.
    fn length(&mut self, short: bool, min_item: usize) -> Result<usize, MarshalError> {
        let n = if short {
            usize::from(self.byte()?)
        } else {
            usize::try_from(self.int32()?).map_err(|_| self.invalid("a negative length"))?
        };
        if n.saturating_mul(min_item) > self.bytes.len() - self.pos {
            return Err(self.invalid(format!("a length of {n}, more than the bytes left hold")));
        }
        Ok(n)
    }

    /// Reads a type code: a reference is resolved (to an object read
    /// before, never to one still open), a flagged object gets its slot.
    fn head(&mut self, depth: usize) -> Result<Head, MarshalError> {
        let at = self.pos;
        let tagged = self.byte()?;
        let code = tagged & !FLAG_REF;
        if code == b'r' {
            let index = self.int32()?;
            let slot = usize::try_from(index)
                .ok()
                .and_then(|index| self.refs.get(index).copied());
            return match slot {
                Some(Slot::Read { start, end }) => {
                    self.expanded += end - start;
                    if self.expanded > MAX_EXPANDED {
                        return Err(MarshalError::TooLarge);
                    }
                    Ok(Head::Reference { start, end })
                }
                Some(Slot::Open(kind)) => Err(MarshalError::ContainsItself(kind)),
                None => Err(MarshalError::Invalid {
                    what: format!("a reference to object {index}, which does not exist"),
                    at,
                }),
            };
        }
        if is_container(code) && depth >= MAX_RESULT_DEPTH {
            return Err(MarshalError::TooDeep);
        }
        let slot = (tagged & FLAG_REF != 0 && self.replaying == 0).then(|| {
            self.refs.push(Slot::Open(kind_name(code)));
            self.refs.len() - 1
        });
        Ok(Head::Object { code, slot })
    }

    /// Marks the flagged object that began at `start` as read.
    fn close(&mut self, slot: Option<usize>, start: usize) {
        if let Some(index) = slot {
            self.refs[index] = Slot::Read {
                start,
                end: self.pos,
            };
        }
    }

    /// The text of the short ASCII string (`z`, `Z`) read before at
    /// `start..end`, without reading it again: most references are to one
    /// (a table's keys, its repeated values).
    fn ascii_at(&self, start: usize, end: usize) -> Option<String> {
        let object = self.bytes.get(start..end)?;
        match object {
            [code, _, text @ ..] if matches!(code & !FLAG_REF, b'z' | b'Z') && text.is_ascii() => {
                std::str::from_utf8(text).ok().map(str::to_owned)
            }
            _ => None,
        }
    }

    /// Reads the object at `start` again (a reference to it) with `read`.
    fn replay<T>(
        &mut self,
        start: usize,
        end: usize,
        read: impl FnOnce(&mut Self) -> Result<T, MarshalError>,
    ) -> Result<T, MarshalError> {
        let resume = self.pos;
        self.pos = start;
        self.replaying += 1;
        let result = read(self);
        self.replaying -= 1;
        if result.is_ok() && self.pos != end {
            return Err(self.invalid("a reference whose object reads differently"));
        }
        self.pos = resume;
        result
    }

    /// One object as the walk converts a value.
    fn value(&mut self, depth: usize) -> Result<Value, MarshalError> {
        let start = self.pos;
        let (code, slot) = match self.head(depth)? {
            Head::Reference { start, end } => {
                if let Some(text) = self.ascii_at(start, end) {
                    return Ok(Value::String(text));
                }
                return self.replay(start, end, |reader| reader.value(depth));
            }
            Head::Object { code, slot } => (code, slot),
        };
        let value = match code {
            b'N' => Value::Null,
            b'T' => Value::Bool(true),
            b'F' => Value::Bool(false),
            b'i' => Value::Number(self.int32()?.into()),
            b'l' => self.long()?,
            // NaN and the infinities have no JSON number: null, as the walk's value gives.
            b'g' => Number::from_f64(self.float64()?).map_or(Value::Null, Value::Number),
            b's' => {
                let n = self.length(false, 1)?;
                Value::String(base64::engine::general_purpose::STANDARD.encode(self.take(n)?))
            }
            b'(' | b')' | b'[' | b'<' | b'>' => {
                let n = self.length(code == b')', 1)?;
                let mut items = Vec::with_capacity(n);
                for _ in 0..n {
                    items.push(self.value(depth + 1)?);
                }
                Value::Array(items)
            }
            b'{' => {
                // marshal does not say how many keys follow; most dicts in
                // a result are records with a few.
                let mut object = Map::with_capacity(4);
                while self.bytes.get(self.pos) != Some(&b'0') {
                    let key = self.key(depth + 1)?;
                    let item = self.value(depth + 1)?;
                    object.insert(key, item);
                }
                self.pos += 1;
                Value::Object(object)
            }
            _ => Value::String(self.text_or_str(code, depth)?),
        };
        self.close(slot, start);
        Ok(value)
    }

    /// Text for what is text in Python (the string types) and the `str()`
    /// of the scalars JSON has no type for; anything else is not a value.
    fn text_or_str(&mut self, code: u8, depth: usize) -> Result<String, MarshalError> {
        Ok(match code {
            b'u' | b't' => {
                let n = self.length(false, 1)?;
                let bytes = self.take(n)?;
                utf8(bytes)?
            }
            b'a' | b'A' | b'z' | b'Z' => {
                let n = self.length(matches!(code, b'z' | b'Z'), 1)?;
                latin1(self.take(n)?)
            }
            b'y' => {
                let (real, imag) = (self.float64()?, self.float64()?);
                python_text::complex_str(real, imag)
            }
            b'.' => "Ellipsis".into(),
            b'S' => "<class 'StopIteration'>".into(),
            b'c' => self.code_object(depth)?,
            _ => {
                self.pos -= 1;
                return Err(self.invalid(format!("unknown type code {}", describe_code(code))));
            }
        })
    }

    /// `l`: a sign-and-size count, then that many base-2**15 digits, least
    /// significant first. Within 64 bits a JSON number, else its decimal
    /// text (as the walk sends integers JSON cannot carry).
    fn long(&mut self) -> Result<Value, MarshalError> {
        let (negative, digits) = self.long_digits()?;
        if digits.len() <= 5 {
            let magnitude = digits
                .iter()
                .rev()
                .fold(0u128, |sum, &digit| (sum << 15) | u128::from(digit));
            if negative && magnitude <= 1u128 << 63 {
                let value = i128::try_from(magnitude).map_or(i64::MIN, |m| (-m) as i64);
                return Ok(Value::Number(value.into()));
            }
            if let (false, Ok(value)) = (negative, u64::try_from(magnitude)) {
                return Ok(Value::Number(value.into()));
            }
        }
        Ok(Value::String(decimal_text(negative, &digits)?))
    }

    fn long_digits(&mut self) -> Result<(bool, Vec<u16>), MarshalError> {
        let count = self.int32()?;
        let n = usize::try_from(count.unsigned_abs()).unwrap_or(usize::MAX);
        if n.saturating_mul(2) > self.bytes.len() - self.pos {
            return Err(self.invalid(format!(
                "an integer of {n} digits, more than the bytes left hold"
            )));
        }
        let mut digits = Vec::with_capacity(n);
        for _ in 0..n {
            let raw = self.take(2)?;
            let digit = u16::from_le_bytes([raw[0], raw[1]]);
            if digit >= 1 << 15 {
                return Err(self.invalid("an integer digit out of range"));
            }
            digits.push(digit);
        }
        if digits.last() == Some(&0) {
            return Err(self.invalid("an integer with a leading zero digit"));
        }
        Ok((count < 0, digits))
    }

    /// A dict key as the walk spells it: text as is, and for the rest what
    /// `json.dumps` writes (`7`, `2.5`, `true`, `null`) or their `str()`.
    fn key(&mut self, depth: usize) -> Result<String, MarshalError> {
        let start = self.pos;
        let (code, slot) = match self.head(depth)? {
            Head::Reference { start, end } => {
                if let Some(text) = self.ascii_at(start, end) {
                    return Ok(text);
                }
                return self.replay(start, end, |reader| reader.key(depth));
            }
            Head::Object { code, slot } => (code, slot),
        };
        let key = match code {
            b'N' => "null".into(),
            b'T' => "true".into(),
            b'F' => "false".into(),
            b'i' | b'l' | b'g' | b's' | b'(' | b')' | b'>' | b'<' | b'[' | b'{' => {
                // Spelled by repr, which reads the object from its start
                // and takes its reference slot (the one just opened).
                if slot.is_some() {
                    self.refs.pop();
                }
                self.pos = start;
                let mut text = String::new();
                self.repr(depth, &mut text)?;
                return Ok(text);
            }
            _ => self.text_or_str(code, depth)?,
        };
        self.close(slot, start);
        Ok(key)
    }

    /// Appends Python's `repr()` of one object (for keys that are not
    /// text: the str() of a tuple is the repr of its items).
    fn repr(&mut self, depth: usize, out: &mut String) -> Result<(), MarshalError> {
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
    fn code_object(&mut self, depth: usize) -> Result<String, MarshalError> {
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

fn is_container(code: u8) -> bool {
    matches!(code, b'(' | b')' | b'[' | b'{' | b'<' | b'>' | b'c')
}

/// The Python type a flagged object is, for "a list inside itself".
fn kind_name(code: u8) -> &'static str {
    match code {
        b'(' | b')' => "tuple",
        b'[' => "list",
        b'{' => "dict",
        b'<' => "set",
        b'>' => "frozenset",
        b'c' => "code",
        _ => "value",
    }
}

fn describe_code(code: u8) -> String {
    if code.is_ascii_graphic() {
        format!("0x{code:02x} ('{}')", code as char)
    } else {
        format!("0x{code:02x}")
    }
}

/// Text marshal wrote with `surrogatepass`: valid UTF-8, or a lone
/// surrogate, which UTF-8 cannot carry — the same error the reply's encoding
/// gives on the walk's path.
fn utf8(bytes: &[u8]) -> Result<String, MarshalError> {
    match std::str::from_utf8(bytes) {
        Ok(text) => Ok(text.to_owned()),
        Err(e) => {
            let good = e.valid_up_to();
            let position = std::str::from_utf8(&bytes[..good]).map_or(0, |t| t.chars().count());
            match bytes[good..] {
                [0xed, b1 @ 0xa0..=0xbf, b2 @ 0x80..=0xbf, ..] => Err(MarshalError::Surrogate {
                    code: 0xd000 | (u32::from(b1 & 0x3f) << 6) | u32::from(b2 & 0x3f),
                    position,
                }),
                _ => Err(MarshalError::Invalid {
                    what: "text that is not UTF-8".into(),
                    at: good,
                }),
            }
        }
    }
}

/// The code points of `surrogatepass` UTF-8 (lone surrogates included).
fn code_points(bytes: &[u8]) -> Option<Vec<u32>> {
    let mut points = Vec::with_capacity(bytes.len());
    let mut rest = bytes;
    while !rest.is_empty() {
        match std::str::from_utf8(rest) {
            Ok(text) => {
                points.extend(text.chars().map(u32::from));
                break;
            }
            Err(e) => {
                let (good, bad) = rest.split_at(e.valid_up_to());
                // The prefix is valid by construction.
                points.extend(std::str::from_utf8(good).ok()?.chars().map(u32::from));
                match bad {
                    [0xed, b1 @ 0xa0..=0xbf, b2 @ 0x80..=0xbf, ..] => {
                        points.push(0xd000 | (u32::from(b1 & 0x3f) << 6) | u32::from(b2 & 0x3f));
                        rest = &bad[3..];
                    }
                    _ => return None,
                }
            }
        }
    }
    Some(points)
}

/// `a`, `z` and their interned forms: ASCII as marshal writes them, read as
/// Latin-1 as `marshal.c` reads them.
fn latin1(bytes: &[u8]) -> String {
    match std::str::from_utf8(bytes) {
        Ok(text) if bytes.is_ascii() => text.to_owned(),
        _ => bytes.iter().map(|&b| char::from(b)).collect(),
    }
}

fn decimal_text(negative: bool, digits: &[u16]) -> Result<String, MarshalError> {
    let text = python_text::decimal_digits(digits).ok_or(MarshalError::IntTooLong)?;
    Ok(if negative { format!("-{text}") } else { text })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// Blobs `marshal.dumps` writes for every kind of result, each with what
    /// the shim's walk (`to_jsonable`) gives or raises for the same value,
    /// from the real interpreter.
    const SAMPLES: &str = r#"
import json, marshal, math, random, sys
from toolpool_shim.results import to_jsonable

def code():
    def inner(a, b=2):
        return a + b
    return inner.__code__

random.seed(7)
floats = [0.1, 1 / 3, 5e-324, 1.7976931348623157e308, 1e15, 1e16, 9999999999999998.0, 1e-4, 1e-5,
          123456789012345678.0, -2.5e-300, 2.0**60, 0.5, 100.0, 1e22, 1e21]
floats += [random.uniform(-1e6, 1e6) for _ in range(300)]
floats += [random.random() * 10.0 ** random.randint(-30, 30) for _ in range(300)]
loop = [1]
loop.append(loop)
deep = 1
for _ in range(101):
    deep = [deep]
shared = ["s"]
samples = [
    None, True, False, 0, -1, 2**31 - 1, -(2**31), 2**31, 2**63 - 1, -(2**63), 2**64 - 1, 2**64,
    -(2**63) - 1, 2**200, -(2**200), 10**4299, 1.5, -0.0, float("nan"), float("inf"), -float("inf"),
    "", "ascii", "ünï \u2603 \U0001f600", "x" * 300, "é" * 300, b"", b"\x00\xffhi", bytearray(b"ab"),
    memoryview(b"mv"), (), (1, "two", 3.0), [1, [2, [3]]], {3, 1, 2}, frozenset({5}), set(), frozenset(),
    1 + 2j, 1j, -1j, complex(-0.0, 1), complex(float("nan"), float("inf")), complex(1, float("nan")),
    complex(2.5, -0.0), 0j, complex(-0.0, -0.0), complex(1e16, 1.5e-7), ..., StopIteration,
    {"a": 1, "b": [None, {"c": ()}]}, [shared, shared, shared], [{"k": i} for i in range(20)],
    {7: "a", -2: "b", 2**70: "w", True: "t", False: "f", None: "n", b"k'ey": 1, b"\x00\"'": 2},
    {("t", 1): 1, (1.5, None, b"x", (True,), "it's", 'q"'): 2, (): 3, ("one",): 4, (2**70, -1e16): 5},
    {frozenset({1}): 1, frozenset(): 2, 1 + 2j: 3, ...: 4, StopIteration: 5, (frozenset({2}),): 6},
    {("\t\n\r\\\x00\x7f", "é\u00a0\u2028\ufeff"): 1, ("ab",): 2},
    {f: i for i, f in enumerate(floats)}, {(f,): 0 for f in floats[:50]},
    {1: "one", "1": "string one"}, [[[[[[[[[[1]]]]]]]]]],
    code(), {"f": code()},
    loop, deep, {"k": deep}, 10**4300, {10**4300: 1},
]
def clean(value):  # NaN and the infinities: null, as serde_json holds them
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, list):
        return [clean(item) for item in value]
    if isinstance(value, dict):
        return {key: clean(item) for key, item in value.items()}
    return value

for value in samples:
    blob = marshal.dumps(value, 4).hex()
    try:
        print(json.dumps({"blob": blob, "walk": clean(to_jsonable(value))}))
    except ValueError as exc:
        print(json.dumps({"blob": blob, "error": str(exc)}))
print(json.dumps({"blob": marshal.dumps("\ud800", 4).hex(), "error": "surrogate"}))
"#;

    fn python_samples() -> Vec<Value> {
        let output = std::process::Command::new("python3")
            .args(["-c", SAMPLES])
            .env(
                "PYTHONPATH",
                concat!(env!("CARGO_MANIFEST_DIR"), "/python_shim"),
            )
            .output()
            .expect("python3 runs");
        assert!(
            output.status.success(),
            "{}",
            String::from_utf8_lossy(&output.stderr)
        );
        String::from_utf8(output.stdout)
            .unwrap()
            .lines()
            .map(|line| serde_json::from_str(line).unwrap())
            .collect()
    }

    fn unhex(text: &str) -> Vec<u8> {
        (0..text.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&text[i..i + 2], 16).unwrap())
            .collect()
    }

    #[test]
    fn every_kind_of_value_arrives_as_the_walk_converts_it() {
        let samples = python_samples();
        assert!(samples.len() > 60);
        for sample in samples {
            let blob = unhex(sample["blob"].as_str().unwrap());
            let decoded = from_marshal(&blob);
            match (&sample.get("walk"), &sample.get("error")) {
                (Some(walk), _) => {
                    let value = decoded.unwrap_or_else(|e| panic!("{sample}: {e}"));
                    if let Some(text) = walk.as_str() {
                        if text.starts_with("<code object") {
                            // str() of a code object holds its address, which the blob does not.
                            let (name, rest) = text.split_once(" at 0x").unwrap();
                            let rest = rest.split_once(',').unwrap().1;
                            assert_eq!(value, json!(format!("{name},{rest}")));
                            continue;
                        }
                    }
                    if walk
                        .get("f")
                        .is_some_and(|f| f.to_string().contains("code object"))
                    {
                        continue;
                    }
                    if let Some(difference) = first_difference(&value, walk) {
                        panic!(
                            "{difference} (blob {})",
                            &sample["blob"].to_string()[..80.min(sample["blob"].to_string().len())]
                        );
                    }
                }
                (None, Some(error)) if *error == "surrogate" => {
                    let error = decoded.unwrap_err();
                    assert_eq!(error.python_type(), "UnicodeEncodeError");
                    assert_eq!(error.to_string(), "the result cannot be encoded: 'utf-8' codec can't encode character '\\ud800' in position 0: surrogates not allowed");
                }
                (None, Some(error)) => {
                    assert_eq!(
                        decoded.unwrap_err().to_string(),
                        error.as_str().unwrap(),
                        "{sample}"
                    );
                }
                _ => unreachable!(),
            }
        }
    }

    /// Where `got` and `want` differ first (a short message for big values).
    fn first_difference(got: &Value, want: &Value) -> Option<String> {
        match (got, want) {
            (Value::Object(a), Value::Object(b)) => {
                for ((ka, va), (kb, vb)) in a.iter().zip(b.iter()) {
                    if ka != kb {
                        return Some(format!("key {ka:?} where the walk has {kb:?}"));
                    }
                    if let Some(inner) = first_difference(va, vb) {
                        return Some(format!("{ka:?}: {inner}"));
                    }
                }
                (a.len() != b.len()).then(|| format!("{} keys, the walk {}", a.len(), b.len()))
            }
            (Value::Array(a), Value::Array(b)) => {
                for (i, (va, vb)) in a.iter().zip(b.iter()).enumerate() {
                    if let Some(inner) = first_difference(va, vb) {
                        return Some(format!("[{i}]: {inner}"));
                    }
                }
                (a.len() != b.len()).then(|| format!("{} items, the walk {}", a.len(), b.len()))
            }
            _ => (got != want).then(|| format!("{got} where the walk has {want}")),
        }
    }

    #[test]
    fn sets_arrive_in_marshals_order() {
        // marshal sorts a set's elements by their bytes; the walk has hash order.
        let blob = [
            b"<\x03\x00\x00\x00".as_slice(),
            b"\xda\x01b\xda\x01a\xda\x01c",
        ]
        .concat();
        assert_eq!(from_marshal(&blob).unwrap(), json!(["b", "a", "c"]));
    }

    fn error(blob: &[u8]) -> String {
        from_marshal(blob).unwrap_err().to_string()
    }

    #[test]
    fn truncated_unknown_and_trailing_bytes_are_errors() {
        for (blob, says) in [
            (
                b"".as_slice(),
                "it ends early (1 bytes needed, 0 left) at byte 0",
            ),
            (b"i\x01\x00", "(4 bytes needed, 2 left) at byte 1"),
            (
                b"[\x02\x00\x00\x00N",
                "a length of 2, more than the bytes left hold",
            ),
            (b"[\x01\x00\x00\x00i\x01", "4 bytes needed"),
            (b"{z\x01a", "1 bytes needed, 0 left"),
            (b"?", "unknown type code 0x3f ('?') at byte 0"),
            (
                b"[\x01\x00\x00\x000",
                "unknown type code 0x30 ('0') at byte 5",
            ),
            (b"NN", "trailing bytes after the result at byte 1"),
            (
                b"l\x01\x00\x00\x00\x00\x80",
                "an integer digit out of range",
            ),
            (
                b"l\x02\x00\x00\x00\x01\x00\x00\x00",
                "an integer with a leading zero digit",
            ),
            (b"u\x02\x00\x00\x00\xff\xfe", "text that is not UTF-8"),
            (b"[\xff\xff\xff\xff", "a negative length"),
        ] {
            let got = error(blob);
            assert!(got.contains(says), "{blob:?}: {got}");
        }
    }

    #[test]
    fn a_huge_declared_length_allocates_nothing() {
        for blob in [
            b"[\xff\xff\xff\x7f".as_slice(),
            b"s\xff\xff\xff\x7f",
            b"u\xff\xff\xff\x7f",
            b"l\xff\xff\xff\x7f",
            b"(\xff\xff\xff\x7fN",
        ] {
            assert!(
                error(blob).contains("more than the bytes left hold"),
                "{blob:?}"
            );
        }
    }

    #[test]
    fn nesting_is_held_to_the_result_depth() {
        let nested = |levels: usize| [b"[\x01\x00\x00\x00".repeat(levels), b"N".to_vec()].concat();
        assert!(from_marshal(&nested(MAX_RESULT_DEPTH)).is_ok());
        assert_eq!(
            from_marshal(&nested(MAX_RESULT_DEPTH + 1)),
            Err(MarshalError::TooDeep)
        );
        // Far deeper than the stack would hold if the decoder recursed unchecked.
        assert_eq!(from_marshal(&nested(1_000_000)), Err(MarshalError::TooDeep));
        // Dict keys that are tuples count too.
        let keys = [b"{".to_vec(), b")\x01".repeat(200), b"N".to_vec()].concat();
        assert_eq!(from_marshal(&keys), Err(MarshalError::TooDeep));
    }

    #[test]
    fn references_to_open_containers_missing_objects_and_blow_ups_are_errors() {
        // A list (flagged, object 0) holding a reference to itself.
        assert_eq!(
            from_marshal(b"\xdb\x01\x00\x00\x00r\x00\x00\x00\x00"),
            Err(MarshalError::ContainsItself("list"))
        );
        assert_eq!(
            from_marshal(b"\xfbr\x00\x00\x00\x00N0"),
            Err(MarshalError::ContainsItself("dict"))
        );
        assert!(
            error(b"[\x01\x00\x00\x00r\x05\x00\x00\x00").contains("object 5, which does not exist")
        );
        assert!(error(b"r\xff\xff\xff\xff").contains("does not exist"));
        // Each list holds the one inside it twice, the second time by
        // reference: 2**40 elements from 400 bytes.
        let mut blob = b"\xdb\x02\x00\x00\x00".repeat(40);
        blob.extend_from_slice(b"\xdb\x00\x00\x00\x00");
        for index in (0..40u32).rev() {
            blob.push(b'r');
            blob.extend_from_slice(&(index + 1).to_le_bytes());
        }
        assert_eq!(from_marshal(&blob), Err(MarshalError::TooLarge));
    }

    #[test]
    fn the_writer_gives_what_marshal_dumps_gives_for_json_loads() {
        let value = json!({
            "rows": [
                {"id": 1, "name": "item-1", "score": 0.5, "tags": ["a", "b"]},
                {"id": 2, "name": "id", "score": 1.5, "tags": ["b", "a", "x".repeat(40)]},
                {"x".repeat(40): "x".repeat(40), "tags": "name"},
            ],
            "ints": [0, -1, 2147483647, -2147483648, 2147483648u64, i64::MIN, i64::MAX, u64::MAX],
            "floats": [1.5, -0.0, 1e300],
            "text": ["", "ünï \u{2603}", "x".repeat(300), "é".repeat(300)],
            "flags": [true, false, null],
            "ünï": {},
        });
        let blob = marshal_writer_hex(&value);
        let script = "import json, marshal, sys\n\
            blob, text = sys.argv[1], sys.argv[2]\n\
            loaded = marshal.loads(bytes.fromhex(blob))\n\
            assert loaded == json.loads(text), (loaded, json.loads(text))\n\
            assert [type(x) for x in loaded['ints']] == [int] * 8\n\
            first, second = (list(row)[0] for row in loaded['rows'][:2])\n\
            assert first is second, 'keys are shared'\n\
            print('same')";
        let output = std::process::Command::new("python3")
            .args(["-c", script, &blob, &value.to_string()])
            .output()
            .unwrap();
        assert_eq!(
            String::from_utf8_lossy(&output.stdout).trim(),
            "same",
            "{}",
            String::from_utf8_lossy(&output.stderr)
        );
        // What the writer gives, the decoder reads back.
        let bytes = crate::protocol::marshal_writer::to_marshal(&value).unwrap();
        assert_eq!(from_marshal(&bytes).unwrap(), value);
    }

    fn marshal_writer_hex(value: &Value) -> String {
        crate::protocol::marshal_writer::to_marshal(value)
            .unwrap()
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect()
    }
}

/// In-process costs of P8's and P9's payloads, printed (not a benchmark:
/// run by hand with `cargo test --lib measure_table_payloads -- --ignored
/// --nocapture`).
#[cfg(test)]
mod measure {
    use std::time::Instant;

    fn best_of<T>(runs: usize, mut f: impl FnMut() -> T) -> f64 {
        (0..runs)
            .map(|_| {
                let start = Instant::now();
                std::hint::black_box(f());
                start.elapsed().as_secs_f64() * 1000.0
            })
            .fold(f64::INFINITY, f64::min)
    }

    #[test]
    #[ignore]
    fn measure_table_payloads() {
        let script = "import json, marshal, sys\n\
            rows = [{'id': i, 'name': f'item-{i}', 'score': i * 0.5, 'tags': ['a', 'b']} for i in range(10000)]\n\
            open(sys.argv[1], 'wb').write(marshal.dumps(rows, 4))\n\
            open(sys.argv[2], 'w').write(json.dumps(rows, separators=(',', ':')))";
        let dir = tempfile::tempdir().unwrap();
        let (blob_path, text_path) = (dir.path().join("blob"), dir.path().join("text"));
        let status = std::process::Command::new("python3")
            .args(["-c", script])
            .arg(&blob_path)
            .arg(&text_path)
            .status()
            .unwrap();
        assert!(status.success());
        let blob = std::fs::read(&blob_path).unwrap();
        let text = std::fs::read_to_string(&text_path).unwrap();
        let marshal_ms = best_of(20, || super::from_marshal(&blob).unwrap());
        let json_ms = best_of(20, || {
            serde_json::from_str::<serde_json::Value>(&text).unwrap()
        });
        println!("P8 result, 10 000 records: marshal decode {marshal_ms:.2} ms, serde_json parse {json_ms:.2} ms");

        let rows: serde_json::Value = serde_json::from_str(&text).unwrap();
        let args = serde_json::json!({"rows": rows.as_array().unwrap()[..2000]});
        let write_ms = best_of(20, || {
            crate::protocol::marshal_writer::to_marshal(&args).unwrap()
        });
        let text_ms = best_of(20, || serde_json::to_string(&args).unwrap());
        std::fs::write(
            &blob_path,
            crate::protocol::marshal_writer::to_marshal(&args).unwrap(),
        )
        .unwrap();
        std::fs::write(&text_path, serde_json::to_string(&args).unwrap()).unwrap();
        println!("P9 arguments, 2 000 records: marshal write {write_ms:.2} ms, serde_json text {text_ms:.2} ms");
        let script = "import json, marshal, sys, time\n\
            blob, text = open(sys.argv[1], 'rb').read(), open(sys.argv[2]).read()\n\
            def best(f):\n    \
                times = []\n    \
                for _ in range(50):\n        \
                    start = time.perf_counter(); f(); times.append(time.perf_counter() - start)\n    \
                return min(times) * 1000\n\
            assert marshal.loads(blob) == json.loads(text)\n\
            print(f'P9 in the shim: marshal.loads {best(lambda: marshal.loads(blob)):.2f} ms, json.loads {best(lambda: json.loads(text)):.2f} ms')";
        let output = std::process::Command::new("python3")
            .args(["-c", script])
            .arg(&blob_path)
            .arg(&text_path)
            .output()
            .unwrap();
        print!("{}", String::from_utf8_lossy(&output.stdout));
        assert!(
            output.status.success(),
            "{}",
            String::from_utf8_lossy(&output.stderr)
        );
    }
}
