package io.kubefacts.anchor;

import java.nio.ByteBuffer;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.Set;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.ExecutionException;

import org.apache.avro.JsonProperties;
import org.apache.avro.Schema;
import org.apache.avro.generic.GenericData;
import org.apache.avro.generic.GenericRecord;
import org.apache.avro.util.Utf8;
import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.AdminClientConfig;
import org.apache.kafka.clients.admin.NewTopic;
import org.apache.kafka.common.errors.TopicExistsException;
import org.apache.kafka.common.header.internals.RecordHeaders;
import org.apache.kafka.common.serialization.Deserializer;
import org.apache.kafka.common.serialization.Serde;
import org.apache.kafka.common.serialization.Serdes;
import org.apache.kafka.common.serialization.Serializer;
import org.apache.kafka.streams.KafkaStreams;
import org.apache.kafka.streams.KeyValue;
import org.apache.kafka.streams.StreamsBuilder;
import org.apache.kafka.streams.StreamsConfig;
import org.apache.kafka.streams.Topology;
import org.apache.kafka.streams.kstream.Consumed;
import org.apache.kafka.streams.kstream.Grouped;
import org.apache.kafka.streams.kstream.KStream;
import org.apache.kafka.streams.kstream.Materialized;
import org.apache.kafka.streams.kstream.Named;
import org.apache.kafka.streams.kstream.Produced;
import org.apache.kafka.streams.kstream.Repartitioned;
import org.apache.kafka.streams.processor.api.Processor;
import org.apache.kafka.streams.processor.api.ProcessorContext;
import org.apache.kafka.streams.processor.api.Record;
import org.apache.kafka.streams.processor.api.RecordMetadata;
import org.apache.kafka.streams.state.KeyValueBytesStoreSupplier;
import org.apache.kafka.streams.state.KeyValueStore;
import org.apache.kafka.streams.state.StoreBuilder;
import org.apache.kafka.streams.state.Stores;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * The Kafka Streams anchor (docs/BENCHMARKS.md, "The Kafka Streams anchor"): the shape of
 * kubefacts' {@code [runs]} → {@code [journal]} as a team would write it with the DSL.
 *
 * <ol>
 *   <li>Jobs and Pods (co-partitioned by Job UID) merge into one processor with a keyed
 *       store and its changelog: one read and one write per observation, the Pod's
 *       terminations folded into its Job's entry.
 *   <li>A run is emitted (to the facts topic, keyed by owner UID) when the Job has a True
 *       {@code Complete} or {@code Failed} condition and no uncounted Pods.
 *   <li>Runs are re-keyed by their one-hour finish window through a repartition topic into
 *       an aggregate (store + changelog) whose every update goes downstream (no suppress):
 *       each emission carries the whole window, as kubefacts' superseding windows do.
 * </ol>
 *
 * <p>Exactly-once v2, read_committed, the commit interval and thread count from the command
 * line (the suite passes kubefacts' and the cores available). Markers and heartbeats (no
 * key) are read and committed but do nothing: Kafka Streams has no use for them.
 */
public final class RunsJournal {
    private static final Logger LOG = LoggerFactory.getLogger(RunsJournal.class);
    static final String JOBS_STORE = "anchor-jobs";
    static final String WINDOWS_STORE = "anchor-windows";
    /** Header carrying a run's window start from the fold to the re-keying step. */
    static final String WINDOW_HEADER = "anchor-window-start";

    /** Command line: {@code --flag value} pairs. */
    record Args(Map<String, String> values) {
        static Args parse(String[] argv) {
            Map<String, String> values = new HashMap<>();
            for (int i = 0; i + 1 < argv.length; i += 2) {
                if (!argv[i].startsWith("--")) {
                    throw new IllegalArgumentException("expected --flag value, got " + argv[i]);
                }
                values.put(argv[i].substring(2), argv[i + 1]);
            }
            return new Args(values);
        }

        String get(String name) {
            String v = values.get(name);
            if (v == null) {
                throw new IllegalArgumentException("missing --" + name);
            }
            return v;
        }

