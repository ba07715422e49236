//! A list answer (`PodList`, `SandboxList`, ...): read straight into its items, each through
//! the client's [`Projection`], and the two fields of its metadata the reflector needs; not the
//! whole list as one `Value` and then a copy of it (a list is the largest answer we read).
//! [`ItemStream`] reads one as its bytes come, an item at a time, so that a server that
//! ignores `limit` (a list served from its watch cache) costs the controller one item's bytes
//! and a batch of items, not the whole body.

use serde::de::{DeserializeSeed, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};
use serde_json::Value;

use super::projection::{Projection, read_seeded};

pub(crate) struct ListBody {
    pub(crate) items: Vec<Value>,
    pub(crate) resource_version: Option<String>,
    pub(crate) continue_token: Option<String>,
}

#[derive(Default, serde::Deserialize)]
struct ListMeta {
    #[serde(rename = "resourceVersion")]
    resource_version: Option<String>,
    #[serde(rename = "continue")]
    continue_token: Option<String>,
}

impl ListBody {
    pub(crate) fn from_slice(bytes: &[u8], projection: Projection) -> serde_json::Result<ListBody> {
        read_seeded(bytes, ListSeed(projection))
    }
}

struct ListSeed(Projection);

impl<'de> DeserializeSeed<'de> for ListSeed {
    type Value = ListBody;

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<ListBody, D::Error> {
        deserializer.deserialize_map(self)
    }
}

impl<'de> Visitor<'de> for ListSeed {
    type Value = ListBody;

    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("a list object")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<ListBody, A::Error> {
        let mut items = Vec::new();
        let mut meta = ListMeta::default();
        while let Some(key) = map.next_key::<String>()? {
            match key.as_str() {
                "items" => items = map.next_value_seed(Items(self.0))?,
                "metadata" => meta = map.next_value::<Option<ListMeta>>()?.unwrap_or_default(),
                _ => {
                    map.next_value::<IgnoredAny>()?;
                }
            }
        }
        Ok(ListBody {
            items,
            resource_version: meta.resource_version,
            continue_token: meta.continue_token,
        })
    }
}

/// The `items` array, each object read through the projection.
struct Items(Projection);

