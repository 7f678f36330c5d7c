//! A result sent as one MessagePack blob (`value_mp`, packed by the msgpack C
//! extension) turned into the JSON value the walk in the shim would have
//! given, in one pass.
//!
//! The shim packs only what MessagePack and JSON share (see `_packed` in
//! `results.py`); the differences left are spelled here as Python spells
//! them: bytes are base64 text, and map keys that are not text become the
//! text `json.dumps` (or, where it has none, `str()`) gives them. Nothing the
//! worker sends is trusted: nesting past [`MAX_RESULT_DEPTH`] and keys of any
//! other kind are errors, and lengths only size allocations up to what the
//! bytes can hold.

use std::fmt;

use base64::Engine as _;
use serde::de::{self, DeserializeSeed, MapAccess, SeqAccess, Visitor};
use serde_json::{Map, Number, Value};

use super::MAX_RESULT_DEPTH;

/// Why a blob is not a result.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum BlobError {
    #[error("the result is nested deeper than {MAX_RESULT_DEPTH} levels of lists and dicts")]
    TooDeep,
    #[error("the result is not valid MessagePack: {0}")]
    Invalid(String),
}

/// Decodes `bytes` (one MessagePack value) into JSON.
pub fn from_msgpack(bytes: &[u8]) -> Result<Value, BlobError> {
    let mut deserializer = rmp_serde::Deserializer::from_read_ref(bytes);
    let seed = JsonSeed {
        depth: 0,
        budget: bytes.len(),
    };
    match seed.deserialize(&mut deserializer) {
        Ok(value) => Ok(value),
        // rmp-serde wraps the seed's error in its own words.
        Err(e) if e.to_string().contains(TOO_DEEP) => Err(BlobError::TooDeep),
        Err(e) => Err(BlobError::Invalid(e.to_string())),
    }
}

const TOO_DEEP: &str = "nested past the result depth";

/// One value at `depth` levels of nesting; `budget` bounds preallocation by
/// the blob's size (every element takes at least one byte).
#[derive(Clone, Copy)]
struct JsonSeed {
    depth: usize,
    budget: usize,
}

impl JsonSeed {
    fn child(self) -> Result<JsonSeed, &'static str> {
        if self.depth >= MAX_RESULT_DEPTH {
            return Err(TOO_DEEP);
        }
        Ok(JsonSeed {
            depth: self.depth + 1,
            ..self
        })
    }

    fn capacity(self, hint: Option<usize>) -> usize {
        hint.unwrap_or(0).min(self.budget)
    }
}

impl<'de> DeserializeSeed<'de> for JsonSeed {
    type Value = Value;

    fn deserialize<D: de::Deserializer<'de>>(self, deserializer: D) -> Result<Value, D::Error> {
        deserializer.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for JsonSeed {
    type Value = Value;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a MessagePack value")
    }

    fn visit_bool<E>(self, v: bool) -> Result<Value, E> {
        Ok(Value::Bool(v))
    }

    fn visit_i64<E>(self, v: i64) -> Result<Value, E> {
        Ok(Value::Number(v.into()))
    }

    fn visit_u64<E>(self, v: u64) -> Result<Value, E> {
        Ok(Value::Number(v.into()))
    }

    fn visit_f64<E>(self, v: f64) -> Result<Value, E> {
        // NaN and the infinities have no JSON number: null, as for the walked value.
        Ok(Number::from_f64(v).map_or(Value::Null, Value::Number))
    }

    fn visit_str<E>(self, v: &str) -> Result<Value, E> {
        Ok(Value::String(v.to_owned()))
    }

    fn visit_string<E>(self, v: String) -> Result<Value, E> {
        Ok(Value::String(v))
    }

    fn visit_bytes<E>(self, v: &[u8]) -> Result<Value, E> {
        Ok(Value::String(
            base64::engine::general_purpose::STANDARD.encode(v),
        ))
    }