        String get(String name, String fallback) {
            return values.getOrDefault(name, fallback);
        }
    }

    /**
     * The schemas the anchor reads and writes: the inputs and the run from kubefacts' schemas/
     * folder; the window as one whole record (job-runs.v1, what a Kafka Streams windowed
     * aggregation writes) from the anchor's own folder.
     */
    record Schemas(Schema jobObservation, Schema podObservation, Schema run, Schema window, Schema windowKey,
            Schema entry) {
        static Schemas load(Path dir, Path windowDir) {
            Schema job = Avro.load(dir, "job-observation.avsc");
            Schema pod = Avro.load(dir, "pod-observation.avsc");
            Schema run = Avro.load(dir, "job-run.avsc");
            return new Schemas(job, pod, run, Avro.load(windowDir, "job-run-window.avsc"),
                    Avro.load(windowDir, "job-run-window-key.avsc"), entrySchema(job, pod));
        }

        /**
         * A Job's entry in the fold's store: its latest minimized Job, each of its Pods'
         * container terminations, and whether its run was emitted.
         */
        private static Schema entrySchema(Schema jobObservation, Schema podObservation) {
            Schema jobSchema = jobObservation.getField("job").schema().getTypes().get(1);
            Schema podSchema = podObservation.getField("pod").schema().getTypes().get(1);
            Schema termination = podSchema.getField("containers").schema().getElementType()
                    .getField("state").schema().getTypes().get(1);
            Schema exit = Schema.createRecord("PodExit", null, "io.kubefacts.anchor", false, List.of(
                    new Schema.Field("container", Schema.create(Schema.Type.STRING)),
                    new Schema.Field("exit_code", Schema.create(Schema.Type.INT)),
                    new Schema.Field("reason", termination.getField("reason").schema(), null,
                            JsonProperties.NULL_VALUE)));
            return Schema.createRecord("JobEntry", null, "io.kubefacts.anchor", false, List.of(
                    new Schema.Field("job", Schema.createUnion(Schema.create(Schema.Type.NULL), jobSchema), null,
                            JsonProperties.NULL_VALUE),
                    new Schema.Field("pods", Schema.createMap(Schema.createArray(exit))),
                    new Schema.Field("filed", Schema.create(Schema.Type.BOOLEAN))));
        }
    }

    /** A serde of bare Avro datums; one {@link Avro} per thread (Kafka Streams shares serdes). */
    static Serde<GenericRecord> datumSerde(Schema schema) {
        ThreadLocal<Avro> avro = ThreadLocal.withInitial(() -> new Avro(schema));
        Serializer<GenericRecord> ser = (topic, r) -> r == null ? null : avro.get().encode(r);
        Deserializer<GenericRecord> de = (topic, b) -> b == null ? null : avro.get().decode(b, 0);
        return Serdes.serdeFrom(ser, de);
    }