impl<'de> DeserializeSeed<'de> for Items {
    type Value = Vec<Value>;

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<Vec<Value>, D::Error> {
        // `any`, not `seq`: serde_json's `deserialize_seq` refuses a `null` outright.
        deserializer.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Items {
    type Value = Vec<Value>;

    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("a list of objects")
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Vec<Value>, A::Error> {
        let mut items = Vec::with_capacity(seq.size_hint().unwrap_or(0));
        while let Some(item) = seq.next_element_seed(self.0)? {
            items.push(item);
        }
        Ok(items)
    }

    // `"items": null`, as some servers send for an empty list.
    fn visit_unit<E>(self) -> Result<Vec<Value>, E> {
        Ok(Vec::new())
    }
}

/// A list's body read as it comes: each item, once its last byte is in, read through the
/// projection and handed on in batches; the list's metadata kept. Only the bytes of the item
/// being read (or of the list's metadata) are held.
pub(crate) struct ItemStream {
    projection: Projection,
    batch: usize,
    items: Vec<Value>,
    meta: ListMeta,
    /// Nesting depth outside strings: 1 inside the list object, 2 inside `items`.
    depth: usize,
    in_string: bool,
    escaped: bool,
    /// The last string at depth 1, with its bytes while it is read: a container at depth 1
    /// is the value of the key before it.
    key: Vec<u8>,
    reading_key: bool,
    last_key: Vec<u8>,
    /// What the open container at depth 1 is.
    field: Field,
    /// The bytes of the item or metadata being read.
    held: Vec<u8>,
    capturing: bool,
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Field {
    Other,
    Items,
    Metadata,
}

impl ItemStream {
    pub(crate) fn new(projection: Projection, batch: usize) -> Self {
        Self {
            projection,
            batch: batch.max(1),
            items: Vec::new(),
            meta: ListMeta::default(),
            depth: 0,
            in_string: false,
            escaped: false,
            key: Vec::new(),
            reading_key: false,
            last_key: Vec::new(),
            field: Field::Other,
            held: Vec::new(),
            capturing: false,
        }
    }

    /// Reads `bytes`, the next of the body; each full batch of items goes to `each`.
    pub(crate) fn push(
        &mut self,
        bytes: &[u8],
        each: &mut dyn FnMut(Vec<Value>),
    ) -> serde_json::Result<()> {
        let mut start = 0;
        for (i, &b) in bytes.iter().enumerate() {
            if self.in_string {
                if self.reading_key {
                    self.key.push(b);
                }
                if self.escaped {
                    self.escaped = false;
                } else if b == b'\\' {
                    self.escaped = true;
                } else if b == b'"' {
                    self.in_string = false;
                    if self.reading_key {
                        self.reading_key = false;
                        self.key.pop();
                        std::mem::swap(&mut self.last_key, &mut self.key);
                    }
                }
                continue;
            }
            match b {
                b'"' => {
                    self.in_string = true;
                    if self.depth == 1 {
                        self.reading_key = true;
                        self.key.clear();
                    }
                }
                b'{' | b'[' => {
                    self.depth += 1;
                    if self.depth == 2 {
                        self.field = match self.last_key.as_slice() {
                            b"items" if b == b'[' => Field::Items,
                            b"metadata" if b == b'{' => Field::Metadata,
                            _ => Field::Other,
                        };
                        if self.field == Field::Metadata {
                            self.capturing = true;
                            start = i;
                        }
                    } else if self.depth == 3 && self.field == Field::Items {
                        self.capturing = true;
                        start = i;
                    }
                }
                b'}' | b']' => {
                    let closes = self.depth;
                    self.depth = self.depth.saturating_sub(1);
                    let item = closes == 3 && self.field == Field::Items;
                    let meta = closes == 2 && self.field == Field::Metadata;
                    if self.capturing && (item || meta) {
                        self.held.extend_from_slice(&bytes[start..=i]);
                        self.capturing = false;
                        if item {
                            let value = self.projection.from_slice(&self.held)?;
                            self.items.push(value);
                            if self.items.len() >= self.batch {
                                each(std::mem::take(&mut self.items));
                            }
                        } else {
                            self.meta = serde_json::from_slice(&self.held)?;
                        }
                        self.held.clear();
                    }
                    if closes == 2 {
                        self.field = Field::Other;
                    }
                }
                _ => {}
            }
        }
        if self.capturing {
            self.held.extend_from_slice(&bytes[start..]);
        }
        Ok(())
    }

    /// The body's end: the items left go to `each`; the list's version and continue token.
    pub(crate) fn finish(
        mut self,
        each: &mut dyn FnMut(Vec<Value>),
    ) -> serde_json::Result<(Option<String>, Option<String>)> {
        if self.depth != 0 || self.in_string {
            return Err(<serde_json::Error as serde::de::Error>::custom(
                "the list ended before its last object did",
            ));
        }
        if !self.items.is_empty() {
            each(std::mem::take(&mut self.items));
        }
        Ok((self.meta.resource_version, self.meta.continue_token))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_items_and_the_list_metadata() {
        let body = br#"{"kind":"PodList","metadata":{"resourceVersion":"12","continue":"c"},
            "items":[{"metadata":{"name":"a"},"spec":{"x":1}},{"metadata":{"name":"b"}}]}"#;
        let list = ListBody::from_slice(body, Projection::MetadataAndStatus).unwrap();
        assert_eq!(list.items.len(), 2);
        assert_eq!(
            list.items[0],
            serde_json::json!({"metadata": {"name": "a"}})
        );
        assert_eq!(list.resource_version.as_deref(), Some("12"));
        assert_eq!(list.continue_token.as_deref(), Some("c"));
        assert!(list.items.iter().all(|item| item.get("spec").is_none()));
        let whole = ListBody::from_slice(body, Projection::Whole).unwrap();
        assert_eq!(whole.items[0]["spec"]["x"], 1);
    }

    /// Read as it comes, in pieces cut anywhere (inside strings, escapes, numbers), a list
    /// gives the items and metadata the whole read gives, in batches.
    #[test]
    fn a_list_read_in_pieces_gives_what_the_whole_read_gives() {
        let body = br#"{"kind":"PodList","apiVersion":"v1","metadata":{"resourceVersion":"12","continue":"c"},
            "items":[{"metadata":{"name":"a","annotations":{"x":"}]\"{["}},"spec":{"x":[1,{"y":2}]}},
                     {"metadata":{"name":"b"}},{"metadata":{"name":"c"},"status":{"phase":"Running"}}],
            "extra":{"items":[{"no":1}]}}"#;
        let whole = ListBody::from_slice(body, Projection::MetadataAndStatus).unwrap();
        for piece in [1, 2, 3, 7, 64, body.len()] {
            let mut stream = ItemStream::new(Projection::MetadataAndStatus, 2);
            let mut batches = Vec::new();
            let mut each = |items: Vec<Value>| batches.push(items);
            for chunk in body.chunks(piece) {
                stream.push(chunk, &mut each).unwrap();
            }
            let (version, token) = stream.finish(&mut each).unwrap();
            assert_eq!(batches.iter().map(Vec::len).collect::<Vec<_>>(), [2, 1]);
            assert_eq!(batches.concat(), whole.items, "pieces of {piece}");
            assert_eq!(version.as_deref(), Some("12"));
            assert_eq!(token.as_deref(), Some("c"));
        }
        // Metadata after the items, and none at all.
        let mut stream = ItemStream::new(Projection::Whole, 10);
        let mut items = Vec::new();
        stream
            .push(
                br#"{"items":[{"a":1}],"metadata":{"resourceVersion":"3"}}"#,
                &mut |i| items.extend(i),
            )
            .unwrap();
        let (version, _) = stream.finish(&mut |i| items.extend(i)).unwrap();
        assert_eq!((items.len(), version.as_deref()), (1, Some("3")));
        // Cut short: an error, not a shorter list.
        let mut stream = ItemStream::new(Projection::Whole, 10);
        stream
            .push(br#"{"items":[{"a":1},{"b""#, &mut |_| {})
            .unwrap();
        assert!(stream.finish(&mut |_| {}).is_err());
    }

    #[test]
    fn an_empty_list_may_say_null_or_nothing() {
        for body in [&br#"{"items":null,"metadata":null}"#[..], br#"{}"#] {
            let list = ListBody::from_slice(body, Projection::Whole).unwrap();
            assert!(list.items.is_empty());
            assert_eq!(list.resource_version, None);
        }
        assert!(ListBody::from_slice(b"[]", Projection::Whole).is_err());
        assert!(ListBody::from_slice(br#"{"items":{}}"#, Projection::Whole).is_err());
    }
}
