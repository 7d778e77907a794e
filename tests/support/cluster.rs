//! The three-broker SASL_SSL cluster `scripts/infra/cluster.sh` starts: its admin
//! credentials, and its nodes to kill, pause and restart.

use std::{
    path::PathBuf,
    process::Command,
    time::{Duration, Instant},
};

use rdkafka::{
    ClientConfig,
    consumer::{BaseConsumer, Consumer},
};

/// The running cluster.
#[derive(Debug, Clone)]
pub struct Cluster {
    /// The three client addresses, comma-separated.
    pub bootstrap: String,
    /// The CA of every certificate.
    pub ca: String,
    /// The super user's password.
    pub admin_password: String,
    /// Its directory (`.cache/run/cluster`).
    pub dir: PathBuf,
    /// `scripts/infra/cluster.sh`.
    pub script: String,
}

fn var(name: &str) -> Option<String> {
    std::env::var(name).ok()
}

/// The cluster, if its env (`.cache/run/cluster/env`) is sourced.
pub fn running() -> Option<Cluster> {
    let password = std::fs::read_to_string(var("KUBEFACTS_CLUSTER_ADMIN_PASSWORD_FILE")?).ok()?;
    Some(Cluster {
        bootstrap: var("KUBEFACTS_CLUSTER_BOOTSTRAP")?.replace("\\,", ","),
        ca: var("KUBEFACTS_CLUSTER_CA")?,
        admin_password: password.trim_end().to_owned(),
        dir: PathBuf::from(var("KUBEFACTS_CLUSTER_DIR")?),
        script: var("KUBEFACTS_CLUSTER_SCRIPT")?,
    })
}

/// The cluster; panics with instructions when it is not there.
pub fn cluster() -> Cluster {
    running().unwrap_or_else(|| {
        panic!(
            "KUBEFACTS_CLUSTER_* is not set: this test needs the three-broker SASL_SSL cluster. Run \
             ./scripts/test.sh (it starts it), or scripts/infra/up.sh && scripts/infra/cluster.sh up \
             && source .cache/run/cluster/env before cargo test."
        )
    })
}

impl Cluster {
    /// A client configuration of the super user.
    pub fn admin(&self) -> ClientConfig {
        let mut c = ClientConfig::new();
        c.set("bootstrap.servers", &self.bootstrap)
            .set("security.protocol", "sasl_ssl")
            .set("ssl.ca.location", &self.ca)
            .set("sasl.mechanism", "SCRAM-SHA-512")
            .set("sasl.username", "admin")
            .set("sasl.password", &self.admin_password);
        c
    }

    /// A pipeline file's `[kafka]` section connecting as the super user (password in a
    /// file next to `dir`).
    pub fn admin_section(&self, dir: &std::path::Path) -> String {
        let password = dir.join("admin.password");
        std::fs::write(&password, &self.admin_password).unwrap();
        format!(
            "\n[kafka]\nsecurity_protocol = \"sasl_ssl\"\n[kafka.tls]\nca_file = \"{}\"\n[kafka.sasl]\n\
             mechanism = \"SCRAM-SHA-512\"\nusername = \"admin\"\npassword = {{ file = \"{}\" }}\n",
            self.ca,
            password.display()
        )
    }

    fn pid(&self, node: i32) -> u32 {
        let file = self.dir.join(format!("node-{node}/kafka.pid"));
        std::fs::read_to_string(&file)
            .unwrap_or_else(|e| panic!("{}: {e}", file.display()))
            .trim()
            .parse()
            .unwrap()
    }

    /// Sends `signal` to node `node`'s broker.
    pub fn signal(&self, node: i32, signal: &str) {
        let pid = self.pid(node).to_string();
        assert!(
            Command::new("kill").args([signal, &pid]).status().unwrap().success(),
            "kill {signal} node {node}"
        );
    }

    /// SIGKILLs node `node` and waits until it is gone.
    pub fn kill(&self, node: i32) {
        let pid = self.pid(node);
        self.signal(node, "-KILL");
        wait_gone(pid, Duration::from_secs(10));
    }

