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
pub(crate) const MAX_EXPANDED: usize = DEFAULT_MAX_FRAME;

/// Why a blob is not a result.
#[derive(Debug, thiserror::Error, PartialEq)]
#[non_exhaustive]
pub(crate) enum MarshalError {
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
        "the result holds more than {} values (lists, dicts and the items in them); return fewer, or write them to a file",
        super::MAX_VALUES
    )]
    TooManyValues,
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
    pub(crate) fn python_type(&self) -> &'static str {
        match self {
            MarshalError::Surrogate { .. } => "UnicodeEncodeError",
            MarshalError::TooLarge | MarshalError::TooManyValues => "ResultTooLarge",
            _ => "ValueError",
        }
    }
}

/// Decodes `bytes` (one marshal object, nothing after it) into JSON.
pub(crate) fn from_marshal(bytes: &[u8]) -> Result<Value, MarshalError> {
    let mut reader = Reader {
        bytes,
        pos: 0,
        refs: Vec::new(),
        replaying: 0,
        expanded: 0,
        values: 0,
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
    /// Values made so far (each a `Value` in memory; see `MAX_VALUES`).
    values: usize,
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
        self.values += 1;
        if self.values > super::MAX_VALUES {
            return Err(MarshalError::TooManyValues);
        }
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

mod repr;
#[cfg(test)]
mod tests;

/// In-process costs of P8's and P9's payloads, printed (not a benchmark:
/// run by hand with `cargo test --lib measure_table_payloads -- --ignored
/// --nocapture`).
#[cfg(test)]
mod measure;
