//! The JSON writer every manifest and spec digest goes through: compact JSON, byte for byte what
//! `serde_json::to_string` writes, but a string with nothing to escape (nearly all of them) is
//! found so eight bytes at a time and copied whole. serde_json looks each byte up in its escape
//! table, which in the policy's wasm cost about 40 instructions per byte and was the single
//! largest entry of the controller's profile (9% of its instructions per new sandbox).

use crate::prelude::*;

use core::fmt;

use serde::ser::{self, Serialize};

/// Why a value could not be written: a map key that is not a string (or an integer or char,
/// which JSON writes quoted), or an error a `Serialize` impl raised itself.
#[derive(Debug)]
pub struct Error(String);

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl core::error::Error for Error {}

impl ser::Error for Error {
    fn custom<T: fmt::Display>(msg: T) -> Self {
        Self(msg.to_string())
    }
}

/// `value` as compact JSON, as `serde_json::to_string` writes it.
pub fn to_string<T: Serialize + ?Sized>(value: &T) -> Result<String, Error> {
    let mut writer = Writer {
        out: String::with_capacity(128),
    };
    value.serialize(&mut writer)?;
    Ok(writer.out)
}

struct Writer {
    out: String,
}

const ONES: u64 = u64::MAX / 255;
const HIGH_BITS: u64 = ONES << 7;

/// The index of the first byte of `bytes` that JSON escapes (a control character, `"` or `\`).
/// Eight bytes at a time: a byte below 0x20, or equal to `"` or `\`, sets its high bit in the
/// mask; a borrow can only set bits above the first such byte, so the lowest set bit is exact.
fn first_escape(bytes: &[u8]) -> Option<usize> {
    let (words, rest) = bytes.as_chunks::<8>();
    for (i, word) in words.iter().enumerate() {
        if let Some(at) = word_escape(word) {
            return Some(i * 8 + at);
        }
    }
    if rest.is_empty() {
        return None;
    }
    // The last eight bytes as one more word, overlapping bytes already found clean, so its
    // first match is the remainder's: one word test instead of a test per byte.
    if let Some(last) = bytes.last_chunk::<8>() {
        return word_escape(last).map(|at| bytes.len() - 8 + at);
    }
    // Shorter than a word: the remainder is the whole string.
    rest.iter().position(|&b| escape(b).is_some())
}

/// The index of the first of these eight bytes that JSON escapes.
fn word_escape(word: &[u8; 8]) -> Option<usize> {
    let word = u64::from_le_bytes(*word);
    let control = word.wrapping_sub(ONES * 0x20) & !word;
    let quote = word ^ (ONES * u64::from(b'"'));
    let quote = quote.wrapping_sub(ONES) & !quote;
    let backslash = word ^ (ONES * u64::from(b'\\'));
    let backslash = backslash.wrapping_sub(ONES) & !backslash;
    let found = (control | quote | backslash) & HIGH_BITS;
    (found != 0).then(|| found.trailing_zeros() as usize / 8)
}

/// How JSON writes byte `b` inside a string, when it must be escaped; serde_json's table.
fn escape(b: u8) -> Option<&'static str> {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    static CONTROL: [[u8; 6]; 32] = {
        let mut table = [[0; 6]; 32];
        let mut i = 0;
        while i < 32 {
            table[i] = [b'\\', b'u', b'0', b'0', HEX[i >> 4], HEX[i & 0xf]];
            i += 1;
        }
        table
    };
    Some(match b {
        b'"' => "\\\"",
        b'\\' => "\\\\",
        0x08 => "\\b",
        0x09 => "\\t",
        0x0a => "\\n",
        0x0c => "\\f",
        0x0d => "\\r",
        // The table holds ASCII only, so every entry is valid UTF-8.
        0x00..=0x1f => core::str::from_utf8(&CONTROL[usize::from(b)]).unwrap_or_default(),
        _ => return None,
    })
}

impl Writer {
    fn string(&mut self, value: &str) {
        self.out.reserve(value.len() + 2);
        self.out.push('"');
        let mut rest = value;
        while let Some(at) = first_escape(rest.as_bytes()) {
            // `at` is an ASCII byte, so both sides of it are on character boundaries.
            let (run, tail) = rest.split_at(at);
            self.out.push_str(run);
            if let Some(escaped) = tail.bytes().next().and_then(escape) {
                self.out.push_str(escaped);
            }
            rest = tail.get(1..).unwrap_or_default();
        }
        self.out.push_str(rest);
        self.out.push('"');
    }

