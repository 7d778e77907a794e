//! Runtime core tests with the probe processor over in-memory topics.

use std::collections::BTreeMap;

use super::{
    deadletter::DeadLetter,
    driver::{self, DriverError, LogRecord, MemTopic, OutputTopics},
    probe::{KeyedCount, Probe, ProbeRekey},
    task::Task,
};
use crate::codec::{Codec, Framing, RecordWriter};

fn writer(codec: &Codec, name: &str) -> RecordWriter {
    let known = codec.schemas().current(name).unwrap();
    RecordWriter::new(known, Framing::SingleObject { fingerprint: known.fingerprint }).unwrap()
}

/// `n` keyed probe inputs over `keys` keys, with corrupt values at every 97th record.
fn input(codec: &Codec, partitions: i32, n: usize, keys: usize) -> (MemTopic, usize) {
    let w = writer(codec, KeyedCount::FULL_NAME);
    let mut topic = MemTopic::new("probe-in", partitions);
    let mut corrupt = 0;
    for i in 0..n {
        let key = format!("k{}", i % keys);
        let value = if i % 97 == 5 {
            corrupt += 1;
            b"\x00\x00\x00\x00\x07garbage".to_vec()
        } else {
            let rec = KeyedCount { key: key.clone(), count: 0, input_partition: 0, input_offset: 0 };
            w.encode(&rec).unwrap()
        };
        topic.produce(Some(key.as_bytes()), Some(value), 1_000 + i as i64, false);
    }
    topic.forward_time(10_000_000); // a forwarded heartbeat on every partition
    (topic, corrupt)
}

fn outputs(codec: &Codec, partitions: i32) -> OutputTopics {
    OutputTopics {
        writers: vec![writer(codec, KeyedCount::FULL_NAME)],
        topics: vec![MemTopic::new("probe-out", partitions)],
        key_writers: Vec::new(),
        forward: Vec::new(),
    }
}

async fn decoded_outputs(codec: &Codec, topic: &MemTopic) -> BTreeMap<String, Vec<i64>> {
    let mut per_key: BTreeMap<String, Vec<i64>> = BTreeMap::new();
    for rec in topic.partitions.iter().flatten() {
        let out: KeyedCount = codec.decode_as(rec.value.as_deref().unwrap()).await.unwrap();
        assert_eq!(rec.key.as_deref(), Some(out.key.as_bytes()), "output keyed by the counted key");
        per_key.entry(out.key).or_default().push(out.count);
    }
    per_key
}

#[tokio::test]
async fn every_good_record_is_counted_once_and_every_bad_one_dead_lettered() {
    let codec = Codec::new(None).unwrap();
    let (topic, corrupt) = input(&codec, 3, 2_000, 17);
    let run = driver::run("probe", &codec, &[&topic], outputs(&codec, 2), |_| Probe::new()).await.unwrap();

    assert_eq!(run.records_in as usize, 2_000 + 3, "2000 records and a heartbeat per partition");
    assert_eq!(run.dead_letters.len(), corrupt);
    for dl in &run.dead_letters {
        assert_eq!((dl.reason.as_str(), dl.processor.as_str()), ("no_registry", "probe"));
        let original = &topic.partitions[dl.source_partition as usize][dl.source_offset as usize];
        assert_eq!(dl.source_value, original.value, "the dead letter holds the original bytes");
    }
    let per_key = decoded_outputs(&codec, &run.outputs[0]).await;
    let total: usize = per_key.values().map(Vec::len).sum();
    assert_eq!(total, 2_000 - corrupt);
    for (key, counts) in &per_key {
        let expected: Vec<i64> = (1..=counts.len() as i64).collect();
        assert_eq!(counts, &expected, "{key}: counts 1..n, no gap, no repeat");
    }
}

