package io.kubefacts.testconnect;

import java.io.BufferedWriter;
import java.io.IOException;
import java.io.UncheckedIOException;
import java.math.BigDecimal;
import java.nio.ByteBuffer;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.StandardOpenOption;
import java.util.Base64;
import java.util.Collection;
import java.util.List;
import java.util.Map;

import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.config.ConfigDef;
import org.apache.kafka.connect.connector.Task;
import org.apache.kafka.connect.data.Field;
import org.apache.kafka.connect.data.Schema;
import org.apache.kafka.connect.data.Struct;
import org.apache.kafka.connect.errors.ConnectException;
import org.apache.kafka.connect.header.Header;
import org.apache.kafka.connect.sink.SinkConnector;
import org.apache.kafka.connect.sink.SinkRecord;
import org.apache.kafka.connect.sink.SinkTask;

/**
 * Test-only sink connector: appends one JSON line per record it receives to the file named by
 * {@code file}. A line holds the record's topic, partition, offset, timestamp, the converted key
 * and value rendered as JSON (Struct and Map as objects, List as an array, Timestamp/Date as epoch
 * milliseconds, bytes as base64, null as null), the names of the key and value schemas, and the
 * header keys in order. Anything it cannot render, and any I/O error, fails the task (it is
 * never swallowed). Always one task: a single file gets a single writer.
 *
 * Compile (no build tool; the classpath is the folder scripts/infra/connect-pom.xml fills):
 *   javac -proc:none -d CLASSES -cp 'LIB/*' tests/connect/JsonLinesSink.java
 */
public class JsonLinesSink extends SinkConnector {
    public static final String FILE_CONFIG = "file";

    private static final ConfigDef CONFIG_DEF = new ConfigDef()
        .define(FILE_CONFIG, ConfigDef.Type.STRING, ConfigDef.NO_DEFAULT_VALUE, ConfigDef.Importance.HIGH,
            "File to append one JSON line per record to (created if missing).");

    private Map<String, String> props;

    @Override
    public String version() {
        return "1";
    }

    @Override
    public void start(Map<String, String> props) {
        CONFIG_DEF.parse(props); // fails the connector on a missing `file`
        this.props = Map.copyOf(props);
    }

    @Override
    public Class<? extends Task> taskClass() {
        return JsonLinesTask.class;
    }

    @Override
    public List<Map<String, String>> taskConfigs(int maxTasks) {
        return List.of(props);
    }

    @Override
    public void stop() {
    }

    @Override
    public ConfigDef config() {
        return CONFIG_DEF;
    }

    public static class JsonLinesTask extends SinkTask {
        private BufferedWriter out;

        @Override
        public String version() {
            return "1";
        }

        @Override
        public void start(Map<String, String> props) {
            String file = props.get(FILE_CONFIG);
            if (file == null || file.isEmpty()) {
                throw new ConnectException("JsonLinesSink: `" + FILE_CONFIG + "` is required");
            }
            try {
                Path path = Path.of(file);
                if (path.getParent() != null) {
                    Files.createDirectories(path.getParent());
                }
                out = Files.newBufferedWriter(path, StandardCharsets.UTF_8, StandardOpenOption.CREATE,
                    StandardOpenOption.APPEND);
            } catch (IOException e) {
                throw new ConnectException("JsonLinesSink: cannot open " + file, e);
            }
        }

        @Override
        public void put(Collection<SinkRecord> records) {
            try {
                for (SinkRecord r : records) {
                    StringBuilder sb = new StringBuilder(256);
                    sb.append("{\"topic\":");
                    string(sb, r.topic());
                    sb.append(",\"partition\":").append(r.kafkaPartition());
                    sb.append(",\"offset\":").append(r.kafkaOffset());
                    sb.append(",\"timestamp\":").append(r.timestamp());
                    sb.append(",\"key_schema\":");
                    schemaName(sb, r.keySchema());
                    sb.append(",\"key\":");
                    value(sb, r.key());
                    sb.append(",\"value_schema\":");
                    schemaName(sb, r.valueSchema());
                    sb.append(",\"value\":");
                    value(sb, r.value());
                    sb.append(",\"headers\":[");
                    boolean first = true;
                    for (Header h : r.headers()) {
                        if (!first) {
                            sb.append(',');
                        }
                        first = false;
                        string(sb, h.key());
                    }
                    sb.append("]}\n");
                    out.write(sb.toString());
                }
                out.flush(); // a test reads the file while the worker runs
            } catch (IOException e) {
                throw new UncheckedIOException("JsonLinesSink: write failed", e);
            }
        }