    fn integer<I: itoa::Integer>(&mut self, value: I) {
        self.out.push_str(itoa::Buffer::new().format(value));
    }

    /// Floats as serde_json writes them (its shortest round-trip form; `null` when not finite):
    /// the manifests hold none, so its own code is the simplest exact copy.
    fn float<F: Serialize>(&mut self, value: F) -> Result<(), Error> {
        let text = serde_json::to_string(&value).map_err(|e| Error(e.to_string()))?;
        self.out.push_str(&text);
        Ok(())
    }
}

/// A sequence or map being written: whether a comma comes before the next element.
struct Compound<'w> {
    writer: &'w mut Writer,
    first: bool,
    /// A variant's `{"name":…}` wrapper, closed after the content.
    wrapped: bool,
}

impl Compound<'_> {
    fn comma(&mut self) {
        if !self.first {
            self.writer.out.push(',');
        }
        self.first = false;
    }

    fn close(self, bracket: char) {
        self.writer.out.push(bracket);
        if self.wrapped {
            self.writer.out.push('}');
        }
    }
}

impl<'w> Compound<'w> {
    /// `bracket` opened, inside `{"variant":` when the value is an enum's variant.
    fn open(writer: &'w mut Writer, bracket: char, variant: Option<&str>) -> Self {
        if let Some(variant) = variant {
            writer.out.push('{');
            writer.string(variant);
            writer.out.push(':');
        }
        writer.out.push(bracket);
        Compound {
            writer,
            first: true,
            wrapped: variant.is_some(),
        }
    }
}

impl<'w> ser::Serializer for &'w mut Writer {
    type Ok = ();
    type Error = Error;
    type SerializeSeq = Compound<'w>;
    type SerializeTuple = Compound<'w>;
    type SerializeTupleStruct = Compound<'w>;
    type SerializeTupleVariant = Compound<'w>;
    type SerializeMap = Compound<'w>;
    type SerializeStruct = Compound<'w>;
    type SerializeStructVariant = Compound<'w>;