    fn visit_unit<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }

    fn visit_none<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Value, A::Error> {
        let child = self.child().map_err(de::Error::custom)?;
        let mut items = Vec::with_capacity(self.capacity(seq.size_hint()));
        while let Some(item) = seq.next_element_seed(child)? {
            items.push(item);
        }
        Ok(Value::Array(items))
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Value, A::Error> {
        let child = self.child().map_err(de::Error::custom)?;
        let mut object = Map::with_capacity(self.capacity(map.size_hint()));
        while let Some(key) = map.next_key_seed(KeySeed)? {
            let value = map.next_value_seed(child)?;
            object.insert(key, value);
        }
        Ok(Value::Object(object))
    }
}

/// A map key as the text Python gives it: `json.dumps` spells int, float,
/// bool and None keys; bytes keys (which it refuses) are their `str()`.
struct KeySeed;

impl<'de> DeserializeSeed<'de> for KeySeed {
    type Value = String;

    fn deserialize<D: de::Deserializer<'de>>(self, deserializer: D) -> Result<String, D::Error> {
        deserializer.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for KeySeed {
    type Value = String;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a text, number, boolean, null or bytes map key")
    }

    fn visit_str<E>(self, v: &str) -> Result<String, E> {
        Ok(v.to_owned())
    }

    fn visit_string<E>(self, v: String) -> Result<String, E> {
        Ok(v)
    }

    fn visit_bool<E>(self, v: bool) -> Result<String, E> {
        Ok(if v { "true" } else { "false" }.to_owned())
    }

    fn visit_i64<E>(self, v: i64) -> Result<String, E> {
        Ok(v.to_string())
    }

    fn visit_u64<E>(self, v: u64) -> Result<String, E> {
        Ok(v.to_string())
    }

    fn visit_f64<E>(self, v: f64) -> Result<String, E> {
        Ok(python_float_repr(v))
    }

    fn visit_unit<E>(self) -> Result<String, E> {
        Ok("null".to_owned())
    }

    fn visit_none<E>(self) -> Result<String, E> {
        Ok("null".to_owned())
    }

    fn visit_bytes<E>(self, v: &[u8]) -> Result<String, E> {
        Ok(python_bytes_repr(v))
    }
}

/// `repr(float)` (which `json.dumps` uses for float keys; NaN and the
/// infinities as `str()` spells them, as the walk does): the shortest digits
/// that round-trip, positional for exponents -4 to 15, else `1.5e+16`.
fn python_float_repr(v: f64) -> String {
    if v.is_nan() {
        return "nan".into();
    }
    if v.is_infinite() {
        return if v > 0.0 { "inf" } else { "-inf" }.into();
    }
    let scientific = format!("{v:e}"); // shortest round-trip digits: "1.5e16", "-2e-7"
    let (mantissa, exponent) = scientific.split_once('e').unwrap_or((&scientific, "0"));
    let exponent: i32 = exponent.parse().unwrap_or(0);
    if v == 0.0 || (-4..16).contains(&exponent) {
        let positional = format!("{v}");
        return if positional.contains('.') {
            positional
        } else {
            positional + ".0"
        };
    }
    let sign = if exponent < 0 { '-' } else { '+' };
    format!("{mantissa}e{sign}{:02}", exponent.abs())
}

