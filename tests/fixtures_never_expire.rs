//! The calendar cannot turn the suite red: fixtures carry fixed record timestamps (late
//! November 2026), the test brokers keep Kafka's default time retention (7 days, as a
//! production broker does), and so every topic a test, a bench or kubefacts itself creates
//! says how long it keeps records. The brokers refuse a topic that does not
//! (`scripts/infra/RetentionMustBeExplicit.java`), and a record stamped ten years ago stays
//! readable in the topics the tests make, through the broker's retention checks, while a
//! topic on a 7-day retention loses it. docs/TESTING.md, "Fixed dates", lists the rest of
//! what compares a fixture's time with the wall clock.

mod support;

use std::time::Duration;

use kubefacts::{
    config::TopicsConfig,
    runtime::topics::{TopicSpec, ensure_topics},
};
use rdkafka::{
    ClientConfig, Message, Offset, TopicPartitionList,
    admin::{AdminClient, AdminOptions, NewTopic, ResourceSpecifier, TopicReplication},
    client::DefaultClientContext,
    consumer::{BaseConsumer, Consumer},
    producer::{FutureProducer, FutureRecord},
    types::RDKafkaErrorCode,
};
use support::{infra, unique_name};

type Admin = AdminClient<DefaultClientContext>;

const TEN_YEARS_MS: i64 = 10 * 365 * 86_400_000;
const WEEK_MS: &str = "604800000";

fn admin(config: &ClientConfig) -> Admin {
    config.create().expect("admin client")
}

/// Creates one topic with these configs; the broker's error code when it refuses.
async fn create(
    admin: &Admin,
    name: &str,
    replication: i32,
    configs: &[(&str, &str)],
) -> Result<(), RDKafkaErrorCode> {
    let topic = configs
        .iter()
        .fold(NewTopic::new(name, 1, TopicReplication::Fixed(replication)), |t, (k, v)| t.set(k, v));
    let opts = AdminOptions::new().operation_timeout(Some(Duration::from_secs(30)));
    let mut results = admin.create_topics(&[topic], &opts).await.expect("create_topics request");
    results.pop().unwrap().map(drop).map_err(|(_, code)| code)
}

/// What a broker says to topics that do and do not say their retention.
async fn refuses_only_topics_without_retention(admin: &Admin, replication: i32, broker: &str) {
    let refused = [vec![], vec![("cleanup.policy", "delete")], vec![("cleanup.policy", "compact,delete")]];
    for configs in refused {
        let got = create(admin, &unique_name("no-retention"), replication, &configs).await;
        assert_eq!(
            got,
            Err(RDKafkaErrorCode::PolicyViolation),
            "{broker}: a topic with {configs:?} must be refused"
        );
    }
    let accepted = [
        vec![support::KEEP_FOREVER],
        vec![("retention.ms", WEEK_MS)],
        vec![("cleanup.policy", "compact")],
        vec![("cleanup.policy", "compact,delete"), ("retention.ms", WEEK_MS)],
    ];
    for configs in accepted {
        let got = create(admin, &unique_name("said-retention"), replication, &configs).await;
        assert_eq!(got, Ok(()), "{broker}: a topic with {configs:?} must be created");
    }
}

#[tokio::test]
async fn the_test_brokers_refuse_a_topic_that_does_not_say_its_retention() {
    let infra = infra();
    let single = admin(ClientConfig::new().set("bootstrap.servers", &infra.bootstrap));
    refuses_only_topics_without_retention(&single, 1, "the test broker").await;
    let cluster = support::cluster::cluster();
    refuses_only_topics_without_retention(&admin(&cluster.admin()), 3, "the three-broker cluster").await;
}

/// The low watermark of partition 0 of `topic`: above 0 once retention deleted the record.
fn log_start(consumer: &BaseConsumer, topic: &str) -> i64 {
    consumer
        .fetch_watermarks(topic, 0, Duration::from_secs(10))
        .unwrap_or_else(|e| panic!("watermarks of {topic}: {e}"))
        .0
}

