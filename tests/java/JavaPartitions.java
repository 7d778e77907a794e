// What Kafka's Java producer computes for keyed records, for tests/topics_and_partitioning.rs.
// Run as a single-file source (Java 11+) on Kafka's classpath:
//   java -cp '<kafka>/lib/*' tests/java/JavaPartitions.java N1 N2 ... < keys
// stdin: one hex-encoded key per line (an empty line is the empty key).
// stdout, one line per key: Utils.murmur2(key), then BuiltInPartitioner.partitionForKey(key, N)
// for each N (what KafkaProducer uses for a keyed record), separated by spaces.

import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.util.HexFormat;
import org.apache.kafka.clients.producer.internals.BuiltInPartitioner;
import org.apache.kafka.common.utils.Utils;

public class JavaPartitions {
    public static void main(String[] args) throws Exception {
        var in = new BufferedReader(new InputStreamReader(System.in));
        var out = new StringBuilder();
        for (String line; (line = in.readLine()) != null; ) {
            byte[] key = HexFormat.of().parseHex(line);
            out.append(Utils.murmur2(key));
            for (String n : args) {
                out.append(' ').append(BuiltInPartitioner.partitionForKey(key, Integer.parseInt(n)));
            }
            out.append('\n');
        }
        System.out.print(out);
    }
}