    /// SIGTERMs node `node` (a clean shutdown, as a rolling restart does) and waits for it.
    pub fn terminate(&self, node: i32) {
        let pid = self.pid(node);
        self.signal(node, "-TERM");
        wait_gone(pid, Duration::from_secs(60));
    }

    /// Starts node `node` again (same config and data) and waits until it serves.
    pub fn start(&self, node: i32) {
        let out = Command::new(&self.script).args(["start-node", &node.to_string()]).output().unwrap();
        assert!(
            out.status.success(),
            "cluster.sh start-node {node}: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }

    /// Per node id, how many partitions of `topics` it leads.
    pub fn leaders(&self, topics: &[String]) -> std::collections::BTreeMap<i32, usize> {
        let c: BaseConsumer = self.admin().create().unwrap();
        let mut out = std::collections::BTreeMap::new();
        for t in topics {
            let md = c.fetch_metadata(Some(t), Duration::from_secs(30)).unwrap();
            for p in md.topics()[0].partitions() {
                *out.entry(p.leader()).or_default() += 1;
            }
        }
        out
    }

    /// The node leading partition `partition` of `topic`.
    /// Waits up to 30 s for one (just after a restart, metadata may have none yet).
    pub fn leader(&self, topic: &str, partition: i32) -> i32 {
        let c: BaseConsumer = self.admin().create().unwrap();
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let md = c.fetch_metadata(Some(topic), Duration::from_secs(30)).unwrap();
            let leader = md.topics()[0].partitions().iter().find(|p| p.id() == partition).map(|p| p.leader());
            match leader {
                Some(l) if l >= 0 => return l,
                _ if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(200)),
                _ => panic!("no leader for {topic}[{partition}] in 30 s: {:?}", md.topics()[0].error()),
            }
        }
    }

    /// The node coordinating `transactional_id`'s transactions: the leader of its
    /// partition of `__transaction_state` (Java's `String.hashCode`, made non-negative,
    /// modulo the log's partition count: 5 on this cluster, 50 by default).
    pub fn transaction_coordinator(&self, transactional_id: &str) -> i32 {
        let hash =
            transactional_id.encode_utf16().fold(0i32, |h, c| h.wrapping_mul(31).wrapping_add(i32::from(c)));
        let c: BaseConsumer = self.admin().create().unwrap();
        let md = c.fetch_metadata(Some("__transaction_state"), Duration::from_secs(30)).unwrap();
        let partitions = md.topics()[0].partitions().len() as i32;
        assert!(partitions > 0, "no __transaction_state yet");
        self.leader("__transaction_state", (hash & 0x7fff_ffff) % partitions)
    }

    /// Waits until every partition of `topics` has all three replicas in sync (a careful
    /// operator's pause between two restarts).
    pub fn wait_in_sync(&self, topics: &[String], secs: u64) {
        let c: BaseConsumer = self.admin().create().unwrap();
        let deadline = Instant::now() + Duration::from_secs(secs);
        loop {
            let lagging: Vec<String> = topics
                .iter()
                .flat_map(|t| {
                    let md = c.fetch_metadata(Some(t), Duration::from_secs(30)).ok();
                    let short: Vec<String> = md
                        .map(|md| {
                            md.topics()[0]
                                .partitions()
                                .iter()
                                .filter(|p| p.isr().len() < 3)
                                .map(|p| format!("{t}[{}]", p.id()))
                                .collect()
                        })
                        .unwrap_or_else(|| vec![format!("{t} (no metadata)")]);
                    short
                })
                .collect();
            if lagging.is_empty() {
                return;
            }
            assert!(Instant::now() < deadline, "replicas not in sync after {secs} s: {lagging:?}");
            std::thread::sleep(Duration::from_millis(500));
        }
    }
}

fn wait_gone(pid: u32, timeout: Duration) {
    let deadline = Instant::now() + timeout;
    while std::path::Path::new(&format!("/proc/{pid}")).exists()
        && !std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|s| s.contains(") Z "))
    {
        assert!(Instant::now() < deadline, "pid {pid} still running after {timeout:?}");
        std::thread::sleep(Duration::from_millis(100));
    }
}
