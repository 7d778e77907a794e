use super::*;

fn w(task: u32, tasks: u32) -> Writer {
    Writer { task, tasks }
}

fn drain<T>(g: &mut Gate<T>) -> Vec<T> {
    std::iter::from_fn(|| g.pop(None).map(|r| r.item)).collect()
}

#[test]
fn writer_headers_round_trip_and_nonsense_is_refused() {
    assert_eq!(Writer::parse(b"2/3"), Some(w(2, 3)));
    assert_eq!(Writer::parse(w(0, 1).header_value().as_bytes()), Some(Writer::SOLE));
    for bad in [&b"3/3"[..], b"x/3", b"1", b"", b"1/0", b"\xff/2"] {
        assert_eq!(Writer::parse(bad), None, "{bad:?}");
    }
    assert_eq!(Writer::new(5, 3), w(2, 3), "clamped into range");
}

#[test]
fn a_fast_writer_waits_for_the_slow_one() {
    // One lane, two upstream tasks: task 0 has reached 100, task 1 only 10.
    let mut g = Gate::new([true]);
    for (ts, off) in [(50, 0), (100, 1)] {
        g.push(0, w(0, 2), (ts, off), Mark::Record, format!("a{ts}"));
    }
    assert_eq!(g.pop(None), None, "task 1 has not been heard from");
    g.push(0, w(1, 2), (10, 2), Mark::Record, "b10".to_owned());
    assert_eq!(drain(&mut g), ["b10"], "a50 could still be preceded by task 1's next record");
    assert_eq!(g.watermark(), Some(10));
    g.push(0, w(1, 2), (60, 3), Mark::Record, "b60".to_owned());
    assert_eq!(drain(&mut g), ["a50", "b60"], "a100 waits for task 1 to pass it");
    g.push(0, w(1, 2), (120, 4), Mark::Record, "b120".to_owned()); // a heartbeat, say
    assert_eq!(drain(&mut g), ["a100"]);
    assert_eq!(g.watermark(), Some(100));
    assert_eq!(g.len(), 1);
    assert_eq!(g.first_offset(0), Some(4));
}

#[test]
fn equal_timestamps_wait_for_a_lane_that_sorts_first() {
    // Lane 0 last showed 100 and may deliver another record at 100, which sorts before
    // lane 1's record at 100: it must wait.
    let mut g = Gate::new([true, true]);
    g.push(0, Writer::SOLE, (100, 0), Mark::Record, "a");
    assert_eq!(g.pop(None), None);
    g.push(1, Writer::SOLE, (100, 0), Mark::Record, "b");
    assert_eq!(drain(&mut g), ["a"]);
    g.push(0, Writer::SOLE, (100, 1), Mark::Record, "a2");
    g.push(0, Writer::SOLE, (101, 2), Mark::Record, "a3");
    assert_eq!(drain(&mut g), ["a2", "b"], "a3 waits for lane 1 to pass 101");
}

#[test]
fn the_order_released_does_not_depend_on_arrival() {
    // Three writers on one lane plus a source lane, each in timestamp order; pushed in
    // many interleavings, the released order is always the complete merge.
    let streams: Vec<(usize, Writer, Vec<i64>)> = vec![
        (0, w(0, 3), vec![1, 5, 5, 9, 20]),
        (0, w(1, 3), vec![2, 2, 8, 20]),
        (0, w(2, 3), vec![5, 6, 7, 30]),
        (1, Writer::SOLE, vec![0, 5, 10, 15, 20, 25, 30]),
    ];
    let complete = {
        let mut g = Gate::new([true, true]);
        for (lane, writer, ts) in &streams {
            for (i, t) in ts.iter().enumerate() {
                g.push(*lane, *writer, (*t, i as i64), Mark::Record, (*lane, writer.task, *t));
            }
        }
        g.close();
        drain(&mut g)
    };
    let mut seed = 7u64;
    for _ in 0..200 {
        let mut g = Gate::new([true, true]);
        let mut next = vec![0usize; streams.len()];
        let mut out = Vec::new();
        while next.iter().zip(&streams).any(|(n, s)| *n < s.2.len()) {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            let s = (seed % streams.len() as u64) as usize;
            let (lane, writer, ts) = &streams[s];
            if let Some(t) = ts.get(next[s]) {
                g.push(*lane, *writer, (*t, next[s] as i64), Mark::Record, (*lane, writer.task, *t));
                next[s] += 1;
            }
            out.extend(drain(&mut g));
        }
        // On Kafka the input never ends: what is left waits for later records.
        let released = out.len();
        g.close();
        out.extend(drain(&mut g));
        assert_eq!(out, complete, "released {released} before the end");
    }
}