    fn serialize_bool(self, v: bool) -> Result<(), Error> {
        self.out.push_str(if v { "true" } else { "false" });
        Ok(())
    }
    fn serialize_i8(self, v: i8) -> Result<(), Error> {
        self.integer(v);
        Ok(())
    }
    fn serialize_i16(self, v: i16) -> Result<(), Error> {
        self.integer(v);
        Ok(())
    }
    fn serialize_i32(self, v: i32) -> Result<(), Error> {
        self.integer(v);
        Ok(())
    }
    fn serialize_i64(self, v: i64) -> Result<(), Error> {
        self.integer(v);
        Ok(())
    }
    fn serialize_i128(self, v: i128) -> Result<(), Error> {
        self.integer(v);
        Ok(())
    }
    fn serialize_u8(self, v: u8) -> Result<(), Error> {
        self.integer(v);
        Ok(())
    }
    fn serialize_u16(self, v: u16) -> Result<(), Error> {
        self.integer(v);
        Ok(())
    }
    fn serialize_u32(self, v: u32) -> Result<(), Error> {
        self.integer(v);
        Ok(())
    }
    fn serialize_u64(self, v: u64) -> Result<(), Error> {
        self.integer(v);
        Ok(())
    }
    fn serialize_u128(self, v: u128) -> Result<(), Error> {
        self.integer(v);
        Ok(())
    }
    fn serialize_f32(self, v: f32) -> Result<(), Error> {
        self.float(v)
    }
    fn serialize_f64(self, v: f64) -> Result<(), Error> {
        self.float(v)
    }
    fn serialize_char(self, v: char) -> Result<(), Error> {
        self.string(v.encode_utf8(&mut [0; 4]));
        Ok(())
    }
    fn serialize_str(self, v: &str) -> Result<(), Error> {
        self.string(v);
        Ok(())
    }
    fn serialize_bytes(self, v: &[u8]) -> Result<(), Error> {
        use ser::SerializeSeq;
        let mut seq = self.serialize_seq(Some(v.len()))?;
        for byte in v {
            seq.serialize_element(byte)?;
        }
        seq.end()
    }
    fn serialize_none(self) -> Result<(), Error> {
        self.serialize_unit()
    }
    fn serialize_some<T: Serialize + ?Sized>(self, value: &T) -> Result<(), Error> {
        value.serialize(self)
    }
    fn serialize_unit(self) -> Result<(), Error> {
        self.out.push_str("null");
        Ok(())
    }
    fn serialize_unit_struct(self, _name: &'static str) -> Result<(), Error> {
        self.serialize_unit()
    }
    fn serialize_unit_variant(
        self,
        _name: &'static str,
        _index: u32,
        variant: &'static str,
    ) -> Result<(), Error> {
        self.string(variant);
        Ok(())
    }
    fn serialize_newtype_struct<T: Serialize + ?Sized>(
        self,
        _name: &'static str,
        value: &T,
    ) -> Result<(), Error> {
        value.serialize(self)
    }
    fn serialize_newtype_variant<T: Serialize + ?Sized>(
        self,
        _name: &'static str,
        _index: u32,
        variant: &'static str,
        value: &T,
    ) -> Result<(), Error> {
        self.out.push('{');
        self.string(variant);
        self.out.push(':');
        value.serialize(&mut *self)?;
        self.out.push('}');
        Ok(())
    }
    fn serialize_seq(self, _len: Option<usize>) -> Result<Compound<'w>, Error> {
        Ok(Compound::open(self, '[', None))
    }
    fn serialize_tuple(self, _len: usize) -> Result<Compound<'w>, Error> {
        Ok(Compound::open(self, '[', None))
    }
    fn serialize_tuple_struct(
        self,
        _name: &'static str,
        _len: usize,
    ) -> Result<Compound<'w>, Error> {
        Ok(Compound::open(self, '[', None))
    }
    fn serialize_tuple_variant(
        self,
        _name: &'static str,
        _index: u32,
        variant: &'static str,
        _len: usize,
    ) -> Result<Compound<'w>, Error> {
        Ok(Compound::open(self, '[', Some(variant)))
    }
    fn serialize_map(self, _len: Option<usize>) -> Result<Compound<'w>, Error> {
        Ok(Compound::open(self, '{', None))
    }
    fn serialize_struct(self, _name: &'static str, _len: usize) -> Result<Compound<'w>, Error> {
        Ok(Compound::open(self, '{', None))
    }
    fn serialize_struct_variant(
        self,
        _name: &'static str,
        _index: u32,
        variant: &'static str,
        _len: usize,
    ) -> Result<Compound<'w>, Error> {
        Ok(Compound::open(self, '{', Some(variant)))
    }
}

impl ser::SerializeSeq for Compound<'_> {
    type Ok = ();
    type Error = Error;
    fn serialize_element<T: Serialize + ?Sized>(&mut self, value: &T) -> Result<(), Error> {
        self.comma();
        value.serialize(&mut *self.writer)
    }
    fn end(self) -> Result<(), Error> {
        self.close(']');
        Ok(())
    }
}

impl ser::SerializeTuple for Compound<'_> {
    type Ok = ();
    type Error = Error;
    fn serialize_element<T: Serialize + ?Sized>(&mut self, value: &T) -> Result<(), Error> {
        ser::SerializeSeq::serialize_element(self, value)
    }
    fn end(self) -> Result<(), Error> {
        ser::SerializeSeq::end(self)
    }
}

impl ser::SerializeTupleStruct for Compound<'_> {
    type Ok = ();
    type Error = Error;
    fn serialize_field<T: Serialize + ?Sized>(&mut self, value: &T) -> Result<(), Error> {
        ser::SerializeSeq::serialize_element(self, value)
    }
    fn end(self) -> Result<(), Error> {
        ser::SerializeSeq::end(self)
    }
}

impl ser::SerializeTupleVariant for Compound<'_> {
    type Ok = ();
    type Error = Error;
    fn serialize_field<T: Serialize + ?Sized>(&mut self, value: &T) -> Result<(), Error> {
        ser::SerializeSeq::serialize_element(self, value)
    }
    fn end(self) -> Result<(), Error> {
        ser::SerializeSeq::end(self)
    }
}

