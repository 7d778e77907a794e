use super::*;

fn read_all(text: &str) -> Vec<Result<MinimalEntry, TraceError>> {
    read(text.as_bytes()).collect()
}

const JOB_EVENT: &str = r#"{"type":"MODIFIED","observed_at":"2026-11-29T10:00:00.250Z","object":{"apiVersion":"batch/v1","kind":"Job","metadata":{"name":"nightly-29012345","namespace":"etl","uid":"6f1c9a52-3d2e-4b8e-9a51-0c7f7d3f2a10","ownerReferences":[{"apiVersion":"batch/v1","kind":"CronJob","name":"nightly","uid":"0b7e4d8c-1f2a-4c3b-8d9e-5a6b7c8d9e0f","controller":true,"blockOwnerDeletion":true}]},"spec":{"backoffLimit":2,"completions":1,"parallelism":1,"template":{"spec":{"restartPolicy":"Never","containers":[{"name":"main","image":"etl:1"}]}}},"status":{"failed":3,"startTime":"2026-11-29T09:58:00Z","conditions":[{"type":"FailureTarget","status":"True","reason":"BackoffLimitExceeded","message":"Job has reached the specified backoff limit","lastTransitionTime":"2026-11-29T09:59:58Z","lastProbeTime":"2026-11-29T09:59:58Z"},{"type":"Failed","status":"True","reason":"BackoffLimitExceeded","message":"Job has reached the specified backoff limit","lastTransitionTime":"2026-11-29T09:59:59Z","lastProbeTime":"2026-11-29T09:59:59Z"}],"uncountedTerminatedPods":{}}}}"#;

#[test]
fn reads_a_kubectl_watch_event() {
    let entries = read_all(JOB_EVENT);
    let [Ok(entry)] = entries.as_slice() else { panic!("{entries:?}") };
    assert_eq!(entry.observed_at_ms, 1_795_946_400_250);
    let TraceEvent::Applied(MinimalObject::Job(job)) = &entry.event else { panic!("{entry:?}") };
    assert_eq!(job.metadata.name.as_deref(), Some("nightly-29012345"));
    let conditions = job.status.as_ref().unwrap().conditions.as_ref().unwrap();
    assert_eq!(conditions[1].type_, "Failed");
}

#[test]
fn reads_pretty_printed_bare_objects_and_lists() {
    let text = r#"{
  "apiVersion": "v1", "kind": "Namespace", "observed_at": 1000,
  "metadata": {"name": "etl", "annotations": {"kubefacts.io/exclude": "true"}}
}
{"apiVersion":"v1","kind":"List","observed_at":2000,"items":[
  {"apiVersion":"v1","kind":"Namespace","metadata":{"name":"a"}},
  {"apiVersion":"v1","kind":"Namespace","metadata":{"name":"b"}}]}
"#;
    let entries: Vec<_> = read_all(text).into_iter().map(Result::unwrap).collect();
    let names: Vec<_> = entries
        .iter()
        .map(|e| match &e.event {
            TraceEvent::Applied(MinimalObject::Namespace(ns)) => {
                (e.observed_at_ms, ns.metadata.name.clone().unwrap())
            }
            other => panic!("{other:?}"),
        })
        .collect();
    assert_eq!(names, [(1000, "etl".into()), (2000, "a".into()), (2000, "b".into())]);
}

#[test]
fn reads_kubefacts_lines() {
    let text = r#"{"type":"HEARTBEAT","observed_at":5}
{"type":"SNAPSHOT_BEGIN","observed_at":6,"epoch":2}
{"type":"SNAPSHOT_END","observed_at":7,"epoch":2}
{"type":"SESSION","observed_at":8,"session":{"session_id":"s-1","state":"PAUSED_FOREVER","pod":{"namespace":"agents","name":"s-1"},"owner":"team-a"}}
"#;
    let events: Vec<_> = read_all(text).into_iter().map(|e| e.unwrap().event).collect();
    assert_eq!(events[0], TraceEvent::Heartbeat);
    assert_eq!(events[1], TraceEvent::SnapshotBegin { epoch: 2, kinds: None });
    assert_eq!(events[2], TraceEvent::SnapshotEnd { epoch: 2, kinds: None });
    let TraceEvent::Session(s) = &events[3] else { panic!() };
    assert_eq!(s.state, SessionState::Unknown, "unknown future states map to UNKNOWN");
}