/// The timestamp of the first record of partition 0 of `topic`, read committed.
fn first_timestamp(bootstrap: &str, topic: &str) -> Option<i64> {
    let consumer: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .set("group.id", unique_name("fixtures-never-expire"))
        .set("enable.auto.commit", "false")
        .set("isolation.level", "read_committed")
        .set("enable.partition.eof", "true")
        .create()
        .unwrap();
    let mut tpl = TopicPartitionList::new();
    tpl.add_partition_offset(topic, 0, Offset::Beginning).unwrap();
    consumer.assign(&tpl).unwrap();
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while std::time::Instant::now() < deadline {
        match consumer.poll(Duration::from_millis(500)) {
            Some(Ok(m)) => return m.timestamp().to_millis(),
            Some(Err(rdkafka::error::KafkaError::PartitionEOF(_))) => return None,
            Some(Err(e)) => panic!("reading {topic}: {e}"),
            None => {}
        }
    }
    panic!("{topic}: neither a record nor its end in 30 s")
}

/// The broker's `log.retention.check.interval.ms`.
async fn retention_check_interval(admin: &Admin) -> Duration {
    let opts = AdminOptions::new().request_timeout(Some(Duration::from_secs(30)));
    let res = admin.describe_configs(&[ResourceSpecifier::Broker(1)], &opts).await.unwrap();
    let resource = res.into_iter().next().unwrap().expect("describe broker 1");
    let ms = resource
        .get("log.retention.check.interval.ms")
        .and_then(|e| e.value.as_deref())
        .unwrap()
        .parse()
        .unwrap();
    Duration::from_millis(ms)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_record_stamped_ten_years_ago_outlives_the_brokers_retention_checks() {
    let infra = infra();
    let admin = admin(ClientConfig::new().set("bootstrap.servers", &infra.bootstrap));

    // The topics tests make: through the shared helper, and kubefacts' own topics of every
    // role as `process --create-topics` and `publish` create them on the default pipeline.
    let mut kept = vec![infra.topic("fixture-helper", 1).await];
    let topics =
        TopicsConfig { prefix: format!("{}.", unique_name("fixture-product")), ..Default::default() };
    let specs: Vec<TopicSpec> =
        topics.named().iter().map(|(_, name)| topics.spec(&topics.full(name), 1, false)).collect();
    ensure_topics(&admin, &specs, true).await.expect("kubefacts' topics");
    kept.extend(specs.iter().map(|s| s.name.clone()));
    // The control: Kafka's default retention, said explicitly. It must lose its record, or
    // the wait below proves nothing.
    let control = unique_name("fixture-week");
    create(&admin, &control, 1, &[("retention.ms", WEEK_MS)]).await.expect("the control topic");

    let now_ms =
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_millis() as i64;
    let stamp = now_ms - TEN_YEARS_MS;
    let producer: FutureProducer = ClientConfig::new()
        .set("bootstrap.servers", &infra.bootstrap)
        .set("enable.idempotence", "true")
        .create()
        .unwrap();
    for topic in kept.iter().chain([&control]) {
        let rec =
            FutureRecord::to(topic).partition(0).key("fixture").payload("ten years old").timestamp(stamp);
        producer
            .send(rec, Duration::from_secs(30))
            .await
            .map_err(|(e, _)| e)
            .unwrap_or_else(|e| panic!("{topic}: {e}"));
    }

    // Until the broker has deleted the control's record, then three more retention checks:
    // each check looks at every partition, so by then every topic here was looked at.
    let interval = retention_check_interval(&admin).await;
    let watch: BaseConsumer =
        ClientConfig::new().set("bootstrap.servers", &infra.bootstrap).create().unwrap();
    let started = std::time::Instant::now();
    while log_start(&watch, &control) == 0 {
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "the broker kept a ten-year-old record on a 7-day topic for a minute (checking every {interval:?}): \
             this test cannot tell kept from not yet checked"
        );
        tokio::time::sleep(interval / 4).await;
    }
    tokio::time::sleep(interval * 3).await;
    assert_eq!(first_timestamp(&infra.bootstrap, &control), None, "{control}: the control's record is gone");

    for topic in &kept {
        assert_eq!(log_start(&watch, topic), 0, "{topic}: the broker deleted the ten-year-old record");
        assert_eq!(
            first_timestamp(&infra.bootstrap, topic),
            Some(stamp),
            "{topic}: the record is not readable"
        );
    }
}
