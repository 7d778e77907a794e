//! Direct Avro binary reading and writing of the records on the processors' hot path.
//!
//! Why: apache-avro's schema-aware serde walks its schema tree for every field, and in the
//! `[runs]` + `[journal]` profile decoding observations and encoding runs through it took
//! most of the time. A record implementing [`DirectRecord`] reads and writes its *current*
//! schema field by field, in schema order, with the same bytes apache-avro writes
//! (minimal zig-zag varints, one block per non-empty array or map, then a 0 block).
//!
//! The direct path is only a shortcut: [`super::Codec::decode_direct`] takes it when the
//! writer schema is the current one, and anything it cannot read — an older revision, a
//! negative block count, a varint that overflows, a bad union index — goes to apache-avro,
//! which decides and produces every error. In debug builds every direct decode and encode is
//! compared with apache-avro's, so the whole test suite checks the two agree.

use std::collections::BTreeMap;

use serde::{Serialize, de::DeserializeOwned};

/// The datum is not one the direct reader takes; apache-avro reads it (or says why not).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Unreadable;

/// A value with a direct Avro binary form (a record, or a field of one).
pub trait Datum: Sized {
    /// Appends the value's Avro binary encoding.
    fn write(&self, out: &mut Vec<u8>);
    /// Reads one value.
    fn read(r: &mut Reader<'_>) -> Result<Self, Unreadable>;
}

/// A top-level record with a direct form of its current schema.
pub trait DirectRecord: Datum + Serialize + DeserializeOwned + PartialEq + std::fmt::Debug {
    /// Full name of the Avro record.
    const FULL_NAME: &'static str;
}

/// Reads an Avro datum from a byte slice.
#[derive(Debug)]
pub struct Reader<'a> {
    rest: &'a [u8],
}

impl<'a> Reader<'a> {
    /// A reader of `datum`.
    pub fn new(datum: &'a [u8]) -> Self {
        Self { rest: datum }
    }

    /// Whether every byte was read (a datum with trailing bytes is not read directly).
    pub fn is_empty(&self) -> bool {
        self.rest.is_empty()
    }

    fn byte(&mut self) -> Result<u8, Unreadable> {
        let (&b, rest) = self.rest.split_first().ok_or(Unreadable)?;
        self.rest = rest;
        Ok(b)
    }

    /// A `long`: zig-zag varint of at most 10 bytes that fits 64 bits.
    pub fn long(&mut self) -> Result<i64, Unreadable> {
        let mut z = 0u64;
        for shift in (0..64).step_by(7) {
            let b = self.byte()?;
            if shift == 63 && b > 1 {
                return Err(Unreadable); // bits beyond 64: apache-avro decides
            }
            z |= u64::from(b & 0x7f) << shift;
            if b & 0x80 == 0 {
                return Ok((z >> 1) as i64 ^ -((z & 1) as i64));
            }
        }
        Err(Unreadable)
    }

    /// An `int`.
    pub fn int(&mut self) -> Result<i32, Unreadable> {
        i32::try_from(self.long()?).map_err(|_| Unreadable)
    }

    /// A `boolean`.
    pub fn boolean(&mut self) -> Result<bool, Unreadable> {
        match self.byte()? {
            0 => Ok(false),
            1 => Ok(true),
            _ => Err(Unreadable),
        }
    }

    /// A `string` (UTF-8).
    pub fn string(&mut self) -> Result<String, Unreadable> {
        self.str().map(str::to_owned)
    }