/// `str(bytes)`: `b'...'`, quoted with `"` only when the bytes hold a `'`
/// and no `"`, printable ASCII as is, the rest escaped.
fn python_bytes_repr(bytes: &[u8]) -> String {
    let quote = if bytes.contains(&b'\'') && !bytes.contains(&b'"') {
        '"'
    } else {
        '\''
    };
    let mut text = String::with_capacity(bytes.len() + 3);
    text.push('b');
    text.push(quote);
    for &byte in bytes {
        match byte {
            b'\\' => text.push_str("\\\\"),
            b'\t' => text.push_str("\\t"),
            b'\n' => text.push_str("\\n"),
            b'\r' => text.push_str("\\r"),
            b if b as char == quote => {
                text.push('\\');
                text.push(quote);
            }
            0x20..=0x7e => text.push(byte as char),
            _ => text.push_str(&format!("\\x{byte:02x}")),
        }
    }
    text.push(quote);
    text
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn pack(value: &rmpv::Value) -> Vec<u8> {
        let mut bytes = Vec::new();
        rmpv::encode::write_value(&mut bytes, value).unwrap();
        bytes
    }

    #[test]
    fn scalars_lists_and_maps_arrive_as_json() {
        use rmpv::Value as M;
        let blob = pack(&M::Array(vec![
            M::Map(vec![
                (M::from("id"), M::from(7)),
                (M::from("score"), M::F64(0.5)),
                (M::from("tags"), M::Array(vec![M::from("a"), M::Nil])),
            ]),
            M::Binary(b"hi".to_vec()),
            M::Boolean(true),
            M::F64(f64::NAN),
            M::from(u64::MAX),
            M::from(i64::MIN),
        ]));
        assert_eq!(
            from_msgpack(&blob).unwrap(),
            json!([{"id": 7, "score": 0.5, "tags": ["a", null]}, "aGk=", true, null, u64::MAX, i64::MIN])
        );
    }

    #[test]
    fn keys_are_spelled_as_python_spells_them() {
        use rmpv::Value as M;
        let keys = [
            (M::from(3), "3"),
            (M::from(-3), "-3"),
            (M::Boolean(false), "false"),
            (M::Nil, "null"),
            (M::F64(1.5), "1.5"),
            (M::F64(2.0), "2.0"),
            (M::F64(1e16), "1e+16"),
            (M::F64(1.5e-7), "1.5e-07"),
            (M::F64(0.0001), "0.0001"),
            (M::F64(-0.0), "-0.0"),
            (M::F64(f64::INFINITY), "inf"),
            (M::Binary(b"a'b\x00".to_vec()), "b\"a'b\\x00\""),
            (M::Binary(b"x\"'".to_vec()), "b'x\"\\''"),
        ];
        for (key, spelled) in keys {
            let blob = pack(&M::Map(vec![(key.clone(), M::from(1))]));
            let value = from_msgpack(&blob).unwrap();
            assert_eq!(value, json!({spelled: 1}), "key {key:?}");
        }
    }

    #[test]
    fn keys_of_other_kinds_and_broken_blobs_are_errors() {
        use rmpv::Value as M;
        let blob = pack(&M::Map(vec![(M::Array(vec![]), M::from(1))]));
        assert!(matches!(from_msgpack(&blob), Err(BlobError::Invalid(_))));
        assert!(matches!(
            from_msgpack(&[0x92, 0x01]),
            Err(BlobError::Invalid(_))
        ));
        assert!(matches!(from_msgpack(&[0xc1]), Err(BlobError::Invalid(_))));
    }

    #[test]
    fn nesting_is_held_to_the_result_depth() {
        // One-element array headers (0x91), then the integer 1.
        let nested = |levels: usize| [vec![0x91; levels], vec![0x01]].concat();
        assert!(from_msgpack(&nested(MAX_RESULT_DEPTH)).is_ok());
        assert!(matches!(
            from_msgpack(&nested(MAX_RESULT_DEPTH + 1)),
            Err(BlobError::TooDeep)
        ));
        // Far deeper than any stack would hold if the decoder recursed unchecked.
        assert!(matches!(
            from_msgpack(&nested(1_000_000)),
            Err(BlobError::TooDeep)
        ));
    }

    #[test]
    fn a_lying_length_does_not_allocate_it() {
        // An array header claiming 2^32-1 elements followed by nothing.
        let blob = [0xdd, 0xff, 0xff, 0xff, 0xff];
        assert!(matches!(from_msgpack(&blob), Err(BlobError::Invalid(_))));
    }
}
