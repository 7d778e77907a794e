//! Issue 47: `kubefacts publish --input -` (a live watch piped in) sends what it has read
//! at once. It used to hold observations until 1 024 had been read: at live pace a record
//! became readable up to 114 s after its time, and a short run published nothing at all.
//!
//! Here a few hundred trace entries go into its standard input, which then stays open, as a
//! live watch's would: every observation they make must be readable on the input topics
//! within seconds, while `publish` still waits for more.

mod support;

use std::{
    io::Write,
    process::{Command, Stdio},
    time::{Duration, Instant},
};

use support::{KillOnDrop, Scratch, infra, read_topic_so_far, simulate_small};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn what_a_pipe_brings_is_published_before_the_pipe_closes() {
    let infra = infra();
    let scratch = Scratch::new("stream", "");
    let trace = scratch.path().join("trace.jsonl");
    simulate_small("1", "3", &trace, &[]);
    let text = std::fs::read_to_string(&trace).unwrap();
    let head: Vec<&str> = text.lines().take(300).collect();

    let mut publish = KillOnDrop(
        Command::new(env!("CARGO_BIN_EXE_kubefacts"))
            .args(["publish", "--create-topics", "--partitions", "3", "--bootstrap", &infra.bootstrap])
            .args(["--input", "-", "--config", scratch.config_arg()])
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(scratch.path().join("publish.log")).unwrap())
            .spawn()
            .unwrap(),
    );
    let mut stdin = publish.stdin.take().unwrap();
    stdin.write_all((head.join("\n") + "\n").as_bytes()).unwrap();
    stdin.flush().unwrap();

    // What those entries make, as `replay` of the same entries counts it.
    let head_file = scratch.path().join("head.jsonl");
    std::fs::write(&head_file, head.join("\n") + "\n").unwrap();
    let replay_dir = scratch.path().join("replay");
    support::kubefacts_ok(&[
        "replay",
        "--partitions",
        "3",
        "--input",
        head_file.to_str().unwrap(),
        "--output",
        replay_dir.to_str().unwrap(),
        "--config",
        scratch.config_arg(),
    ]);
    let topics = ["jobs.v1", "pods.v1", "cronjobs.v1", "leases.v1"];
    let expected: usize = topics
        .iter()
        .map(|t| {
            std::fs::read_to_string(replay_dir.join(format!("{}{t}.jsonl", scratch.prefix)))
                .map_or(0, |s| s.lines().count())
        })
        .sum();
    assert!(expected > 100, "{expected} observations in the first 300 entries");

    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let mut got = 0;
        for t in topics {
            got += read_topic_so_far(&infra.bootstrap, &format!("{}{t}", scratch.prefix)).await.len();
        }
        assert!(publish.try_wait().unwrap().is_none(), "publish exited with its input still open");
        if got >= expected {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "{got} of {expected} observations readable 10 s after they were piped in, the pipe still open\n{}",
            support::logs_in(scratch.path())
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    // Closing the pipe ends it cleanly.
    drop(stdin);
    let status = publish.wait().unwrap();
    assert!(status.success(), "publish: {status}\n{}", support::logs_in(scratch.path()));
}