    /// A `string`, borrowed from the datum: for a field a reader only looks at or skips
    /// (checked as UTF-8 all the same, so a skipped field refuses what reading it would).
    pub fn str(&mut self) -> Result<&'a str, Unreadable> {
        let len = usize::try_from(self.long()?).map_err(|_| Unreadable)?;
        let bytes = self.rest.get(..len).ok_or(Unreadable)?;
        self.rest = &self.rest[len..];
        std::str::from_utf8(bytes).map_err(|_| Unreadable)
    }

    /// An enum symbol's index (the caller maps it, refusing what it does not know).
    pub fn symbol(&mut self) -> Result<i32, Unreadable> {
        self.int()
    }

    /// A `["null", T]` union.
    pub fn optional<T>(
        &mut self,
        read: impl FnOnce(&mut Self) -> Result<T, Unreadable>,
    ) -> Result<Option<T>, Unreadable> {
        match self.long()? {
            0 => Ok(None),
            1 => read(self).map(Some),
            _ => Err(Unreadable),
        }
    }

    /// An array, in blocks with positive counts.
    pub fn array<T>(
        &mut self,
        mut read: impl FnMut(&mut Self) -> Result<T, Unreadable>,
    ) -> Result<Vec<T>, Unreadable> {
        let mut items = Vec::new();
        loop {
            let count = self.block_count()?;
            if count == 0 {
                return Ok(items);
            }
            // Room for the block at once, bounded by the bytes left (the count is untrusted).
            items.reserve(count.min(self.rest.len()));
            for _ in 0..count {
                items.push(read(self)?);
            }
        }
    }

    /// An array or a map, read item by item without collecting (`read` reads one item,
    /// or one key and its value).
    pub fn each(
        &mut self,
        mut read: impl FnMut(&mut Self) -> Result<(), Unreadable>,
    ) -> Result<(), Unreadable> {
        loop {
            let count = self.block_count()?;
            if count == 0 {
                return Ok(());
            }
            for _ in 0..count {
                read(self)?;
            }
        }
    }

    /// A map of strings (a key repeated keeps its last value, as serde's map visitor does).
    pub fn string_map(&mut self) -> Result<BTreeMap<String, String>, Unreadable> {
        let mut map = BTreeMap::new();
        loop {
            let count = self.block_count()?;
            if count == 0 {
                return Ok(map);
            }
            for _ in 0..count {
                let key = self.string()?;
                map.insert(key, self.string()?);
            }
        }
    }

    /// A block's item count (0: the end).
    fn block_count(&mut self) -> Result<usize, Unreadable> {
        // A negative count (a block with its byte size) is legal but never written by
        // apache-avro's serializer: left to apache-avro.
        usize::try_from(self.long()?).map_err(|_| Unreadable)
    }
}

/// Appends `n` as a zig-zag varint (minimal length, as apache-avro writes it).
pub fn write_long(out: &mut Vec<u8>, n: i64) {
    let mut z = ((n << 1) ^ (n >> 63)) as u64;
    while z > 0x7f {
        out.push((z & 0x7f) as u8 | 0x80);
        z >>= 7;
    }
    out.push(z as u8);
}

/// Appends an `int`.
pub fn write_int(out: &mut Vec<u8>, n: i32) {
    write_long(out, i64::from(n));
}

/// Appends a `boolean`.
pub fn write_boolean(out: &mut Vec<u8>, b: bool) {
    out.push(u8::from(b));
}

/// Appends a `string`.
pub fn write_string(out: &mut Vec<u8>, s: &str) {
    write_long(out, s.len() as i64);
    out.extend_from_slice(s.as_bytes());
}

/// Appends a `["null", T]` union.
pub fn write_optional<T>(out: &mut Vec<u8>, v: Option<&T>, write: impl FnOnce(&mut Vec<u8>, &T)) {
    match v {
        None => out.push(0),
        Some(v) => {
            out.push(2); // union index 1, zig-zag encoded
            write(out, v);
        }
    }
}

/// Appends an optional `string`.
pub fn write_optional_string(out: &mut Vec<u8>, v: Option<&String>) {
    write_optional(out, v, |out, s| write_string(out, s));
}

/// Appends an optional `long`.
pub fn write_optional_long(out: &mut Vec<u8>, v: Option<i64>) {
    write_optional(out, v.as_ref(), |out, n| write_long(out, *n));
}

/// Appends an optional `int`.
pub fn write_optional_int(out: &mut Vec<u8>, v: Option<i32>) {
    write_optional(out, v.as_ref(), |out, n| write_int(out, *n));
}