impl ser::SerializeMap for Compound<'_> {
    type Ok = ();
    type Error = Error;
    fn serialize_key<T: Serialize + ?Sized>(&mut self, key: &T) -> Result<(), Error> {
        self.comma();
        key.serialize(MapKey(&mut *self.writer))?;
        self.writer.out.push(':');
        Ok(())
    }
    fn serialize_value<T: Serialize + ?Sized>(&mut self, value: &T) -> Result<(), Error> {
        value.serialize(&mut *self.writer)
    }
    fn end(self) -> Result<(), Error> {
        self.close('}');
        Ok(())
    }
}

impl ser::SerializeStruct for Compound<'_> {
    type Ok = ();
    type Error = Error;
    fn serialize_field<T: Serialize + ?Sized>(
        &mut self,
        key: &'static str,
        value: &T,
    ) -> Result<(), Error> {
        self.comma();
        self.writer.string(key);
        self.writer.out.push(':');
        value.serialize(&mut *self.writer)
    }
    fn end(self) -> Result<(), Error> {
        self.close('}');
        Ok(())
    }
}

impl ser::SerializeStructVariant for Compound<'_> {
    type Ok = ();
    type Error = Error;
    fn serialize_field<T: Serialize + ?Sized>(
        &mut self,
        key: &'static str,
        value: &T,
    ) -> Result<(), Error> {
        ser::SerializeStruct::serialize_field(self, key, value)
    }
    fn end(self) -> Result<(), Error> {
        ser::SerializeStruct::end(self)
    }
}

/// A map key: JSON's keys are strings, so a string or char is written as one and an integer,
/// bool or finite float in quotes, as serde_json does; anything else is an error.
struct MapKey<'w>(&'w mut Writer);

fn key_must_be_a_string() -> Error {
    Error("key must be a string".to_string())
}

impl MapKey<'_> {
    fn quoted(self, text: &str) -> Result<(), Error> {
        self.0.out.push('"');
        self.0.out.push_str(text);
        self.0.out.push('"');
        Ok(())
    }

    fn integer<I: itoa::Integer>(self, value: I) -> Result<(), Error> {
        self.quoted(itoa::Buffer::new().format(value))
    }

    fn float<F: Serialize>(self, value: F, finite: bool) -> Result<(), Error> {
        if !finite {
            return Err(Error("a float key must be finite".to_string()));
        }
        let text = serde_json::to_string(&value).map_err(|e| Error(e.to_string()))?;
        self.quoted(&text)
    }
}