#[test]
fn snapshot_markers_may_name_the_kinds_relisted() {
    let text = r#"{"type":"SNAPSHOT_BEGIN","observed_at":6,"epoch":3,"kinds":["Pod"]}
{"type":"SNAPSHOT_END","observed_at":7,"epoch":3,"kinds":["Secret"]}
"#;
    let entries = read_all(text);
    let first = entries[0].as_ref().unwrap();
    assert_eq!(first.event, TraceEvent::SnapshotBegin { epoch: 3, kinds: Some(vec!["Pod".into()]) });
    let TraceEvent::SnapshotBegin { epoch, kinds } = first.event.clone() else { panic!("{first:?}") };
    let written: TraceEntry = TraceEntry {
        observed_at_ms: first.observed_at_ms,
        event: TraceEvent::SnapshotBegin { epoch, kinds },
    };
    let again = crate::trace::parse_value(1, written.to_json());
    assert_eq!(again[0].as_ref().unwrap(), first, "kinds survive writing and reading");
    let e = entries[1].as_ref().unwrap_err().to_string();
    assert!(e.contains("kinds must name"), "{e}");
}

#[test]
fn bad_values_are_reported_and_reading_goes_on() {
    let text = r#"{"type":"ADDED","object":{"apiVersion":"v1","kind":"Pod","metadata":{"name":"p"}}}
{"type":"ADDED","observed_at":"yesterday","object":{}}
{"type":"ADDED","observed_at":1,"object":{"apiVersion":"v1","kind":"Secret","metadata":{"name":"s"}}}
{"type":"BOOKMARK","observed_at":1}
{"type":"SNAPSHOT_END","observed_at":1}
{"type":"ADDED","observed_at":1,"object":{"apiVersion":"batch/v1","kind":"Job","spec":"not a spec"}}
{"type":"HEARTBEAT","observed_at":9}
{"broken"
{"type":"HEARTBEAT","observed_at":10}
"#;
    let results = read_all(text);
    let reasons: Vec<_> =
        results.iter().map(|r| r.as_ref().map_err(TraceError::reason).map(|e| e.observed_at_ms)).collect();
    assert_eq!(
        reasons,
        [
            Err("observed_at"),
            Err("observed_at"),
            Err("unsupported_kind"),
            Err("unknown_type"),
            Err("missing_field"),
            Err("invalid_object"),
            Ok(9),
            Err("syntax"),
            Ok(10),
        ]
    );
    assert!(results[0].as_ref().unwrap_err().to_string().starts_with("line 1: "));
    assert_eq!(results[7].as_ref().unwrap_err().to_string(), "lines 8..=8: a JSON value that never ends");
}

#[test]
fn every_line_is_read_and_each_bad_one_named() {
    let mut text = Vec::new();
    text.extend_from_slice(b"{\"type\":\"HEARTBEAT\",\"observed_at\":1}\n");
    text.extend_from_slice(b"{\"type\":\"HEARTBEAT\",\"observed_at\":\xff}\n");
    text.extend_from_slice(b"{\"type\": nope}\n");
    text.extend_from_slice(b"{\"type\":42,\"observed_at\":3}\n");
    text.extend_from_slice(b"{\"type\":\"HEARTBEAT\",\"observed_at\":-99999999999999999}\n");
    text.extend_from_slice(b"{\"type\":\"SNAPSHOT_BEGIN\",\"observed_at\":5,\"epoch\":\"two\"}\n");
    text.extend_from_slice(b"[1, 2]\n");
    text.extend_from_slice(b"{\n  \"type\": \"HEARTBEAT\",\n  \"observed_at\": 7\n}\n");
    text.extend_from_slice(b"{\n  \"type\": \"HEARTBEAT\" \"observed_at\": 8\n}\n");
    text.extend_from_slice(b"{\"type\":\"HEARTBEAT\",\"observed_at\":9}\n");
    let results: Vec<_> = read(text.as_slice()).collect();
    let shown: Vec<String> = results
        .iter()
        .map(|r| match r {
            Ok(e) => format!("ok {}", e.observed_at_ms),
            Err(e) => e.to_string(),
        })
        .collect();
    assert_eq!(shown[0], "ok 1");
    assert_eq!(shown[1], "line 2: not UTF-8 text (first invalid byte at column 35)");
    assert!(shown[2].starts_with("line 3: invalid JSON: expected ident at column 11"), "{}", shown[2]);
    assert_eq!(shown[3], "line 4: field type: expected a string, found the number 42");
    assert_eq!(
        shown[4],
        "line 5: field observed_at: -99999999999999999 ms is outside 1970-01-01T00:00:00Z..=9999-12-31T23:59:59.999Z (epoch milliseconds)"
    );
    assert_eq!(shown[5], "line 6: field epoch: expected an integer, found the string \"two\"");
    assert_eq!(shown[6], "line 7: field (value): expected an object, found a list");
    assert_eq!(shown[7], "ok 7", "a pretty-printed value over four lines");
    assert!(shown[8].starts_with("line 13: invalid JSON: expected `,` or `}`"), "{}", shown[8]);
    assert_eq!(shown[9], "ok 9", "reading goes on after a broken pretty-printed value");
    assert_eq!(shown.len(), 10);
}

#[test]
fn written_entries_read_back_identically() {
    // Whole objects, as `simulate` writes them.
    let event: Json = serde_json::from_str(JOB_EVENT).unwrap();
    let job: Job = serde_json::from_value(event["object"].clone()).unwrap();
    let mut entries = vec![TraceEntry {
        observed_at_ms: 1_795_946_400_250,
        event: TraceEvent::Applied(KubeObject::Job(Box::new(job))),
    }];
    entries
        .push(TraceEntry { observed_at_ms: 42, event: TraceEvent::SnapshotBegin { epoch: 3, kinds: None } });
    entries.push(TraceEntry {
        observed_at_ms: 43,
        event: TraceEvent::Session(SessionRecord {
            session_id: "s".into(),
            state: SessionState::WaitingForInput,
            pod: SessionPod { namespace: "n".into(), name: "p".into(), uid: None },
            owner: "o".into(),
            updated_at_ms: Some(40),
        }),
    });
    let mut out = Vec::new();
    for e in &entries {
        e.write_line(&mut out).unwrap();
    }
    let back: Vec<_> = read(out.as_slice()).map(Result::unwrap).collect();
    let entries: Vec<MinimalEntry> = entries.into_iter().map(Into::into).collect();
    assert_eq!(back, entries);
    assert_eq!(back[0], read_all(JOB_EVENT).remove(0).unwrap(), "written as read");
}

#[test]
fn a_value_on_its_own_line_reads_as_it_does_among_others() {
    // Each value on its own line takes the one-line path; indented by a space, the same
    // values take the general one (a value starting past the first column). Entries,
    // errors and the lines they name must not tell the two apart.
    let lines = [
        JOB_EVENT,
        r#"{"type":"HEARTBEAT","observed_at":"2026-11-29T10:00:01Z"}"#,
        r#"{"type":"SNAPSHOT_BEGIN","observed_at":6,"epoch":2,"kinds":["Job"]}"#,
        r#"{"apiVersion":"v1","kind":"List","observed_at":2000,"items":[{"apiVersion":"v1","kind":"Namespace","metadata":{"name":"a"}}]}"#,
        r#"{"type":"HEARTBEAT","observed_at":7} {"type":"HEARTBEAT","observed_at":8}"#,
        r#"{"type":"ADDED","observed_at":9,"object":[]}"#,
        r#"{"type":"HEARTBEAT","observed_at":1.5}"#,
        r#"{"type":"HEARTBEAT","observed_at":-1}"#,
        r#"{"type":"SESSION","observed_at":8,"session":{"session_id":"s-1","state":"PAUSED","pod":{"namespace":"agents","name":"s-1"},"owner":"team-a"}}"#,
        r#"{"type":"DELETED","observed_at":10,"object":{"metadata":{"name":"b"},"kind":"Namespace","apiVersion":"v1"}}"#,
        r#"{"type":"ADDED","observed_at":11,"object":{"apiVersion":"v1","kind":"Secret","metadata":{"name":"s"}}}"#,
        r#"{"type":"ADDED","observed_at":12,"object":{"apiVersion":"batch/v1","kind":"Job","metadata":{"name":5}}}"#,
    ];
    let read_lines = |indent: &str| {
        let text: String = lines.iter().map(|l| format!("{indent}{l}\n")).collect();
        let reader = read(text.as_bytes());
        let line = reader.entry_line();
        let mut out = Vec::new();
        for entry in reader {
            out.push((line.get(), entry.map_err(|e| e.to_string())));
        }
        out
    };
    let (alone, among) = (read_lines(""), read_lines(" "));
    assert_eq!(alone.len(), 13, "{alone:#?}");
    assert_eq!(alone.iter().filter(|(_, e)| e.is_err()).count(), 5, "{alone:#?}");
    assert_eq!(alone, among);
}
