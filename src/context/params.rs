//! A callback's parameters (a JSON object a worker sent) into the
//! `#[derive(Deserialize)]` struct of its method, with a type error naming
//! the parameter: `node_id: invalid type: integer `5`, expected a string`
//! (serde_json's own `from_value` says only the second half).
//!
//! Keys the struct does not know are ignored, as a newer shim may send more;
//! a struct must not use `#[serde(flatten)]` (its fields would be read from
//! a buffer, past the naming): parse the same parameters into two structs
//! instead.

use serde::de::{
    self, DeserializeOwned, DeserializeSeed, Deserializer, IntoDeserializer, MapAccess, Visitor,
};
use serde_json::{Map, Value};

/// `params` as a `T`; the error names the parameter that does not fit.
pub(crate) fn from_params<T: DeserializeOwned>(
    params: &Map<String, Value>,
) -> Result<T, serde_json::Error> {
    T::deserialize(Params(params))
}

/// The parameters as a map whose values report their key in errors.
struct Params<'a>(&'a Map<String, Value>);

impl<'de> Deserializer<'de> for Params<'de> {
    type Error = serde_json::Error;

    fn deserialize_any<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Self::Error> {
        visitor.visit_map(Entries {
            entries: self.0.iter(),
            value: None,
        })
    }

    serde::forward_to_deserialize_any! {
        bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string
        bytes byte_buf option unit unit_struct newtype_struct seq tuple
        tuple_struct map struct enum identifier ignored_any
    }
}

struct Entries<'a> {
    entries: serde_json::map::Iter<'a>,
    /// The entry whose key was read last, for `next_value_seed`.
    value: Option<(&'a str, &'a Value)>,
}

impl<'de> MapAccess<'de> for Entries<'de> {
    type Error = serde_json::Error;

    fn next_key_seed<K: DeserializeSeed<'de>>(
        &mut self,
        seed: K,
    ) -> Result<Option<K::Value>, Self::Error> {
        let Some((key, value)) = self.entries.next() else {
            return Ok(None);
        };
        self.value = Some((key, value));
        let key: de::value::StrDeserializer<'_, serde_json::Error> =
            key.as_str().into_deserializer();
        seed.deserialize(key).map(Some)
    }

    fn next_value_seed<V: DeserializeSeed<'de>>(
        &mut self,
        seed: V,
    ) -> Result<V::Value, Self::Error> {
        let (key, value) = self
            .value
            .take()
            .ok_or_else(|| de::Error::custom("a value was read before its key"))?;
        seed.deserialize(value)
            .map_err(|e| de::Error::custom(format!("{key}: {e}")))
    }
}

#[cfg(test)]
mod tests {
    use serde::Deserialize;
    use serde_json::json;

    use super::*;

    #[derive(Debug, Deserialize, PartialEq)]
    struct Example {
        path: String,
        size: Option<u64>,
        #[serde(default)]
        tags: Vec<String>,
    }

    fn parse(params: Value) -> Result<Example, String> {
        let Value::Object(map) = params else {
            panic!("an object")
        };
        from_params(&map).map_err(|e| e.to_string())
    }

    #[test]
    fn parameters_fill_the_struct_and_unknown_ones_are_ignored() {
        let parsed = parse(json!({"path": "a.txt", "size": null, "newer": 1})).unwrap();
        assert_eq!(
            parsed,
            Example {
                path: "a.txt".into(),
                size: None,
                tags: vec![]
            }
        );
    }

    #[test]
    fn a_parameter_of_the_wrong_type_is_named() {
        assert_eq!(
            parse(json!({"path": 5})).unwrap_err(),
            "path: invalid type: integer `5`, expected a string"
        );
        assert_eq!(
            parse(json!({"path": "a", "size": -1})).unwrap_err(),
            "size: invalid value: integer `-1`, expected u64"
        );
        assert_eq!(
            parse(json!({"path": "a", "tags": ["x", 2]})).unwrap_err(),
            "tags: invalid type: integer `2`, expected a string"
        );
    }

    #[test]
    fn a_missing_parameter_is_named() {
        assert_eq!(
            parse(json!({"size": 1})).unwrap_err(),
            "missing field `path`"
        );
    }
}