#[test]
fn an_untimed_lane_holds_nothing_back_but_is_merged_in_order() {
    let mut g = Gate::new([true, false]);
    g.push(0, Writer::SOLE, (10, 0), Mark::Record, "t10");
    g.push(0, Writer::SOLE, (30, 1), Mark::Record, "t30");
    assert_eq!(drain(&mut g), ["t10", "t30"], "the untimed lane, empty, blocks nothing");
    g.push(1, Writer::SOLE, (20, 0), Mark::Record, "u20");
    g.push(1, Writer::SOLE, (40, 1), Mark::Record, "u40");
    assert_eq!(drain(&mut g), ["u20"], "u40 waits for the timed lane to pass it");
    g.push(0, Writer::SOLE, (50, 2), Mark::Record, "t50");
    assert_eq!(drain(&mut g), ["u40", "t50"]);
    assert_eq!(g.watermark(), Some(50), "only the timed lane sets the watermark");
}

#[test]
fn a_resumed_writer_drops_what_it_released_before_and_keeps_its_time() {
    let mut g = Gate::new([true]);
    g.resume(0, w(0, 2), 5, 40);
    g.resume(0, w(1, 2), 3, 35);
    assert_eq!(g.watermark(), Some(35));
    assert!(
        !g.push(0, w(0, 2), (30, 4), Mark::Record, "old"),
        "offset 4 < 5 was released before the restore"
    );
    assert!(g.push(0, w(1, 2), (36, 3), Mark::Record, "b36"));
    assert!(g.push(0, w(0, 2), (41, 5), Mark::Record, "a41"));
    assert_eq!(drain(&mut g), ["b36"], "a41 waits: task 1 has shown only 36");
    assert_eq!(g.first_offset(0), Some(5));
}

#[test]
fn a_heartbeat_no_later_than_stream_time_goes_even_on_a_tie() {
    // The last heartbeat of a finite input, on every lane at the same time.
    let mut g = Gate::new([true, true]);
    g.push(0, Writer::SOLE, (100, 0), Mark::Forwarded, "a");
    g.push(1, Writer::SOLE, (100, 0), Mark::Forwarded, "b");
    assert_eq!(g.pop(None).map(|r| r.item), Some("a"));
    assert_eq!(g.pop(Some(99)), None, "b would move stream time: it waits for lane 0");
    assert_eq!(g.pop(Some(100)).map(|r| r.item), Some("b"), "at stream time 100 it changes nothing");
    g.push(1, Writer::SOLE, (100, 1), Mark::Record, "data");
    assert_eq!(g.pop(Some(100)), None, "a record of the same time still waits for lane 0");
}

#[test]
fn a_watcher_heartbeat_promises_nothing_more_of_its_time() {
    // The last heartbeat of a finite input, as the watcher writes it on every partition.
    let mut g = Gate::new([true, true]);
    g.push(0, Writer::SOLE, (100, 0), Mark::Through, "a");
    g.push(1, Writer::SOLE, (100, 0), Mark::Through, "b");
    assert_eq!(drain(&mut g), ["a", "b"], "lane 0 will deliver nothing at 100 any more");
    // A record (not a heartbeat) at the same time would not let lane 1 go first.
    let mut g = Gate::new([true, true]);
    g.push(0, Writer::SOLE, (100, 0), Mark::Record, "a");
    g.push(1, Writer::SOLE, (100, 0), Mark::Through, "b");
    assert_eq!(drain(&mut g), ["a"]);
    assert_eq!(g.watermark(), Some(100));
}