#[tokio::test]
async fn state_rebuilt_from_the_changelog_equals_the_state_that_wrote_it() {
    let codec = Codec::new(None).unwrap();
    let (topic, _) = input(&codec, 3, 1_000, 11);
    let run = driver::run("probe", &codec, &[&topic], outputs(&codec, 1), |_| Probe::new()).await.unwrap();
    let changelog = &run.changelogs[0];
    assert_eq!(changelog.name, "probe-counts-changelog");
    let per_key = decoded_outputs(&codec, &run.outputs[0]).await;

    for partition in 0..3 {
        let mut task = Task::new(partition, Probe::new(), super::Outputs::new(vec![], vec![]));
        for LogRecord { key, value, .. } in &changelog.partitions[partition as usize] {
            task.restore(0, key.as_deref().unwrap(), value.as_deref()).unwrap();
        }
        for (key, counts) in &per_key {
            let owner = super::partitioner::partition_for_key(key.as_bytes(), 3);
            let expected = if owner == partition { counts.len() as i64 } else { 0 };
            assert_eq!(task.processor().count(key), expected, "{key} on partition {partition}");
        }
    }
}

#[tokio::test]
async fn two_runs_over_the_same_log_are_identical() {
    let codec = Codec::new(None).unwrap();
    let (topic, _) = input(&codec, 3, 500, 7);
    let a = driver::run("probe", &codec, &[&topic], outputs(&codec, 2), |_| Probe::new()).await.unwrap();
    let b = driver::run("probe", &codec, &[&topic], outputs(&codec, 2), |_| Probe::new()).await.unwrap();
    assert_eq!(a.outputs, b.outputs);
    assert_eq!(a.changelogs, b.changelogs);
    assert_eq!(a.dead_letters, b.dead_letters);
}

#[tokio::test]
async fn inputs_with_different_partition_counts_are_refused() {
    let codec = Codec::new(None).unwrap();
    let (a, _) = input(&codec, 3, 10, 2);
    let b = MemTopic::new("other", 2);
    let err =
        driver::run("probe", &codec, &[&a, &b], outputs(&codec, 1), |_| Probe::new()).await.unwrap_err();
    assert!(matches!(err, DriverError::NotCopartitioned { .. }));
    assert_eq!(
        err.to_string(),
        "co-partitioned inputs must have equal partition counts: probe-in: 3, other: 2"
    );
}

#[test]
fn dead_letters_record_null_values_too() {
    let codec = Codec::new(None).unwrap();
    let mut topic = MemTopic::new("probe-in", 1);
    topic.append(
        0,
        LogRecord {
            key: Some(b"k".to_vec()),
            value: None,
            timestamp_ms: 5,
            heartbeat: false,
            beat: false,
            writer: super::Writer::SOLE,
        },
    );
    let rt = tokio::runtime::Builder::new_current_thread().build().unwrap();
    let run =
        rt.block_on(driver::run("probe", &codec, &[&topic], outputs(&codec, 1), |_| Probe::new())).unwrap();
    let reasons: Vec<&str> = run.dead_letters.iter().map(|d: &DeadLetter| d.reason.as_str()).collect();
    assert_eq!(reasons, ["null_value"]);
}

/// A global input of 40 probe records over 4 keys (`g0`..`g3`), on 2 partitions.
fn global_input(codec: &Codec) -> MemTopic {
    let w = writer(codec, KeyedCount::FULL_NAME);
    let mut global = MemTopic::new("leases", 2);
    for i in 0..40 {
        let key = format!("g{}", i % 4);
        let rec = KeyedCount { key: key.clone(), count: 0, input_partition: 0, input_offset: 0 };
        global.produce(Some(key.as_bytes()), Some(w.encode(&rec).unwrap()), 1_500 + i, false);
    }
    global
}