/// Appends an array: one block holding every item (none when empty), then the 0 block.
pub fn write_array<T>(out: &mut Vec<u8>, items: &[T], mut write: impl FnMut(&mut Vec<u8>, &T)) {
    if !items.is_empty() {
        write_long(out, items.len() as i64);
        items.iter().for_each(|item| write(out, item));
    }
    out.push(0);
}

/// Appends a map of strings, in key order.
pub fn write_string_map(out: &mut Vec<u8>, map: &BTreeMap<String, String>) {
    if !map.is_empty() {
        write_long(out, map.len() as i64);
        for (k, v) in map {
            write_string(out, k);
            write_string(out, v);
        }
    }
    out.push(0);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn apache_long(n: i64) -> Vec<u8> {
        let schema = apache_avro::Schema::Long;
        let writer = apache_avro::writer::datum::GenericDatumWriter::builder(&schema).build().unwrap();
        let mut out = Vec::new();
        writer.write_ser(&mut out, &n).unwrap();
        out
    }

    #[test]
    fn longs_are_written_and_read_as_apache_avro_does() {
        let edges =
            [0, 1, -1, 63, -64, 64, -65, 8191, 8192, i32::MAX as i64, i32::MIN as i64, i64::MAX, i64::MIN];
        let more = (0..64).flat_map(|s| [1i64 << s, (1i64 << s).wrapping_neg(), (1i64 << s).wrapping_sub(1)]);
        for n in edges.into_iter().chain(more) {
            let mut out = Vec::new();
            write_long(&mut out, n);
            assert_eq!(out, apache_long(n), "{n}");
            let mut r = Reader::new(&out);
            assert_eq!(r.long(), Ok(n));
            assert!(r.is_empty());
        }
    }

    #[test]
    fn what_apache_avro_must_decide_is_unreadable_here() {
        // 11-byte varint, 10th byte with bits beyond 64, truncated varint and string,
        // negative string length, bad boolean and union index, int out of range.
        let cases: [&[u8]; 8] = [
            &[0x80; 11],
            &[0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x02],
            &[0x80],
            &[0x06, b'a'],
            &[0x01],
            &[0x04],
            &[0x80, 0x80, 0x80, 0x80, 0x10],
            &[],
        ];
        assert_eq!(Reader::new(cases[0]).long(), Err(Unreadable));
        assert_eq!(Reader::new(cases[1]).long(), Err(Unreadable));
        assert_eq!(Reader::new(cases[2]).long(), Err(Unreadable));
        assert_eq!(Reader::new(cases[3]).string(), Err(Unreadable));
        assert_eq!(Reader::new(cases[4]).string(), Err(Unreadable));
        assert_eq!(Reader::new(cases[5]).boolean(), Err(Unreadable));
        assert_eq!(Reader::new(cases[5]).optional(Reader::long), Err(Unreadable));
        assert_eq!(Reader::new(cases[6]).int(), Err(Unreadable));
        assert_eq!(Reader::new(cases[7]).boolean(), Err(Unreadable));
        assert_eq!(
            Reader::new(&[0x01, 0x02, 0x00]).array(Reader::long),
            Err(Unreadable),
            "negative block count"
        );
    }

    #[test]
    fn arrays_and_maps_read_every_block() {
        let mut out = Vec::new();
        write_long(&mut out, 2);
        write_long(&mut out, 7);
        write_long(&mut out, 8);
        write_long(&mut out, 1);
        write_long(&mut out, 9);
        out.push(0);
        assert_eq!(Reader::new(&out).array(Reader::long), Ok(vec![7, 8, 9]));

        let map = BTreeMap::from([("a".to_owned(), "1".to_owned()), ("b".to_owned(), "2".to_owned())]);
        let mut out = Vec::new();
        write_string_map(&mut out, &map);
        assert_eq!(Reader::new(&out).string_map(), Ok(map));
    }
}