#[test]
fn a_writer_not_heard_from_blocks_a_timed_lane() {
    let mut g = Gate::new([true, true]);
    g.push(0, w(0, 2), (5, 0), Mark::Record, "a");
    g.push(1, Writer::SOLE, (1, 0), Mark::Record, "s");
    assert_eq!(g.pop(None), None, "task 1 of lane 0 could still deliver something earlier");
    assert_eq!(g.watermark(), None, "task 1 of lane 0 has shown nothing");
    g.close();
    assert_eq!(drain(&mut g), ["s", "a"], "a closed gate releases the rest in order");
}

fn drain_verdicts<T>(g: &mut Gate<T>) -> Vec<(T, Verdict)> {
    std::iter::from_fn(|| g.pop(None).map(|r| (r.item, r.verdict))).collect()
}

#[test]
fn a_record_far_ahead_of_the_next_heartbeat_carries_no_time() {
    // Lane 0 starts with a record stamped far ahead (a bad clock), then its good trace.
    let mut g = Gate::new([true, true]).checking([true, true], (100, i64::MAX));
    g.push(0, Writer::SOLE, (3_000, 0), Mark::Record, "bad");
    g.push(0, Writer::SOLE, (10, 1), Mark::Record, "a10");
    g.push(0, Writer::SOLE, (20, 2), Mark::Through, "a-beat20");
    g.push(1, Writer::SOLE, (15, 0), Mark::Record, "b15");
    g.push(1, Writer::SOLE, (20, 1), Mark::Through, "b-beat20");
    assert_eq!(g.pop(None), None, "no heartbeat of lane 0 is confirmed yet: all of it is held");
    assert_eq!(g.first_offset(0), Some(0), "held records are still buffered");
    g.push(0, Writer::SOLE, (30, 3), Mark::Through, "a-beat30");
    g.push(1, Writer::SOLE, (30, 2), Mark::Through, "b-beat30");
    let out = drain_verdicts(&mut g);
    assert_eq!(out[0], ("bad", Verdict::Ahead), "released at once, as no time");
    let rest: Vec<_> = out[1..].iter().map(|(i, v)| (*i, *v)).collect();
    assert_eq!(
        rest,
        [
            ("a10", Verdict::Use),
            ("b15", Verdict::Use),
            ("a-beat20", Verdict::Use),
            ("b-beat20", Verdict::Use),
            ("a-beat30", Verdict::Use),
            ("b-beat30", Verdict::Use)
        ],
        "the good trace in merge order, not behind the bad record"
    );
}

#[test]
fn after_an_outage_records_wait_for_the_next_heartbeats_and_pass() {
    let mut g = Gate::new([true]).checking([true], (100, i64::MAX));
    g.resume_heartbeat(0, Writer::SOLE, 20);
    g.push(0, Writer::SOLE, (25, 0), Mark::Record, "r25");
    assert_eq!(drain_verdicts(&mut g), [("r25", Verdict::Use)], "within the bound: at once");
    g.push(0, Writer::SOLE, (5_000, 1), Mark::Record, "relist");
    g.push(0, Writer::SOLE, (5_010, 2), Mark::Through, "beat");
    assert_eq!(g.pop(None), None, "the first heartbeat after the outage waits for the next");
    assert!(g.holds(0, 0));
    g.push(0, Writer::SOLE, (5_020, 3), Mark::Through, "beat2");
    assert_eq!(
        drain_verdicts(&mut g),
        [("relist", Verdict::Use), ("beat", Verdict::Use), ("beat2", Verdict::Use)]
    );
}

#[test]
fn a_heartbeat_far_ahead_is_judged_by_the_one_after_it() {
    let mut g = Gate::new([true]).checking([true], (100, i64::MAX));
    g.push(0, Writer::SOLE, (20, 0), Mark::Through, "beat20");
    g.push(0, Writer::SOLE, (9_000, 1), Mark::Through, "bogus");
    g.push(0, Writer::SOLE, (25, 2), Mark::Record, "r25");
    g.push(0, Writer::SOLE, (30, 3), Mark::Through, "beat30");
    g.end(0, 0);
    g.close();
    let out = drain_verdicts(&mut g);
    assert!(out.contains(&("bogus", Verdict::Ahead)), "{out:?}");
    assert!(out.contains(&("r25", Verdict::Use)) && out.contains(&("beat30", Verdict::Use)), "{out:?}");
}