#[tokio::test]
async fn global_inputs_reach_every_task_once_and_their_positions_are_changelogged() {
    let codec = Codec::new(None).unwrap();
    let (topic, _) = input(&codec, 3, 300, 5);
    let global = global_input(&codec);
    let run =
        driver::run_with_globals("probe", &codec, &[&topic], &[&global], outputs(&codec, 3), Probe::for_task)
            .await
            .unwrap();
    let per_key = decoded_outputs(&codec, &run.outputs[0]).await;
    for task in 0..3 {
        for g in 0..4 {
            let key = format!("global/{task}/g{g}");
            let counts = per_key.get(&key).unwrap_or_else(|| {
                panic!(
                    "{key} missing; have {:?}; dead letters {:?}",
                    per_key.keys().filter(|k| k.starts_with("global")).collect::<Vec<_>>(),
                    run.dead_letters.iter().map(|d| &d.reason).collect::<Vec<_>>()
                )
            });
            assert_eq!(counts, &(1..=10).collect::<Vec<i64>>(), "task {task} saw every g{g} record once");
        }
    }
    // The task's own store of global positions went to its changelog: next offsets per
    // global partition, so a restored task resumes where its state stands.
    let names: Vec<&str> = run.changelogs.iter().map(|c| c.name.as_str()).collect();
    assert_eq!(
        names,
        ["probe-counts-changelog", "probe-global-positions-changelog", "probe-stream-time-changelog"]
    );
    let mut task = Task::new(1, Probe::for_task(1), super::Outputs::new(vec![], vec![])).with_globals(1);
    for LogRecord { key, value, .. } in &run.changelogs[1].partitions[1] {
        task.restore(1, key.as_deref().unwrap(), value.as_deref()).unwrap();
    }
    assert_eq!(task.global_position(1, 0), global.partitions[0].len() as i64);
    assert_eq!(task.global_position(1, 1), global.partitions[1].len() as i64);
}

#[tokio::test]
async fn each_global_record_is_decoded_once_for_every_task() {
    // Three tasks read every partition of the global input: its records are decoded once
    // and shared, not once per task (the co-partitioned input once per record, as ever).
    let codec = Codec::new(None).unwrap();
    let (topic, _) = input(&codec, 3, 90, 5);
    let global = global_input(&codec);
    super::probe::DECODED.with(|d| d.borrow_mut().clear());
    let run =
        driver::run_with_globals("probe", &codec, &[&topic], &[&global], outputs(&codec, 3), Probe::for_task)
            .await
            .unwrap();
    let decoded = super::probe::DECODED.with(|d| d.take());
    let per_input = |i: usize| decoded.iter().filter(|d| **d == i).count();
    assert_eq!(per_input(1), 40, "each global record decoded once, not once per task");
    assert_eq!(per_input(0), 90, "each own record decoded once");
    // And every task still saw every global record.
    let per_key = decoded_outputs(&codec, &run.outputs[0]).await;
    for task in 0..3 {
        assert_eq!(per_key[&format!("global/{task}/g0")], (1..=10).collect::<Vec<i64>>(), "task {task}");
    }
}

#[tokio::test]
async fn a_repartition_topic_re_keys_between_two_stages() {
    let codec = Codec::new(None).unwrap();
    let (topic, corrupt) = input(&codec, 3, 600, 40);
    let rekeyed =
        OutputTopics { forward: super::OutputPort::forwarding(&ProbeRekey::OUTPUTS), ..outputs(&codec, 2) };
    let stage1 = driver::run("rekey", &codec, &[&topic], rekeyed, |_| ProbeRekey::new()).await.unwrap();
    let repartition = &stage1.outputs[0];
    // Records now sit on the partition of their new key; the forwarded heartbeats sit on
    // every partition, so stage two's stream time advances even where no record lands.
    for (p, records) in repartition.partitions.iter().enumerate() {
        for r in records.iter().filter(|r| !r.heartbeat) {
            assert_eq!(super::partitioner::partition_for_key(r.key.as_deref().unwrap(), 2), p as i32);
        }
        assert!(records.iter().any(|r| r.heartbeat), "partition {p} got stream time");
    }
    let stage2 =
        driver::run("probe", &codec, &[repartition], outputs(&codec, 2), Probe::for_task).await.unwrap();
    let per_key = decoded_outputs(&codec, &stage2.outputs[0]).await;
    let total: usize = per_key.values().map(Vec::len).sum();
    assert_eq!(total, 600 - corrupt, "every good record counted once after re-keying");
    assert!(per_key.keys().all(|k| k.starts_with("bucket-")), "{:?}", per_key.keys());
    for counts in per_key.values() {
        assert_eq!(counts, &(1..=counts.len() as i64).collect::<Vec<_>>());
    }
}

