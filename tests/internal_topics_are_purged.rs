//! Issue 47: the broker's disk is bounded by the lag, not by the days a deployment has run.
//!
//! The repartition topics between stages (`[runs]` → `[journal]`, `[sessions]` →
//! `[session-owners]`) are read by nothing but the application's own group, so `process`
//! deletes their records below the offset the group committed (docs/RUNTIME.md, "Purging
//! internal topics"). Here one instance takes six hours of the small fleet until it stops
//! itself inside a transaction: the repartition topics' start offsets must have moved up to
//! (never past) the committed offsets. It is SIGKILLed there, a new instance restores every
//! task from the changelogs and finishes the trace, purging on to the end, and every output
//! must still equal `kubefacts replay --finish`: nothing a restore needs was purged.

#[cfg(not(feature = "failpoints"))]
compile_error!(
    "this test stops an instance at a failpoint: build it with `--features failpoints` (./scripts/test.sh does)"
);

mod support;

use std::time::{Duration, Instant};

use kubefacts::codec::Codec;
use rdkafka::consumer::Consumer;
use support::{
    Processes, Scratch, client_config, default_stages, infra, is_stopped, outputs::compare_outputs,
    simulate_small, wait_all_committed,
};

const PARTITIONS: &str = "3";

/// Per partition of `topic`: (start offset, end offset).
fn bounds(bootstrap: &str, topic: &str) -> Vec<(i64, i64)> {
    let c: rdkafka::consumer::BaseConsumer = client_config(bootstrap).create().unwrap();
    (0..3).map(|p| c.fetch_watermarks(topic, p, Duration::from_secs(5)).unwrap()).collect()
}

/// Per partition of `topic`: the offset group `group` has committed (0: none). Asked
/// read_uncommitted: a read_committed client asks for stable offsets only, which the broker
/// withholds while the stopped instance's transaction (with its offsets) stays open.
fn committed(bootstrap: &str, group: &str, topic: &str) -> Vec<i64> {
    let c: rdkafka::consumer::BaseConsumer = client_config(bootstrap)
        .set("group.id", group)
        .set("isolation.level", "read_uncommitted")
        .set("enable.auto.commit", "false")
        .create()
        .unwrap();
    let mut tpl = rdkafka::TopicPartitionList::new();
    (0..3).for_each(|p| {
        tpl.add_partition(topic, p);
    });
    let got = c.committed_offsets(tpl, Duration::from_secs(10)).unwrap();
    (got.elements().iter())
        .map(|e| match e.offset() {
            rdkafka::Offset::Offset(o) => o,
            _ => 0,
        })
        .collect()
}

#[test]
fn repartition_topics_are_deleted_up_to_the_committed_offset_and_a_restore_still_equals_the_replay() {
    let infra = infra();
    let bootstrap = infra.bootstrap.as_str();
    // Small transactions and a purge after every 200 ms of them, so the first instance
    // purges many times before its failpoint.
    let scratch = Scratch::new("purge", "purge_interval_ms = 200\nmax_batch_records = 100\n");
    let (dir, prefix, config) = (scratch.path(), scratch.prefix.clone(), scratch.config_arg());
    let trace = dir.join("trace.jsonl");
    simulate_small("6", "47", &trace, &[]);
    let replay_dir = dir.join("replay");
    support::publish_and_replay(
        bootstrap,
        PARTITIONS,
        trace.to_str().unwrap(),
        config,
        replay_dir.to_str().unwrap(),
    );

    let stages = default_stages(&prefix, &scratch.app);
    let processes = Processes::new(dir.join("logs"), bootstrap, &scratch.config);
    // `a` stops itself inside its 150th transaction (outputs, changelogs and offsets sent,
    // the commit not), as a frozen VM would, and is SIGKILLed there.
    let mut a = processes.start("a", &["--failpoint", "before-commit:150"]);
    let deadline = Instant::now() + Duration::from_secs(180);
    while !is_stopped(a.id()) {
        assert!(a.try_wait().unwrap().is_none(), "a exited before its failpoint\n{}", processes.tails());
        assert!(Instant::now() < deadline, "a never reached its failpoint\n{}", processes.tails());
        std::thread::sleep(Duration::from_millis(20));
    }

    // What `a` committed of the repartition topics before it stopped is deleted, and
    // nothing past it: its open transaction's records are still to be read.
    let internal = [
        format!("{prefix}internal.journal-repartition.v1"),
        format!("{prefix}internal.session-owner-repartition.v1"),
    ];
    let (mut purged, mut committed_internal) = (0, 0);
    for topic in &internal {
        let committed = committed(bootstrap, &scratch.app, topic);
        for (p, (start, _)) in bounds(bootstrap, topic).into_iter().enumerate() {
            assert!(
                start <= committed[p],
                "{topic}[{p}] deleted past the committed {}: {start}",
                committed[p]
            );
            // The last interval's commits may not be deleted yet; the ones before are.
            purged += start;
            committed_internal += committed[p];
        }
    }
    println!(
        "purged {purged} of the {committed_internal} repartition records committed before the failpoint"
    );
    assert!(
        committed_internal > 200 && purged * 2 > committed_internal,
        "purged {purged} of {committed_internal} committed repartition records\n{}",
        processes.tails()
    );
    // Source topics are other readers' business: nothing of them is deleted.
    for (p, (start, _)) in bounds(bootstrap, &format!("{prefix}jobs.v1")).into_iter().enumerate() {
        assert_eq!(start, 0, "jobs.v1[{p}] was purged");
    }

    // A new instance restores every task after the purge and finishes the day.
    a.kill().unwrap();
    a.wait().unwrap();
    let mut b = processes.start("b", &[]);
    wait_all_committed(bootstrap, &stages, &mut [("b", &mut b)], 180, &|| processes.tails());
    // And keeps purging: everything committed is deleted within a few intervals.
    let deadline = Instant::now() + Duration::from_secs(20);
    for topic in &internal {
        for (p, (start, end)) in bounds(bootstrap, topic).into_iter().enumerate() {
            let mut start = start;
            while start < end {
                assert!(Instant::now() < deadline, "{topic}[{p}] still starts at {start} of {end}");
                std::thread::sleep(Duration::from_millis(200));
                start = bounds(bootstrap, topic)[p].0;
            }
        }
    }
    let codec = Codec::new(None).unwrap();
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let (failures, compared) = compare_outputs(&rt, &codec, bootstrap, &replay_dir, &prefix, |_, _| {});
    println!("compared with the replay: {}", compared.join("; "));
    assert!(
        failures.is_empty(),
        "Kafka != replay after a purge and a restore:\n{}\n{}",
        failures.join("\n"),
        processes.tails()
    );
}