#[test]
fn a_void_record_neither_waits_nor_moves_time() {
    let mut g = Gate::new([true, true]).checking([true, true], (100, i64::MAX));
    g.resume_heartbeat(0, Writer::SOLE, 10);
    g.resume_heartbeat(1, Writer::SOLE, 10);
    g.push(0, Writer::SOLE, (20, 0), Mark::Through, "a-beat");
    g.push(1, Writer::SOLE, (20, 0), Mark::Through, "b-beat");
    assert_eq!(drain(&mut g), ["a-beat", "b-beat"]);
    // Garbage stamped far ahead on lane 0, then lane 0's next record.
    g.push(0, Writer::SOLE, (1_000_000, 1), Mark::Void, "garbage");
    g.push(0, Writer::SOLE, (25, 2), Mark::Record, "a25");
    assert_eq!(drain(&mut g), ["garbage"], "sorted at lane 0's time so far, not its own");
    assert_eq!(g.watermark(), Some(21), "and it showed no time");
    g.push(1, Writer::SOLE, (26, 1), Mark::Record, "b26");
    assert_eq!(drain(&mut g), ["a25"]);
}

#[test]
fn a_void_record_after_the_last_heartbeats_is_not_held_by_them() {
    // The end of a finite input: heartbeats at 20 on both lanes, then garbage on lane 1.
    let mut g = Gate::new([true, true]).checking([true, true], (100, i64::MAX));
    g.resume_heartbeat(0, Writer::SOLE, 10);
    g.resume_heartbeat(1, Writer::SOLE, 10);
    g.push(0, Writer::SOLE, (20, 0), Mark::Through, "a-beat");
    g.push(1, Writer::SOLE, (20, 0), Mark::Through, "b-beat");
    g.push(1, Writer::SOLE, (5, 1), Mark::Void, "garbage");
    assert_eq!(drain(&mut g), ["a-beat", "b-beat", "garbage"], "lane 0 has promised nothing more at 20");
}

#[test]
fn a_drained_sub_lane_gives_its_queue_back() {
    // A burst over a backlog grows a sub-lane's queue; once it drains, the capacity goes
    // (a VecDeque keeps it otherwise, for the rest of the run).
    let mut g = Gate::new([true]);
    for off in 0..5_000 {
        g.push(0, Writer::SOLE, (100 + off, off), Mark::Record, ());
    }
    assert!(g.queue_capacity(0, 0) >= 5_000);
    g.close();
    assert_eq!(drain(&mut g).len(), 5_000);
    assert_eq!(g.queue_capacity(0, 0), 0, "the emptied queue was freed");
    // A small queue keeps its capacity: no allocation per record at a steady trickle.
    g.push(0, Writer::SOLE, (10_000, 5_000), Mark::Record, ());
    let small = g.queue_capacity(0, 0);
    assert_eq!(drain(&mut g).len(), 1);
    assert_eq!(g.queue_capacity(0, 0), small);
}

#[test]
fn a_record_far_behind_the_last_heartbeat_carries_no_time() {
    let mut g = Gate::new([true]).checking([true], (100, 50));
    g.resume_heartbeat(0, Writer::SOLE, 1_000);
    g.push(0, Writer::SOLE, (950, 0), Mark::Record, "at-the-bound");
    g.push(0, Writer::SOLE, (949, 1), Mark::Record, "1990");
    g.push(0, Writer::SOLE, (1_010, 2), Mark::Record, "r1010");
    assert_eq!(
        drain_verdicts(&mut g),
        [("at-the-bound", Verdict::Use), ("1990", Verdict::Behind), ("r1010", Verdict::Use)]
    );
    assert_eq!(g.watermark(), Some(1_010), "the past moved nothing back");
}

#[test]
fn a_record_held_for_a_heartbeat_is_judged_behind_the_one_before_it() {
    let mut g = Gate::new([true]).checking([true], (100, 50));
    g.resume_heartbeat(0, Writer::SOLE, 1_000);
    g.push(0, Writer::SOLE, (1_500, 0), Mark::Record, "ahead-wait");
    g.push(0, Writer::SOLE, (10, 1), Mark::Record, "1990");
    g.push(0, Writer::SOLE, (1_520, 2), Mark::Through, "beat1520");
    assert_eq!(drain_verdicts(&mut g), [], "a heartbeat far ahead waits for the one after it");
    g.push(0, Writer::SOLE, (1_530, 3), Mark::Through, "beat1530");
    assert_eq!(
        drain_verdicts(&mut g),
        [
            ("ahead-wait", Verdict::Use),
            ("1990", Verdict::Behind),
            ("beat1520", Verdict::Use),
            ("beat1530", Verdict::Use)
        ]
    );
}

