//! Kafka's default partitioner for keyed records, bit-exact with the Java client
//! (`BuiltInPartitioner.partitionForKey`: `toPositive(murmur2(key)) % partitions`), so a
//! Java or Python host app producing with the same keys lands on the same partitions
//! (DESIGN.md §2).

/// The librdkafka `partitioner` setting that matches [`partition_for_key`] for keyed
/// records (null keys go to a random partition).
pub const LIBRDKAFKA_PARTITIONER: &str = "murmur2_random";

/// Kafka's `Utils.murmur2`: 32-bit MurmurHash2, seed `0x9747b28c`, as a Java `int`.
pub fn murmur2(data: &[u8]) -> i32 {
    const M: u32 = 0x5bd1_e995;
    const R: u32 = 24;
    let mut h = 0x9747_b28c ^ data.len() as u32;
    let mut words = data.chunks_exact(4);
    for word in &mut words {
        let mut k = u32::from_le_bytes([word[0], word[1], word[2], word[3]]);
        k = k.wrapping_mul(M);
        k ^= k >> R;
        h = h.wrapping_mul(M) ^ k.wrapping_mul(M);
    }
    let tail = words.remainder();
    if tail.len() == 3 {
        h ^= u32::from(tail[2]) << 16;
    }
    if tail.len() >= 2 {
        h ^= u32::from(tail[1]) << 8;
    }
    if let Some(&first) = tail.first() {
        h = (h ^ u32::from(first)).wrapping_mul(M);
    }
    h ^= h >> 13;
    h = h.wrapping_mul(M);
    h ^= h >> 15;
    h as i32
}

/// The partition the Java producer picks for a record with this (serialized) key.
///
/// # Panics
/// If `partitions` is not positive.
pub fn partition_for_key(key: &[u8], partitions: i32) -> i32 {
    assert!(partitions > 0, "a topic has at least one partition, not {partitions}");
    (murmur2(key) & 0x7fff_ffff) % partitions
}

/// Where a record goes, once for every writer of input topics (the watcher's publisher,
/// the in-memory topics of `replay` and the tests): a keyed record to its key's partition
/// ([`partition_for_key`]), a keyless one (a snapshot marker, a heartbeat) to every
/// partition, so every task of every processor sees it.
pub fn placement(key: Option<&[u8]>, partitions: i32) -> std::ops::Range<i32> {
    match key {
        Some(key) => {
            let p = partition_for_key(key, partitions);
            p..p + 1
        }
        None => 0..partitions.max(1),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keyed_records_go_to_their_partition_keyless_ones_to_every_partition() {
        assert_eq!(placement(Some(b"abc"), 3).collect::<Vec<_>>(), [partition_for_key(b"abc", 3)]);
        assert_eq!(placement(None, 3).collect::<Vec<_>>(), [0, 1, 2]);
    }

    /// Kafka's `UtilsTest.testMurmur2` (clients/src/test/java/org/apache/kafka/common/utils).
    #[test]
    fn murmur2_matches_kafka_utils_test() {
        for (key, expected) in [
            (&b"21"[..], -973_932_308),
            (b"foobar", -790_332_482),
            (b"a-little-bit-long-string", -985_981_536),
            (b"a-little-bit-longer-string", -1_486_304_829),
            (b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8", -58_897_971),
            (b"abc", 479_470_107),
        ] {
            assert_eq!(murmur2(key), expected, "{}", String::from_utf8_lossy(key));
        }
    }

    /// librdkafka's `unittest_murmur2` (src/rdmurmur2.c), its "Java murmur2 results":
    /// every tail length, and the empty key.
    #[test]
    fn murmur2_matches_librdkafka_unit_test() {
        let unaligned = b"PreAmbleWillBeRemoved,ThePrePartThatIs";
        for (key, expected) in [
            (&b"kafka"[..], 0xd067_cf64_u32),
            (b"giberish123456789", 0x8f55_2b0c),
            (b"1234", 0x9fc9_7b14),
            (b"234", 0xe7c0_09ca),
            (b"34", 0x8739_30da),
            (b"4", 0x5a4b_5ca1),
            (&unaligned[..], 0x7842_4f1c),
            (&unaligned[1..], 0x4a62_b377),
            (&unaligned[2..], 0xe0e4_e09e),
            (&unaligned[3..], 0x62b8_b43f),
            (b"", 0x106e_08d9),
        ] {
            assert_eq!(murmur2(key), expected as i32, "{}", String::from_utf8_lossy(key));
        }
    }

    #[test]
    fn partition_is_the_positive_hash_modulo_the_count() {
        // murmur2("21") = -973932308; & 0x7fffffff = 1173551340.
        assert_eq!(partition_for_key(b"21", 7), 1_173_551_340 % 7);
        assert_eq!(partition_for_key(b"abc", 1), 0);
        for n in 1..=64 {
            assert!((0..n).contains(&partition_for_key(b"foobar", n)));
        }
    }

    #[test]
    #[should_panic(expected = "at least one partition")]
    fn zero_partitions_is_a_bug() {
        partition_for_key(b"k", 0);
    }
}
