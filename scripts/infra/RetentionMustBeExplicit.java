package io.kubefacts.testbroker;

import java.util.Map;
import org.apache.kafka.common.errors.PolicyViolationException;
import org.apache.kafka.server.policy.CreateTopicPolicy;

/**
 * The test brokers' create-topic policy ({@code create.topic.policy.class.name}, set by
 * scripts/infra/up.sh and cluster.sh): a topic whose cleanup policy deletes records must say
 * how long it keeps them ({@code retention.ms}) when it is created.
 *
 * <p>The test brokers keep Kafka's default time retention (7 days), as a production broker
 * does, and the tests' fixtures carry fixed record timestamps. A topic created on the
 * default would lose those records as soon as the fixtures are a week old, whoever created
 * it: a test helper, a bench, kafka-topics.sh or kubefacts itself. Refusing the creation makes
 * that a clear error on the day the topic is written, not a hang on the day the calendar
 * catches up (docs/TESTING.md, "Fixed dates").
 *
 * <p>Compacted-only topics never delete by time and pass as they are; so do the broker's own
 * topics (names starting with two underscores).
 */
public final class RetentionMustBeExplicit implements CreateTopicPolicy {
    @Override
    public void configure(Map<String, ?> configs) {}

    @Override
    public void validate(RequestMetadata request) throws PolicyViolationException {
        String topic = request.topic();
        if (topic.startsWith("__")) {
            return;
        }
        Map<String, String> configs = request.configs();
        String cleanup = configs.getOrDefault("cleanup.policy", "delete");
        boolean deletes = false;
        for (String p : cleanup.split(",")) {
            deletes |= p.trim().equals("delete");
        }
        if (deletes && !configs.containsKey("retention.ms")) {
            throw new PolicyViolationException(
                    "topic " + topic + " (cleanup.policy=" + cleanup + ") was created without retention.ms: "
                            + "this test broker refuses a topic that would delete fixed-date fixtures on "
                            + "the broker's 7-day default; create it with retention.ms=-1 (kept forever) or "
                            + "the retention the test is about (docs/TESTING.md, \"Fixed dates\")");
        }
    }

    @Override
    public void close() {}
}