#[test]
fn a_heartbeat_far_behind_is_judged_and_judges_nothing() {
    let mut g = Gate::new([true]).checking([true], (100, 50));
    g.resume_heartbeat(0, Writer::SOLE, 1_000);
    g.push(0, Writer::SOLE, (1_090, 0), Mark::Record, "r1090");
    g.push(0, Writer::SOLE, (1_200, 1), Mark::Record, "r1200");
    g.push(0, Writer::SOLE, (10, 2), Mark::Through, "old-beat");
    assert_eq!(drain_verdicts(&mut g), [("r1090", Verdict::Use)], "r1200 waits for a plausible heartbeat");
    g.push(0, Writer::SOLE, (1_150, 3), Mark::Through, "beat1150");
    g.push(0, Writer::SOLE, (1_160, 4), Mark::Through, "beat1160");
    assert_eq!(
        drain_verdicts(&mut g),
        [
            ("r1200", Verdict::Use),
            ("old-beat", Verdict::Behind),
            ("beat1150", Verdict::Use),
            ("beat1160", Verdict::Use)
        ]
    );
}

#[test]
fn without_a_behind_bound_the_past_is_used() {
    let mut g = Gate::new([true]).checking([true], (100, i64::MAX));
    g.resume_heartbeat(0, Writer::SOLE, 1_000);
    g.push(0, Writer::SOLE, (10, 0), Mark::Record, "old");
    assert_eq!(drain_verdicts(&mut g), [("old", Verdict::Use)]);
}

#[test]
fn before_the_first_heartbeat_the_past_is_judged_by_the_heartbeat_that_accepts_it() {
    let mut g = Gate::new([true]).checking([true], (100, 50));
    g.push(0, Writer::SOLE, (10, 0), Mark::Record, "1990");
    g.push(0, Writer::SOLE, (20, 1), Mark::Through, "beat-1990");
    g.push(0, Writer::SOLE, (990, 2), Mark::Record, "r990");
    g.push(0, Writer::SOLE, (1_000, 3), Mark::Through, "beat1000");
    g.push(0, Writer::SOLE, (1_010, 4), Mark::Through, "beat1010");
    assert_eq!(
        drain_verdicts(&mut g),
        [
            ("1990", Verdict::Behind),
            ("beat-1990", Verdict::Behind),
            ("r990", Verdict::Use),
            ("beat1000", Verdict::Use),
            ("beat1010", Verdict::Use)
        ]
    );
    assert_eq!(g.watermark(), Some(1_011), "past a heartbeat: nothing more at its time");
}

/// A writer's output as it wrote it: per partition, in band (records and heartbeats in
/// order), and out of band (stamped records per partition, beats on the side).
struct Written {
    in_band: Vec<Vec<String>>,
    records: Vec<Vec<(Sequence, i64, String)>>,
    beats: Vec<Beat>,
}

/// A writer over `partitions` partitions making `n` random moves from `seed`: a record to a
/// partition, or (as its stream time moves on) a beat.
fn written(seed: u64, partitions: usize, n: usize) -> Written {
    let mut rng = seed.max(1);
    let mut next = || {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        rng
    };
    let mut stamper = Stamper::new(partitions as i32);
    let mut out = Written {
        in_band: vec![Vec::new(); partitions],
        records: vec![Vec::new(); partitions],
        beats: Vec::new(),
    };
    let mut now = 1_000;
    for _ in 0..n {
        let roll = next() % 10;
        if roll < 3 {
            now += 1 + (next() % 3) as i64;
            let beat = stamper.beat(now);
            for lane in &mut out.in_band {
                lane.push(format!("beat@{now}"));
            }
            out.beats.push(beat);
        } else {
            let p = (next() % partitions as u64) as usize;
            let sequence = stamper.stamp(p as i32);
            let name = format!("p{p}#{}", sequence.seq);
            out.in_band[p].push(name.clone());
            out.records[p].push((sequence, now, name));
        }
    }
    out
}