        @Override
        public void flush(Map<TopicPartition, OffsetAndMetadata> offsets) {
            try {
                out.flush();
            } catch (IOException e) {
                throw new UncheckedIOException("JsonLinesSink: flush failed", e);
            }
        }

        @Override
        public void stop() {
            if (out != null) {
                try {
                    out.close();
                } catch (IOException e) {
                    throw new UncheckedIOException("JsonLinesSink: close failed", e);
                }
            }
        }

        private static void schemaName(StringBuilder sb, Schema s) {
            if (s == null) {
                sb.append("null");
            } else if (s.name() != null) {
                string(sb, s.name());
            } else {
                string(sb, s.type().getName());
            }
        }

        private static void value(StringBuilder sb, Object v) {
            if (v == null) {
                sb.append("null");
            } else if (v instanceof Struct) {
                Struct s = (Struct) v;
                sb.append('{');
                boolean first = true;
                for (Field f : s.schema().fields()) {
                    if (!first) {
                        sb.append(',');
                    }
                    first = false;
                    string(sb, f.name());
                    sb.append(':');
                    value(sb, s.get(f));
                }
                sb.append('}');
            } else if (v instanceof Map) {
                sb.append('{');
                boolean first = true;
                for (Map.Entry<?, ?> e : ((Map<?, ?>) v).entrySet()) {
                    if (!first) {
                        sb.append(',');
                    }
                    first = false;
                    string(sb, String.valueOf(e.getKey()));
                    sb.append(':');
                    value(sb, e.getValue());
                }
                sb.append('}');
            } else if (v instanceof List) {
                sb.append('[');
                boolean first = true;
                for (Object o : (List<?>) v) {
                    if (!first) {
                        sb.append(',');
                    }
                    first = false;
                    value(sb, o);
                }
                sb.append(']');
            } else if (v instanceof CharSequence) {
                string(sb, v.toString());
            } else if (v instanceof Boolean || v instanceof Byte || v instanceof Short || v instanceof Integer
                || v instanceof Long || v instanceof BigDecimal) {
                sb.append(v);
            } else if (v instanceof Float || v instanceof Double) {
                double d = ((Number) v).doubleValue();
                if (Double.isFinite(d)) {
                    sb.append(v);
                } else {
                    string(sb, v.toString());
                }
            } else if (v instanceof java.util.Date) { // Connect Timestamp, Date and Time logical types
                sb.append(((java.util.Date) v).getTime());
            } else if (v instanceof byte[]) {
                string(sb, Base64.getEncoder().encodeToString((byte[]) v));
            } else if (v instanceof ByteBuffer) {
                ByteBuffer b = ((ByteBuffer) v).duplicate();
                byte[] a = new byte[b.remaining()];
                b.get(a);
                string(sb, Base64.getEncoder().encodeToString(a));
            } else {
                throw new ConnectException("JsonLinesSink: no JSON rendering for " + v.getClass().getName());
            }
        }

        private static void string(StringBuilder sb, String s) {
            sb.append('"');
            for (int i = 0; i < s.length(); i++) {
                char c = s.charAt(i);
                switch (c) {
                    case '"': sb.append("\\\""); break;
                    case '\\': sb.append("\\\\"); break;
                    case '\n': sb.append("\\n"); break;
                    case '\r': sb.append("\\r"); break;
                    case '\t': sb.append("\\t"); break;
                    default:
                        if (c < 0x20) {
                            sb.append(String.format("\\u%04x", (int) c));
                        } else {
                            sb.append(c);
                        }
                }
            }
            sb.append('"');
        }
    }
}