impl ser::Serializer for MapKey<'_> {
    type Ok = ();
    type Error = Error;
    type SerializeSeq = ser::Impossible<(), Error>;
    type SerializeTuple = ser::Impossible<(), Error>;
    type SerializeTupleStruct = ser::Impossible<(), Error>;
    type SerializeTupleVariant = ser::Impossible<(), Error>;
    type SerializeMap = ser::Impossible<(), Error>;
    type SerializeStruct = ser::Impossible<(), Error>;
    type SerializeStructVariant = ser::Impossible<(), Error>;

    fn serialize_str(self, v: &str) -> Result<(), Error> {
        self.0.string(v);
        Ok(())
    }
    fn serialize_char(self, v: char) -> Result<(), Error> {
        self.0.string(v.encode_utf8(&mut [0; 4]));
        Ok(())
    }
    fn serialize_bool(self, v: bool) -> Result<(), Error> {
        self.quoted(if v { "true" } else { "false" })
    }
    fn serialize_i8(self, v: i8) -> Result<(), Error> {
        self.integer(v)
    }
    fn serialize_i16(self, v: i16) -> Result<(), Error> {
        self.integer(v)
    }
    fn serialize_i32(self, v: i32) -> Result<(), Error> {
        self.integer(v)
    }
    fn serialize_i64(self, v: i64) -> Result<(), Error> {
        self.integer(v)
    }
    fn serialize_i128(self, v: i128) -> Result<(), Error> {
        self.integer(v)
    }
    fn serialize_u8(self, v: u8) -> Result<(), Error> {
        self.integer(v)
    }
    fn serialize_u16(self, v: u16) -> Result<(), Error> {
        self.integer(v)
    }
    fn serialize_u32(self, v: u32) -> Result<(), Error> {
        self.integer(v)
    }
    fn serialize_u64(self, v: u64) -> Result<(), Error> {
        self.integer(v)
    }
    fn serialize_u128(self, v: u128) -> Result<(), Error> {
        self.integer(v)
    }
    fn serialize_unit_variant(
        self,
        _name: &'static str,
        _index: u32,
        variant: &'static str,
    ) -> Result<(), Error> {
        self.serialize_str(variant)
    }
    fn serialize_newtype_struct<T: Serialize + ?Sized>(
        self,
        _name: &'static str,
        value: &T,
    ) -> Result<(), Error> {
        value.serialize(self)
    }

    fn serialize_f32(self, v: f32) -> Result<(), Error> {
        self.float(v, v.is_finite())
    }
    fn serialize_f64(self, v: f64) -> Result<(), Error> {
        self.float(v, v.is_finite())
    }
    fn serialize_bytes(self, _v: &[u8]) -> Result<(), Error> {
        Err(key_must_be_a_string())
    }
    fn serialize_none(self) -> Result<(), Error> {
        Err(key_must_be_a_string())
    }
    fn serialize_some<T: Serialize + ?Sized>(self, _value: &T) -> Result<(), Error> {
        Err(key_must_be_a_string())
    }
    fn serialize_unit(self) -> Result<(), Error> {
        Err(key_must_be_a_string())
    }
    fn serialize_unit_struct(self, _name: &'static str) -> Result<(), Error> {
        Err(key_must_be_a_string())
    }
    fn serialize_newtype_variant<T: Serialize + ?Sized>(
        self,
        _name: &'static str,
        _index: u32,
        _variant: &'static str,
        _value: &T,
    ) -> Result<(), Error> {
        Err(key_must_be_a_string())
    }
    fn serialize_seq(self, _len: Option<usize>) -> Result<Self::SerializeSeq, Error> {
        Err(key_must_be_a_string())
    }
    fn serialize_tuple(self, _len: usize) -> Result<Self::SerializeTuple, Error> {
        Err(key_must_be_a_string())
    }
    fn serialize_tuple_struct(
        self,
        _name: &'static str,
        _len: usize,
    ) -> Result<Self::SerializeTupleStruct, Error> {
        Err(key_must_be_a_string())
    }
    fn serialize_tuple_variant(
        self,
        _name: &'static str,
        _index: u32,
        _variant: &'static str,
        _len: usize,
    ) -> Result<Self::SerializeTupleVariant, Error> {
        Err(key_must_be_a_string())
    }
    fn serialize_map(self, _len: Option<usize>) -> Result<Self::SerializeMap, Error> {
        Err(key_must_be_a_string())
    }
    fn serialize_struct(
        self,
        _name: &'static str,
        _len: usize,
    ) -> Result<Self::SerializeStruct, Error> {
        Err(key_must_be_a_string())
    }
    fn serialize_struct_variant(
        self,
        _name: &'static str,
        _index: u32,
        _variant: &'static str,
        _len: usize,
    ) -> Result<Self::SerializeStructVariant, Error> {
        Err(key_must_be_a_string())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use alloc::collections::BTreeMap;
    use serde::Serialize;
    use serde_json::{Value, json};

    fn same<T: Serialize + ?Sized>(value: &T) {
        let ours = to_string(value).expect("ours writes it");
        let theirs = serde_json::to_string(value).expect("serde_json writes it");
        assert_eq!(ours, theirs);
    }

    /// Every byte that needs an escape, and a plain one, at every offset of strings long enough
    /// to cross several eight-byte words, with multi-byte characters around them.
    #[test]
    fn strings_are_escaped_as_serde_json_escapes_them() {
        let specials: Vec<char> = (0u8..0x20)
            .map(char::from)
            .chain([
                '"',
                '\\',
                '/',
                '\u{7f}',
                'a',
                '\u{e9}',
                '\u{2028}',
                '\u{1f600}',
            ])
            .collect();
        for &special in &specials {
            for len in 0..40 {
                for at in 0..=len {
                    let mut text: String = "x".repeat(at);
                    text.push(special);
                    text.push_str(&"y".repeat(len - at));
                    same(&text);
                }
            }
        }
        same("");
        same("\u{0}\u{1f}\"\\\u{8}\u{9}\u{a}\u{c}\u{d}");
        same(&"\"".repeat(33));
        same(&'\n');
        same(&'\u{e9}');
    }

    /// A word whose bytes sit just around the three thresholds, so a borrow from one byte into
    /// the next would show as a false match or a missed one.
    #[test]
    fn no_byte_near_a_threshold_is_mistaken() {
        let near = [
            0x1f, 0x20, 0x21, 0x22, 0x23, 0x5b, 0x5c, 0x5d, 0x7f, 0x80, 0xff,
        ];
        let mut state = 0x2545_f491_4f6c_dd1d_u64;
        for _ in 0..20_000 {
            let mut bytes = [0u8; 16];
            for byte in &mut bytes {
                state ^= state << 13;
                state ^= state >> 7;
                state ^= state << 17;
                *byte = near[(state % near.len() as u64) as usize];
            }
            let expected = bytes.iter().position(|&b| escape(b).is_some());
            assert_eq!(first_escape(&bytes), expected, "{bytes:x?}");
        }
    }

    #[derive(Serialize)]
    #[serde(rename_all = "camelCase")]
    struct Manifest<'a> {
        api_version: &'static str,
        labels: BTreeMap<&'a str, String>,
        #[serde(skip_serializing_if = "Option::is_none")]
        absent: Option<u8>,
        present: Option<&'a str>,
        ports: Vec<u16>,
        empty: Vec<u8>,
        nested: [Inner; 2],
        flags: (bool, bool),
        unit: (),
    }

    #[derive(Serialize)]
    struct Inner {
        count: i64,
        big: u64,
        ratio: f64,
    }

    #[derive(Serialize)]
    enum Shape {
        Unit,
        Newtype(u32),
        Tuple(u8, &'static str),
        Struct { side: i32 },
    }

    #[derive(Serialize)]
    struct Wrapper(&'static str);

    #[test]
    fn structs_enums_and_values_are_written_as_serde_json_writes_them() {
        same(&Manifest {
            api_version: "v1",
            labels: BTreeMap::from([("app", "a\"b".to_string()), ("z", String::new())]),
            absent: None,
            present: Some("\u{e9}t\u{e9}\n"),
            ports: vec![80, 443, 65535],
            empty: vec![],
            nested: [
                Inner {
                    count: i64::MIN,
                    big: u64::MAX,
                    ratio: 0.1,
                },
                Inner {
                    count: 0,
                    big: 0,
                    ratio: 1e21,
                },
            ],
            flags: (true, false),
            unit: (),
        });
        same(&[
            Shape::Unit,
            Shape::Newtype(7),
            Shape::Tuple(1, "t"),
            Shape::Struct { side: -3 },
        ]);
        same(&Wrapper("w"));
        same(&[f64::NAN, f64::INFINITY, -0.0, 2.5e-8]);
        same(&[1.5f32]);
        same(&BTreeMap::from([(1u32, "one"), (20, "twenty")]));
        same(&BTreeMap::from([(true, 1), (false, 0)]));
        same(&BTreeMap::from([('k', 1)]));
        same(&BTreeMap::from([(OrderedKey::new(2.5), 1)]));
        same(&serde_bytes_like());
        same(&json!({
            "apiVersion": "networking.k8s.io/v1",
            "spec": {"podSelector": {}, "ingress": [], "egress": [{"to": [{"ipBlock":
                {"cidr": "0.0.0.0/0", "except": ["10.0.0.0/8"]}}]}]},
            "numbers": [0, -1, 18446744073709551615u64, 1.25, null, true],
            "text": "tab\there \u{1} \\ \"",
        }));
        same(&Value::Null);
        same(&json!([]));
        same(&json!({}));
    }

    fn serde_bytes_like() -> impl Serialize {
        struct Bytes;
        impl Serialize for Bytes {
            fn serialize<S: ser::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                s.serialize_bytes(b"\x00ab")
            }
        }
        Bytes
    }

    /// A float map key, held as its bits so that a map can order it.
    #[derive(PartialEq, Eq, PartialOrd, Ord)]
    struct OrderedKey(u64);

    impl OrderedKey {
        fn new(v: f64) -> Self {
            Self(v.to_bits())
        }
    }

    impl Serialize for OrderedKey {
        fn serialize<S: ser::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
            s.serialize_f64(f64::from_bits(self.0))
        }
    }

    #[test]
    fn a_key_that_cannot_be_a_string_is_an_error() {
        let mut map = BTreeMap::new();
        map.insert(vec![1], 1);
        assert!(to_string(&map).is_err());
        assert!(serde_json::to_string(&map).is_err());
        let nan = BTreeMap::from([(OrderedKey::new(f64::NAN), 1)]);
        assert!(to_string(&nan).is_err());
        assert!(serde_json::to_string(&nan).is_err());
    }
}