/// Pushes partition `p` of `w` into a one-lane gate, records and beats interleaved as
/// `seed` says, draining after every push; returns what was released, in order.
fn stitched(w: &Written, p: usize, seed: u64, resume: Option<(u64, Option<i64>)>) -> Vec<String> {
    let mut g = Gate::new([true]);
    if let Some((seq, beat)) = resume {
        g.resume_sequence(0, Writer::SOLE, seq, beat);
    }
    let (mut r, mut b, mut roll) = (0, 0, seed.max(1));
    let mut released = Vec::new();
    while r < w.records[p].len() || b < w.beats.len() {
        roll = roll.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        let take_record = b == w.beats.len() || (r < w.records[p].len() && (roll >> 33) % 2 == 0);
        if take_record {
            let (sequence, ts, name) = &w.records[p][r];
            g.push_sequenced(0, Writer::SOLE, (*ts, r as i64), (*sequence, Mark::Record), name.clone());
            r += 1;
        } else {
            let beat = &w.beats[b];
            g.push_beat(0, Writer::SOLE, beat.at_ms, beat.counts[p], format!("beat@{}", beat.at_ms));
            b += 1;
        }
        released.extend(drain(&mut g));
    }
    assert!(g.is_empty(), "everything written was released: {} left", g.len());
    released
}

#[test]
fn beats_out_of_band_are_put_back_where_their_writer_wrote_them() {
    for seed in 1..40 {
        let w = written(seed, 3, 60);
        for p in 0..3 {
            for order in [seed, seed * 7 + 3, seed * 31 + 11] {
                assert_eq!(
                    stitched(&w, p, order, None),
                    w.in_band[p],
                    "seed {seed}, partition {p}, order {order}"
                );
            }
        }
    }
}

#[test]
fn a_restored_lane_lets_in_only_what_it_had_not_released() {
    let w = written(5, 2, 80);
    let full = &w.in_band[0];
    // Released up to the middle: the last record and beat before it.
    let cut = full.len() / 2;
    let seq =
        full[..cut].iter().filter_map(|n| n.strip_prefix("p0#")).map(|s| s.parse::<u64>().unwrap()).max();
    let beat =
        full[..cut].iter().filter_map(|n| n.strip_prefix("beat@")).map(|s| s.parse::<i64>().unwrap()).max();
    let again = stitched(&w, 0, 9, Some((seq.unwrap_or(0), beat)));
    assert_eq!(again, full[cut..], "read again from the start, the restored lane releases only the rest");
}

#[test]
fn a_record_waits_for_the_beat_before_it_and_a_beat_for_the_records_before_it() {
    let mut g = Gate::new([true]);
    let after = |seq, after_ms| (Sequence { seq, after_ms }, Mark::Record);
    // Record 1 follows a beat at 100 not read yet.
    g.push_sequenced(0, Writer::SOLE, (100, 0), after(1, Some(100)), "r1");
    assert_eq!(drain(&mut g), Vec::<&str>::new(), "the beat before it is missing");
    assert!(g.awaits_beat(0));
    assert_eq!(g.first_offset(0), Some(0), "the waiting record holds the committed offset");
    // A beat after record 2 arrives before record 2 does.
    g.push_beat(0, Writer::SOLE, 100, 0, "beat@100");
    g.push_beat(0, Writer::SOLE, 105, 2, "beat@105");
    assert_eq!(drain(&mut g), ["beat@100", "r1"], "beat@105 waits for record 2");
    assert!(!g.awaits_beat(0));
    g.push_sequenced(0, Writer::SOLE, (103, 1), after(2, Some(100)), "r2");
    assert_eq!(drain(&mut g), ["r2", "beat@105"]);
    let header = Sequence { seq: 2, after_ms: Some(100) }.header_value();
    assert_eq!(Sequence::parse(header.as_bytes()), Some(Sequence { seq: 2, after_ms: Some(100) }));
    assert_eq!(Sequence::parse(b"7"), Some(Sequence { seq: 7, after_ms: None }));
    for bad in [&b"0"[..], b"", b"x", b"3@", b"3@x", b"-1"] {
        assert_eq!(Sequence::parse(bad), None, "{bad:?}");
    }
}