    public static void main(String[] argv) throws Exception {
        Args args = Args.parse(argv);
        String prefix = args.get("prefix");
        String bootstrap = args.get("bootstrap");
        String jobs = prefix + "jobs.v1";
        String pods = prefix + "pods.v1";
        String facts = prefix + "anchor.job-run-facts";
        String windows = prefix + "anchor.job-runs";
        int threads = Integer.parseInt(args.get("threads", String.valueOf(Runtime.getRuntime().availableProcessors())));
        long windowMs = Long.parseLong(args.get("window-ms", "3600000"));
        Schemas schemas = Schemas.load(Path.of(args.get("schemas")), Path.of(args.get("window-schemas")));

        Properties props = new Properties();
        props.put(StreamsConfig.APPLICATION_ID_CONFIG, args.get("application-id"));
        props.put(StreamsConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        props.put(StreamsConfig.PROCESSING_GUARANTEE_CONFIG, StreamsConfig.EXACTLY_ONCE_V2);
        props.put(StreamsConfig.COMMIT_INTERVAL_MS_CONFIG, args.get("commit-interval-ms"));
        props.put(StreamsConfig.NUM_STREAM_THREADS_CONFIG, threads);
        props.put(StreamsConfig.STATE_DIR_CONFIG, Files.createTempDirectory("kafka-streams-anchor").toString());
        // The record cache (statestore.cache.max.bytes, 10 MiB) stays at its default: it is
        // what a Kafka Streams user gets, and the suite also runs it off (--cache-bytes 0).
        props.put(StreamsConfig.STATESTORE_CACHE_MAX_BYTES_CONFIG, args.get("cache-bytes", "10485760"));

        int partitions = createOutputs(bootstrap, jobs, List.of(facts, windows));
        Topology topology = topology(schemas, jobs, pods, facts, windows, windowMs, args.get("store", "memory"));
        LOG.info("topology (output partitions {}, threads {}):\n{}", partitions, threads, topology.describe());

        KafkaStreams streams = new KafkaStreams(topology, props);
        CountDownLatch stopped = new CountDownLatch(1);
        streams.setStateListener((now, before) -> {
            // The suite waits for this line before it offers load.
            LOG.info("state {} -> {}", before, now);
            if (now == KafkaStreams.State.ERROR || now == KafkaStreams.State.NOT_RUNNING) {
                stopped.countDown();
            }
        });
        streams.setUncaughtExceptionHandler(e -> {
            LOG.error("stream thread failed", e);
            return org.apache.kafka.streams.errors.StreamsUncaughtExceptionHandler.StreamThreadExceptionResponse
                    .SHUTDOWN_CLIENT;
        });
        Runtime.getRuntime().addShutdownHook(new Thread(() -> streams.close(Duration.ofSeconds(30))));
        streams.start();
        stopped.await();
        if (streams.state() == KafkaStreams.State.ERROR) {
            System.exit(1);
        }
    }

    /**
     * Creates the output topics with the input's partition count, keeping records forever as
     * kubefacts' outputs do (their timestamps are observation times, which the broker's
     * default 7-day retention would delete from a month-old backlog); returns the count.
     */
    static int createOutputs(String bootstrap, String input, List<String> outputs)
            throws InterruptedException, ExecutionException {
        Properties p = new Properties();
        p.put(AdminClientConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        try (Admin admin = Admin.create(p)) {
            int partitions = admin.describeTopics(Set.of(input)).allTopicNames().get().get(input).partitions().size();
            for (String t : outputs) {
                try {
                    NewTopic topic = new NewTopic(t, partitions, (short) 1).configs(Map.of("retention.ms", "-1"));
                    admin.createTopics(List.of(topic)).all().get();
                } catch (ExecutionException e) {
                    if (!(e.getCause() instanceof TopicExistsException)) {
                        throw e;
                    }
                }
            }
            return partitions;
        }
    }

    static Topology topology(Schemas schemas, String jobs, String pods, String facts, String windows, long windowMs,
            String store) {
        StreamsBuilder builder = new StreamsBuilder();
        if (!store.equals("memory") && !store.equals("rocksdb")) {
            throw new IllegalArgumentException("--store is memory or rocksdb, not " + store);
        }
        boolean rocks = store.equals("rocksdb");
        StoreBuilder<KeyValueStore<String, GenericRecord>> jobsStore = Stores.keyValueStoreBuilder(
                rocks ? Stores.persistentKeyValueStore(JOBS_STORE) : Stores.inMemoryKeyValueStore(JOBS_STORE),
                Serdes.String(), datumSerde(schemas.entry()));
        builder.addStateStore(jobsStore);

        Consumed<String, byte[]> raw = Consumed.with(Serdes.String(), Serdes.ByteArray());
        KStream<String, byte[]> runs = builder.stream(jobs, raw)
                .merge(builder.stream(pods, raw))
                .process(() -> new Fold(schemas, jobs, windowMs), Named.as("fold"), JOBS_STORE);
        runs.to(facts, Produced.with(Serdes.String(), Serdes.ByteArray()));

        Serde<GenericRecord> windowSerde = datumSerde(schemas.window());
        ThreadLocal<Avro> runAvro = ThreadLocal.withInitial(() -> new Avro(schemas.run()));
        ThreadLocal<Avro> windowAvro = ThreadLocal.withInitial(() -> new Avro(schemas.window()));
        ThreadLocal<Avro> keyAvro = ThreadLocal.withInitial(() -> new Avro(schemas.windowKey()));
        KeyValueBytesStoreSupplier windowStore =
                rocks ? Stores.persistentKeyValueStore(WINDOWS_STORE) : Stores.inMemoryKeyValueStore(WINDOWS_STORE);
        runs.process(WindowKey::new, Named.as("window-key"))
                .repartition(Repartitioned.with(Serdes.Long(), Serdes.ByteArray()).withName("journal"))
                .groupByKey(Grouped.with(Serdes.Long(), Serdes.ByteArray()))
                .aggregate(() -> null,
                        (start, run, window) -> file(schemas.window(), window, start, windowMs,
                                runAvro.get().decodeFramed(run)),
                        Named.as("journal"),
                        Materialized.<Long, GenericRecord>as(windowStore)
                                .withKeySerde(Serdes.Long())
                                .withValueSerde(windowSerde))
                .toStream(Named.as("windows"))
                .map((start, window) -> {
                    GenericRecord key = new GenericData.Record(schemas.windowKey());
                    key.put("window_start", start);
                    key.put("window_length_ms", windowMs);
                    return KeyValue.pair(keyAvro.get().encodeFramed(key), windowAvro.get().encodeFramed(window));
                }, Named.as("frame"))
                .to(windows, Produced.with(Serdes.ByteArray(), Serdes.ByteArray()));
        return builder.build();
    }

    /** Adds {@code run} to its window (the whole window is the new aggregate). */
    static GenericRecord file(Schema schema, GenericRecord window, long start, long windowMs, GenericRecord run) {
        if (window == null) {
            window = new GenericData.Record(schema);
            window.put("window_start", start);
            window.put("window_length_ms", windowMs);
            window.put("revision", 0L);
            window.put("is_final", false);
            window.put("stream_time", start);
            window.put("runs", new GenericData.Array<GenericRecord>(1, schema.getField("runs").schema()));
        }
        @SuppressWarnings("unchecked")
        List<GenericRecord> filed = (List<GenericRecord>) window.get("runs");
        long finished = (Long) run.get("finished_at");
        String uid = run.get("run_uid").toString();
        // Sorted by finished_at, then run_uid; a run filed again replaces itself.
        int at = 0;
        while (at < filed.size()) {
            GenericRecord other = filed.get(at);
            long f = (Long) other.get("finished_at");
            int byUid = other.get("run_uid").toString().compareTo(uid);
            if (f == finished && byUid == 0) {
                filed.set(at, run);
                return window;
            }
            if (f > finished || (f == finished && byUid > 0)) {
                break;
            }
            at++;
        }
        filed.add(at, run);
        window.put("revision", (Long) window.get("revision") + 1);
        window.put("stream_time", Math.max((Long) window.get("stream_time"), finished));
        return window;
    }

    /** Re-keys a run by its window start (from the header the fold set). */
    static final class WindowKey implements Processor<String, byte[], Long, byte[]> {
        private ProcessorContext<Long, byte[]> context;

        @Override
        public void init(ProcessorContext<Long, byte[]> context) {
            this.context = context;
        }

        @Override
        public void process(Record<String, byte[]> record) {
            long start = ByteBuffer.wrap(record.headers().lastHeader(WINDOW_HEADER).value()).getLong();
            context.forward(record.withKey(start).withHeaders(new RecordHeaders()));
        }
    }

    /** Folds Job and Pod observations into the Job's entry; emits its run once. */
    static final class Fold implements Processor<String, byte[], String, byte[]> {
        private final Schemas schemas;
        private final String jobsTopic;
        private final long windowMs;
        private final Avro jobs;
        private final Avro pods;
        private final Avro runs;
        private final Schema exitSchema;
        private final Schema countSchema;
        private ProcessorContext<String, byte[]> context;
        private KeyValueStore<String, GenericRecord> store;

        Fold(Schemas schemas, String jobsTopic, long windowMs) {
            this.schemas = schemas;
            this.jobsTopic = jobsTopic;
            this.windowMs = windowMs;
            this.jobs = new Avro(schemas.jobObservation());
            this.pods = new Avro(schemas.podObservation());
            this.runs = new Avro(schemas.run());
            this.exitSchema = schemas.entry().getField("pods").schema().getValueType().getElementType();
            this.countSchema = schemas.run().getField("exits").schema().getElementType();
        }

        @Override
        public void init(ProcessorContext<String, byte[]> context) {
            this.context = context;
            this.store = context.getStateStore(JOBS_STORE);
        }

        @Override
        public void process(Record<String, byte[]> record) {
            // Markers and heartbeats are keyless: nothing to fold.
            if (record.key() == null || record.value() == null) {
                return;
            }
            String topic = context.recordMetadata().map(RecordMetadata::topic).orElseThrow();
            boolean isJob = topic.equals(jobsTopic);
            GenericRecord obs = (isJob ? jobs : pods).decodeFramed(record.value());
            GenericRecord object = (GenericRecord) obs.get(isJob ? "job" : "pod");
            if (object == null) {
                return;
            }
            GenericRecord entry = store.get(record.key());
            if (entry == null) {
                entry = new GenericData.Record(schemas.entry());
                entry.put("pods", new HashMap<Utf8, List<GenericRecord>>());
                entry.put("filed", false);
            }
            if (isJob) {
                if (obs.get("event").toString().equals("DELETED") && (Boolean) entry.get("filed")) {
                    store.delete(record.key());
                    return;
                }
                entry.put("job", object);
            } else {
                @SuppressWarnings("unchecked")
                Map<Object, Object> byPod = (Map<Object, Object>) entry.get("pods");
                byPod.put(((GenericRecord) object.get("meta")).get("uid"), exits(object));
            }
            GenericRecord job = (GenericRecord) entry.get("job");
            if (!(Boolean) entry.get("filed") && job != null) {
                GenericRecord run = finished(job, entry);
                if (run != null) {
                    entry.put("filed", true);
                    long start = Math.floorDiv((Long) run.get("finished_at"), windowMs) * windowMs;
                    RecordHeaders headers = new RecordHeaders();
                    headers.add(WINDOW_HEADER, ByteBuffer.allocate(8).putLong(start).array());
                    String owner = ((GenericRecord) run.get("owner")).get("uid").toString();
                    context.forward(new Record<>(owner, runs.encodeFramed(run), record.timestamp(), headers));
                }
            }
            store.put(record.key(), entry);
        }

        /** The Pod's container terminations. */
        private List<GenericRecord> exits(GenericRecord pod) {
            List<GenericRecord> out = new ArrayList<>();
            for (String field : List.of("init_containers", "containers")) {
                @SuppressWarnings("unchecked")
                List<GenericRecord> containers = (List<GenericRecord>) pod.get(field);
                for (GenericRecord c : containers) {
                    // The last terminated state (before a restart) and the current one.
                    for (String which : List.of("last_state", "state")) {
                        GenericRecord state = (GenericRecord) c.get(which);
                        if (state != null) {
                            GenericRecord exit = new GenericData.Record(exitSchema);
                            exit.put("container", c.get("name"));
                            exit.put("exit_code", state.get("exit_code"));
                            exit.put("reason", state.get("reason"));
                            out.add(exit);
                        }
                    }
                }
            }
            return out;
        }

        /** The run of a Job whose Complete or Failed condition is True, else null. */
        private GenericRecord finished(GenericRecord job, GenericRecord entry) {
            GenericRecord status = (GenericRecord) job.get("status");
            if ((Integer) status.get("uncounted_succeeded") != 0 || (Integer) status.get("uncounted_failed") != 0) {
                return null;
            }
            // A True Failed condition wins over a True Complete one (as in kubefacts' [runs]).
            GenericRecord done = null;
            @SuppressWarnings("unchecked")
            List<GenericRecord> conditions = (List<GenericRecord>) status.get("conditions");
            for (GenericRecord c : conditions) {
                String type = c.get("type").toString();
                boolean isTrue = c.get("status").toString().equals("TRUE");
                if (isTrue && (type.equals("Failed") || (type.equals("Complete") && done == null))) {
                    done = c;
                }
            }
            if (done == null) {
                return null;
            }
            boolean failed = done.get("type").toString().equals("Failed");
            Schema schema = schemas.run();
            GenericRecord meta = (GenericRecord) job.get("meta");
            GenericRecord spec = (GenericRecord) job.get("spec");
            GenericRecord cron = (GenericRecord) job.get("owner_cronjob");
            Schema ownerSchema = schema.getField("owner").schema();
            GenericRecord owner = new GenericData.Record(ownerSchema);
            Schema kinds = ownerSchema.getField("kind").schema();
            owner.put("kind", new GenericData.EnumSymbol(kinds, cron != null ? "CRONJOB" : "JOB"));
            owner.put("name", cron != null ? cron.get("name") : meta.get("name"));
            owner.put("uid", cron != null ? cron.get("uid") : meta.get("uid"));
            Object finishedAt = failed ? done.get("last_transition_time") : status.get("completion_time");
            if (finishedAt == null) {
                finishedAt = done.get("last_transition_time");
            }
            if (finishedAt == null) {
                finishedAt = meta.get("creation_timestamp");
            }
            if (finishedAt == null) {
                return null;
            }
            GenericRecord run = new GenericData.Record(schema);
            run.put("namespace", meta.get("namespace"));
            run.put("owner", owner);
            run.put("run_name", meta.get("name"));
            run.put("run_uid", meta.get("uid"));
            run.put("started_at", status.get("start_time"));
            run.put("finished_at", finishedAt);
            run.put("result", new GenericData.EnumSymbol(schema.getField("result").schema(),
                    failed ? "FAILED" : "SUCCEEDED"));
            run.put("failure_reason", failed ? done.get("reason") : null);
            run.put("succeeded_pods", orZero(status.get("succeeded")));
            run.put("failed_pods", orZero(status.get("failed")));
            run.put("parallelism", spec.get("parallelism"));
            run.put("completions", spec.get("completions"));
            run.put("backoff_limit", spec.get("backoff_limit"));
            // Exit breakdown: terminations counted by (container, exit code, reason).
            Map<List<Object>, long[]> counts = new HashMap<>();
            List<List<Object>> order = new ArrayList<>();
            @SuppressWarnings("unchecked")
            Map<Object, List<GenericRecord>> byPod = (Map<Object, List<GenericRecord>>) entry.get("pods");
            for (List<GenericRecord> exits : byPod.values()) {
                for (GenericRecord e : exits) {
                    Object reason = e.get("reason");
                    List<Object> k = List.of(e.get("container").toString(), e.get("exit_code"),
                            reason == null ? "" : reason.toString());
                    counts.computeIfAbsent(k, x -> {
                        order.add(x);
                        return new long[1];
                    })[0]++;
                }
            }
            order.sort((a, b) -> a.toString().compareTo(b.toString()));
            List<GenericRecord> exits = new GenericData.Array<>(order.size(), schema.getField("exits").schema());
            for (List<Object> k : order) {
                GenericRecord c = new GenericData.Record(countSchema);
                c.put("container", k.get(0));
                c.put("exit_code", k.get(1));
                c.put("reason", ((String) k.get(2)).isEmpty() ? null : k.get(2));
                c.put("count", counts.get(k)[0]);
                exits.add(c);
            }
            run.put("exits", exits);
            return run;
        }

        private static int orZero(Object v) {
            return v == null ? 0 : (Integer) v;
        }
    }

    private RunsJournal() {}
}
