//! The schema registry behind TLS (a private CA) and basic auth, as production registries
//! run: `--registry-ca-file`, `--registry-username` and `--registry-password-file` reach it;
//! without the CA or with a wrong password a verb fails with a clear error, and the
//! password never reaches a log line. The https front is `tests/python/registry_tls_proxy.py`
//! over the test registry, with the certificate `scripts/infra/cluster.sh` made.

mod support;

use std::{
    io::{BufRead, BufReader},
    path::PathBuf,
    process::{Child, Command, Stdio},
};

use support::{infra, repo_path, unique_name};

/// The https front, killed when dropped.
struct Front {
    child: Child,
    url: String,
}

impl Drop for Front {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn tls_dir() -> PathBuf {
    let dir = std::env::var("KUBEFACTS_CLUSTER_DIR").unwrap_or_else(|_| {
        panic!(
            "KUBEFACTS_CLUSTER_DIR is not set: this test uses the certificates of the three-broker cluster. \
             Run ./scripts/test.sh, or scripts/infra/cluster.sh up && source .cache/run/cluster/env."
        )
    });
    PathBuf::from(dir).join("tls")
}

fn front(password_file: &std::path::Path) -> Front {
    let infra = infra();
    let upstream = reqwest::Url::parse(&infra.registry).unwrap();
    let origin = format!("{}://{}", upstream.scheme(), upstream.authority());
    let tls = tls_dir();
    let mut child = Command::new(&infra.python)
        .arg(repo_path("tests/python/registry_tls_proxy.py"))
        .args(["--upstream", &origin, "--user", "kubefacts"])
        .arg("--cert")
        .arg(tls.join("broker.crt"))
        .arg("--key")
        .arg(tls.join("broker.key"))
        .arg("--password-file")
        .arg(password_file)
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut port = String::new();
    BufReader::new(child.stdout.take().unwrap()).read_line(&mut port).unwrap();
    let port = port.trim();
    assert!(!port.is_empty(), "the https front did not start");
    Front { child, url: format!("https://127.0.0.1:{port}{}", upstream.path()) }
}

/// `kubefacts publish` of the demo trace to fresh topics through the registry at `url`.
fn publish(url: &str, extra: &[&str]) -> (bool, String) {
    let infra = infra();
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("pipeline.toml");
    std::fs::write(&config, format!("[topics]\nprefix = \"{}.\"\n", unique_name("regtls"))).unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_kubefacts"))
        .args(["publish", "--create-topics", "--instance-id", "i", "--bootstrap", &infra.bootstrap])
        .args(["--registry", url])
        .arg("--config")
        .arg(&config)
        .args(["--input", &repo_path("tests/fixtures/traces/demo.jsonl")])
        .args(extra)
        .env_remove("KUBEFACTS_REGISTRY")
        .env("RUST_LOG", "debug")
        .stdout(std::fs::File::create(dir.path().join("out")).unwrap())
        .stderr(std::fs::File::create(dir.path().join("err")).unwrap())
        .spawn()
        .unwrap();
    // A refusal stops the verb at once; only a registry that does not answer is waited for.
    let started = std::time::Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if started.elapsed() > std::time::Duration::from_secs(90) {
            let _ = child.kill();
            panic!("publish still running after 90 s: it waits for a refusal instead of stopping");
        }
        std::thread::sleep(std::time::Duration::from_millis(200));
    };
    let read = |name: &str| std::fs::read_to_string(dir.path().join(name)).unwrap_or_default();
    (status.success(), format!("{}{}", read("out"), read("err")))
}

fn tail(text: &str) -> String {
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(15)..].join("\n")
}

#[test]
fn a_registry_behind_a_private_ca_and_basic_auth_is_reached_and_its_refusals_are_clear() {
    let dir = tempfile::tempdir().unwrap();
    let password = format!("pw-{}", unique_name("secret"));
    let password_file = dir.path().join("registry.password");
    std::fs::write(&password_file, format!("{password}\n")).unwrap();
    let front = front(&password_file);
    let ca = tls_dir().join("ca.crt");
    let (ca, pw) = (ca.to_str().unwrap(), password_file.to_str().unwrap());

    // The CA and the credentials: the schemas register, the records go out.
    let (ok, printed) = publish(
        &front.url,
        &["--registry-ca-file", ca, "--registry-username", "kubefacts", "--registry-password-file", pw],
    );
    assert!(ok, "publish through the https registry failed:\n{}", tail(&printed));
    assert!(!printed.contains(&password), "the registry password reached the output");

    // Without the CA, the certificate is not trusted.
    let (ok, printed) =
        publish(&front.url, &["--registry-username", "kubefacts", "--registry-password-file", pw]);
    assert!(!ok, "an untrusted registry certificate was accepted");
    assert!(
        printed.contains("refused by TLS")
            && printed.contains("certificate")
            && printed.contains("127.0.0.1"),
        "{}",
        tail(&printed)
    );

    // A wrong password: the registry's 401, named.
    let wrong = dir.path().join("wrong.password");
    std::fs::write(&wrong, "not-it\n").unwrap();
    let (ok, printed) = publish(
        &front.url,
        &[
            "--registry-ca-file",
            ca,
            "--registry-username",
            "kubefacts",
            "--registry-password-file",
            wrong.to_str().unwrap(),
        ],
    );
    assert!(!ok, "a wrong registry password was accepted");
    assert!(printed.contains("401"), "{}", tail(&printed));
    assert!(!printed.contains("not-it"), "the wrong password reached the output");

    // A user name without a password file is refused before anything starts.
    let (ok, printed) = publish(&front.url, &["--registry-ca-file", ca, "--registry-username", "kubefacts"]);
    assert!(!ok && printed.contains("--registry-password-file"), "{}", tail(&printed));
}
