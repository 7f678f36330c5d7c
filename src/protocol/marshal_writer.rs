//! A call's JSON arguments as one `marshal` blob (format 4, `args_marshal`),
//! which the shim turns into Python objects with `marshal.loads`, in C.
//!
//! Only what JSON holds is written: `N`, `T`, `F`, `i` (32-bit integers)
//! or `l` (wider ones, base-2**15 digits), `g` (binary float), `z`/`a`
//! (ASCII text) or `u` (UTF-8 text), `[` and `{` ... `0`. Text that may
//! repeat — every key, and short values — is flagged the first time and
//! referred back to (`r`) after: a table's rows then share their key
//! objects, interned (`Z`, `t`), as `json.loads` would share them, which
//! makes `marshal.loads` half as slow as without. The blob is built by the
//! supervisor, so the shim trusts it.

use std::collections::HashMap;

use serde_json::Value;

/// Why arguments cannot be written: a text or list longer than marshal's
/// 32-bit lengths (far past any frame).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub(crate) enum WriteError {
    #[error("an argument holds {0} items or bytes, more than marshal can carry")]
    TooLong(usize),
}

/// `value` as `marshal.dumps(value, 4)` would write the Python object
/// `json.loads` makes of it (without marshal's reference flags).
#[cfg(test)]
pub(crate) fn to_marshal(value: &Value) -> Result<Vec<u8>, WriteError> {
    let mut out = Vec::with_capacity(estimated_len(value));
    write_marshal(value, &mut out)?;
    Ok(out)
}

/// [`to_marshal`], appended to `out` (the frame it travels in, so that a
/// large argument is not made once and copied again).
pub(crate) fn write_marshal(value: &Value, out: &mut Vec<u8>) -> Result<(), WriteError> {
    let mut writer = Writer {
        out: std::mem::take(out),
        texts: HashMap::new(),
    };
    let written = writer.write(value);
    *out = writer.out;
    written
}

/// At least the length of [`to_marshal`]'s blob for `value` (integers
/// beyond 32 bits and floats counted at their widest), without recursion.
pub(crate) fn estimated_len(value: &Value) -> usize {
    let mut total = 0usize;
    let mut stack = vec![value];
    while let Some(value) = stack.pop() {
        total += match value {
            Value::Null | Value::Bool(_) => 1,
            // A long of up to 128 bits: 5 bytes of header, 2 per 15 bits.
            Value::Number(_) => 5 + 18,
            Value::String(text) => 5 + text.len(),
            Value::Array(items) => {
                stack.extend(items);
                5
            }
            Value::Object(map) => {
                stack.extend(map.values());
                2 + map.keys().map(|key| 5 + key.len()).sum::<usize>()
            }
        };
    }
    total
}

/// Text values this long or shorter are shared (names, tags, enum values).
const SHARED_TEXT: usize = 32;
const FLAG_REF: u8 = 0x80;

struct Writer<'a> {
    out: Vec<u8>,
    /// The reference index of each flagged text (as value or as key).
    texts: HashMap<(&'a str, bool), u32>,
}

impl<'a> Writer<'a> {
    fn write(&mut self, value: &'a Value) -> Result<(), WriteError> {
        let out = &mut self.out;
        match value {
            Value::Null => out.push(b'N'),
            Value::Bool(true) => out.push(b'T'),
            Value::Bool(false) => out.push(b'F'),
            Value::Number(number) => {
                if let Some(small) = number.as_i64().and_then(|n| i32::try_from(n).ok()) {
                    out.push(b'i');
                    out.extend_from_slice(&small.to_le_bytes());
                } else if let Some(n) = number.as_i64() {
                    write_long(n < 0, u128::from(n.unsigned_abs()), out);
                } else if let Some(n) = number.as_u64() {
                    write_long(false, u128::from(n), out);
                } else {
                    out.push(b'g');
                    out.extend_from_slice(&number.as_f64().unwrap_or(f64::NAN).to_le_bytes());
                }
            }
            Value::String(text) => {
                if text.len() <= SHARED_TEXT {
                    self.shared_text(text, false)?;
                } else {
                    write_text(text, false, out)?;
                }
            }
            Value::Array(items) => {
                out.push(b'[');
                write_length(items.len(), out)?;
                for item in items {
                    self.write(item)?;
                }
            }
            Value::Object(map) => {
                out.push(b'{');
                for (key, item) in map {
                    self.shared_text(key, true)?;
                    self.write(item)?;
                }
                self.out.push(b'0');
            }
        }
        Ok(())
    }

    /// A reference to `text` written before (as a key when `key`: keys are
    /// interned, values not), else `text` flagged for the next time.
    fn shared_text(&mut self, text: &'a str, key: bool) -> Result<(), WriteError> {
        if let Some(index) = self.texts.get(&(text, key)) {
            self.out.push(b'r');
            self.out.extend_from_slice(&index.to_le_bytes());
            return Ok(());
        }
        let index =
            u32::try_from(self.texts.len()).map_err(|_| WriteError::TooLong(self.texts.len()))?;
        self.texts.insert((text, key), index);
        let start = self.out.len();
        write_text(text, key, &mut self.out)?;
        self.out[start] |= FLAG_REF;
        Ok(())
    }
}

fn write_length(n: usize, out: &mut Vec<u8>) -> Result<(), WriteError> {
    let n32 = i32::try_from(n).map_err(|_| WriteError::TooLong(n))?;
    out.extend_from_slice(&n32.to_le_bytes());
    Ok(())
}

/// Text as `z`/`a`/`u`, or interned (`Z`/`A`/`t`) for a key.
fn write_text(text: &str, interned: bool, out: &mut Vec<u8>) -> Result<(), WriteError> {
    let bytes = text.as_bytes();
    let (short, long, unicode) = if interned {
        (b'Z', b'A', b't')
    } else {
        (b'z', b'a', b'u')
    };
    match (text.is_ascii(), u8::try_from(bytes.len())) {
        (true, Ok(n)) => {
            out.push(short);
            out.push(n);
        }
        (true, Err(_)) => {
            out.push(long);
            write_length(bytes.len(), out)?;
        }
        (false, _) => {
            out.push(unicode);
            write_length(bytes.len(), out)?;
        }
    }
    out.extend_from_slice(bytes);
    Ok(())
}

/// `l`: the digit count (negative for a negative number), then the
/// magnitude's base-2**15 digits, least significant first.
fn write_long(negative: bool, mut magnitude: u128, out: &mut Vec<u8>) {
    let mut digits = Vec::with_capacity(5);
    while magnitude > 0 {
        digits.push((magnitude & 0x7fff) as u16);
        magnitude >>= 15;
    }
    let count = digits.len() as i32; // at most five digits for 64 bits
    out.push(b'l');
    out.extend_from_slice(&(if negative { -count } else { count }).to_le_bytes());
    for digit in digits {
        out.extend_from_slice(&digit.to_le_bytes());
    }
}