/// On Kafka a downstream task reads a repartition partition in offset order, the upstream
/// tasks' records interleaved as their transactions committed, and its gate is never closed.
/// Fed that way — here, upstream task by upstream task, the worst interleaving — it releases
/// every record (the input ends with a heartbeat on every partition, which the upstream stage
/// forwards), in the order of the complete merge.
#[tokio::test]
async fn an_open_gate_fed_in_offset_order_releases_every_record_of_a_finished_input() {
    let codec = Codec::new(None).unwrap();
    let (topic, _) = input(&codec, 3, 600, 40);
    let rekeyed =
        OutputTopics { forward: super::OutputPort::forwarding(&ProbeRekey::OUTPUTS), ..outputs(&codec, 3) };
    let stage1 = driver::run("rekey", &codec, &[&topic], rekeyed, |_| ProbeRekey::new()).await.unwrap();
    for (p, records) in stage1.outputs[0].partitions.iter().enumerate() {
        let mut by_task: Vec<(usize, &LogRecord)> = records.iter().enumerate().collect();
        by_task.sort_by_key(|(_, r)| r.writer.task);
        let (mut open, mut closed) = (super::Gate::new([true]), super::Gate::new([true]));
        closed.close();
        let (mut released, mut merged, mut now) = (Vec::new(), Vec::new(), None);
        for (o, r) in &by_task {
            let mark = if r.heartbeat { super::Mark::Forwarded } else { super::Mark::Record };
            closed.push(0, r.writer, (r.timestamp_ms, *o as i64), mark, *o);
            open.push(0, r.writer, (r.timestamp_ms, *o as i64), mark, *o);
            while let Some(rel) = open.pop(now) {
                now = Some(now.unwrap_or(i64::MIN).max(rel.timestamp_ms));
                released.push(rel.item);
            }
        }
        merged.extend(std::iter::from_fn(|| closed.pop(None).map(|r| r.item)));
        assert!(open.is_empty(), "partition {p}: {} of {} records left", open.len(), records.len());
        assert_eq!(released, merged, "partition {p}: the order of the complete merge");
        assert!(
            by_task.iter().map(|(_, r)| r.writer.task).collect::<std::collections::BTreeSet<_>>().len() > 1
        );
    }
}

#[test]
fn a_tracked_input_changelogs_its_position_and_time_so_a_restored_task_drops_what_it_processed() {
    use super::{clock::Writer, processor::RecordMeta, task::LanePosition};
    let meta = |input, offset| RecordMeta {
        input,
        partition: 1,
        offset,
        timestamp_ms: 1_000 + offset,
        writer: Writer::SOLE,
        key: None,
        traceparent: None,
    };
    let task = || Task::new(1, Probe::for_task(1), super::Outputs::new(vec![], vec![]));
    // A stream thread shares input 0 with another stage; input 1 is its own.
    let mut tracked = task().tracking([0]);
    let mut untracked = task();
    for offset in 0..5 {
        for t in [&mut tracked, &mut untracked] {
            t.advance(&meta(0, offset));
            t.advance(&meta(1, offset));
        }
    }
    // A record dead-lettered as ahead of its heartbeat moves the position, not the time:
    // restored as the lane's time, its stamp would let the gate release every other lane
    // without waiting for this one.
    let ahead = RecordMeta { timestamp_ms: 9_000_000_000_000, ..meta(0, 5) };
    tracked.skip(&ahead);
    untracked.skip(&ahead);
    // Restored from its changelog writes, as a task after a crash.
    let restored = |from: &mut Task<Probe>| {
        let mut fresh = task().tracking([0]);
        for (store, (key, value)) in from.take_changes() {
            fresh.restore(store, &key, value.as_deref()).unwrap();
        }
        fresh.lane_positions()
    };
    assert_eq!(
        restored(&mut tracked),
        [LanePosition { input: 0, partition: 1, writer: Writer::SOLE, next_offset: 6, bound: 1_004 }],
        "only the shared input's position is changelogged"
    );
    assert_eq!(restored(&mut untracked), [], "an untracked single-writer input records no position");
}

mod write_limits {
    use super::*;
    use crate::runtime::{Reason, WriteLimits, clock::Writer, processor::RecordMeta};

    fn meta(key: &str, offset: i64, timestamp_ms: i64) -> RecordMeta {
        RecordMeta {
            input: 0,
            partition: 0,
            offset,
            timestamp_ms,
            writer: Writer::SOLE,
            key: Some(key.as_bytes().to_vec()),
            traceparent: None,
        }
    }

    fn task(codec: &Codec, limits: WriteLimits) -> Task<Probe> {
        let out = super::super::Outputs::new(vec![writer(codec, KeyedCount::FULL_NAME)], vec![1]);
        Task::new(0, Probe::new(), out).limiting(limits)
    }

    fn count() -> KeyedCount {
        KeyedCount { key: String::new(), count: 0, input_partition: 0, input_offset: 0 }
    }

    #[test]
    fn a_record_whose_output_kafka_would_not_take_is_refused_and_leaves_no_trace() {
        let codec = Codec::new(None).unwrap();
        let limits = WriteLimits { outputs: vec![("probe-out".into(), 300)], changelog_bytes: 10_000 };
        let mut task = task(&codec, limits);
        task.process(count(), &meta("a", 0, 10)).unwrap();
        let (outputs, changes) = (task.take_outputs().len(), task.take_changes());
        assert_eq!((outputs, changes.len()), (1, 2), "its count, and the stream time");

        let big = "k".repeat(200);
        let e = task.process(count(), &meta(&big, 1, 20)).unwrap_err();
        assert_eq!(e.reason, Reason::OutputTooLarge);
        assert!(e.detail.contains("output to probe-out") && e.detail.contains("300"), "{}", e.detail);
        assert_eq!(task.processor().count(&big), 0, "its count rolled back");
        assert_eq!(task.stream_time(), Some(10), "it moved no stream time");
        assert!(task.take_outputs().is_empty(), "its output dropped");
        assert!(task.take_changes().is_empty(), "nothing to changelog");

        task.process(count(), &meta("a", 2, 30)).unwrap();
        assert_eq!(task.processor().count("a"), 2, "the next record goes on as before");
        assert_eq!(task.stream_time(), Some(30));
    }

    #[test]
    fn a_record_whose_state_a_changelog_would_not_take_is_refused() {
        let codec = Codec::new(None).unwrap();
        let limits = WriteLimits { outputs: vec![("probe-out".into(), 10_000)], changelog_bytes: 150 };
        let mut task = task(&codec, limits);
        task.process(count(), &meta("a", 0, 10)).unwrap();
        let _ = (task.take_outputs(), task.take_changes());
        let big = "k".repeat(160);
        let e = task.process(count(), &meta(&big, 1, 20)).unwrap_err();
        assert_eq!(e.reason, Reason::OutputTooLarge);
        assert!(e.detail.contains("store counts"), "{}", e.detail);
        assert_eq!((task.processor().count(&big), task.stream_time()), (0, Some(10)));
        assert!(task.take_outputs().is_empty() && task.take_changes().is_empty());
        // A key changed before in the same batch keeps its change.
        task.process(count(), &meta("a", 2, 30)).unwrap();
        task.process(count(), &meta(&big, 3, 40)).unwrap_err();
        let changes = task.take_changes();
        assert_eq!(changes.len(), 2, "a's count and the stream time: {changes:?}");
        assert_eq!(task.processor().count("a"), 2);
    }

    #[tokio::test]
    async fn the_driver_dead_letters_a_record_too_large_to_write_and_goes_on() {
        let codec = Codec::new(None).unwrap();
        let w = writer(&codec, KeyedCount::FULL_NAME);
        let mut topic = MemTopic::new("probe-in", 1);
        let big = "k".repeat(1_100_000);
        for (i, key) in ["a", big.as_str(), "b"].into_iter().enumerate() {
            let value = w.encode(&count()).unwrap();
            topic.produce(Some(key.as_bytes()), Some(value), 1_000 + i as i64, false);
        }
        topic.forward_time(10_000);
        let run =
            driver::run("probe", &codec, &[&topic], outputs(&codec, 1), |_| Probe::new()).await.unwrap();
        let letters: Vec<_> = run.dead_letters.iter().map(|d| (d.reason.as_str(), d.source_offset)).collect();
        assert_eq!(letters, [("output_too_large", 1)]);
        let counted = decoded_outputs(&codec, &run.outputs[0]).await;
        assert_eq!(counted.keys().collect::<Vec<_>>(), ["a", "b"]);
    }
}
