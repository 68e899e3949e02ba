// The race campaign's streams clients (bench/race_share_streams.py): ONE JVM hosting many
// KafkaStreams instances (group.protocol=streams, KIP-1071), driven over stdin/stdout, so a streams
// action in a trial costs an instance start (milliseconds) and not a JVM start (seconds).
//
// Commands (one per line on stdin):
//   start ID APP_ID BOOTSTRAP STATE_DIR TOPIC[,TOPIC...]   a stateless app reading TOPICs
//   close ID                                               close it, leaving the group
//   exit
// Events (one JSON object per line on stdout), every time in wall-clock seconds (the same clock
// as the Python campaign's time.time()):
//   {"ev":"started","id":..,"called":t,"returned":t}   KafkaStreams#start() called / returned
//   {"ev":"state","id":..,"t":t,"old":..,"new":..}      a state transition
//   {"ev":"assigned","id":..,"t":t,"tps":[..]}          the active tasks' partitions changed (observed
//                                                        after the broker assigned them)
//   {"ev":"processed","id":..,"t":t,"tp":"topic:p","offset":o}
//   {"ev":"committed","id":..,"t":t,"offsets":{"topic:p":o}}  the consumer's ConsumerInterceptor
//                                                        #onCommit: the broker acknowledged it
//   {"ev":"closing","id":..,"t":t} / {"ev":"closed","id":..,"t":t,"ok":b}
//   {"ev":"error","id":..,"t":t,"message":..}
// Stateless on purpose: no changelog or repartition topics (groupwarden never deletes topics, so
// a stateful app per trial would leave thousands of internal topics behind).
import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.io.PrintStream;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.time.Instant;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.Set;
import java.util.TreeSet;
import java.util.concurrent.ConcurrentHashMap;

import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerInterceptor;
import org.apache.kafka.clients.consumer.ConsumerRecords;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.serialization.Serdes;
import org.apache.kafka.streams.CloseOptions;
import org.apache.kafka.streams.KafkaStreams;
import org.apache.kafka.streams.StreamsBuilder;
import org.apache.kafka.streams.StreamsConfig;
import org.apache.kafka.streams.TaskMetadata;
import org.apache.kafka.streams.ThreadMetadata;
import org.apache.kafka.streams.processor.api.Processor;
import org.apache.kafka.streams.processor.api.ProcessorContext;
import org.apache.kafka.streams.processor.api.Record;

public final class RaceStreamsDriver {
    private static final PrintStream OUT = new PrintStream(System.out, true, StandardCharsets.UTF_8);
    private static final Map<String, KafkaStreams> APPS = new ConcurrentHashMap<>();
    private static final Map<String, String> ASSIGNED = new ConcurrentHashMap<>();

    static double now() {
        Instant t = Instant.now();
        return t.getEpochSecond() + t.getNano() / 1e9;
    }

    static String quote(String s) {
        return "\"" + s.replace("\\", "\\\\").replace("\"", "\\\"").replace("\n", " ") + "\"";
    }

    static synchronized void emit(String json) {
        OUT.println(json);
    }

    static void event(String ev, String id, String rest) {
        emit("{\"ev\":" + quote(ev) + ",\"id\":" + quote(id) + ",\"t\":" + now() + rest + "}");
    }

    /** The instance id is the client.id's prefix: Streams names its consumer ID-StreamThread-N-consumer. */
    public static final class CommitReporter implements ConsumerInterceptor<byte[], byte[]> {
        private String id = "?";

        @Override
        public void configure(Map<String, ?> configs) {
            Object clientId = configs.get(ConsumerConfig.CLIENT_ID_CONFIG);
            String name = clientId == null ? "?" : clientId.toString();
            int cut = name.indexOf("-StreamThread-");
            id = cut > 0 ? name.substring(0, cut) : name;
        }

        @Override
        public ConsumerRecords<byte[], byte[]> onConsume(ConsumerRecords<byte[], byte[]> records) {
            return records;
        }

        @Override
        public void onCommit(Map<TopicPartition, OffsetAndMetadata> offsets) {
            StringBuilder body = new StringBuilder();
            for (Map.Entry<TopicPartition, OffsetAndMetadata> e : offsets.entrySet()) {
                if (body.length() > 0) body.append(',');
                body.append(quote(e.getKey().topic() + ":" + e.getKey().partition()))
                    .append(':').append(e.getValue().offset());
            }
            event("committed", id, ",\"offsets\":{" + body + "}");
        }

        @Override
        public void close() {}
    }

    static final class Reporter implements Processor<byte[], byte[], Void, Void> {
        private final String id;
        private ProcessorContext<Void, Void> context;

        Reporter(String id) {
            this.id = id;
        }

        @Override
        public void init(ProcessorContext<Void, Void> context) {
            this.context = context;
        }

        @Override
        public void process(Record<byte[], byte[]> record) {
            context.recordMetadata().ifPresent(m -> event(
                "processed", id,
                ",\"tp\":" + quote(m.topic() + ":" + m.partition()) + ",\"offset\":" + m.offset()));
        }
    }

    static void start(String id, String appId, String bootstrap, String stateDir, String topics) {
        Properties props = new Properties();
        props.put(StreamsConfig.APPLICATION_ID_CONFIG, appId);
        props.put(StreamsConfig.CLIENT_ID_CONFIG, id);
        props.put(StreamsConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        props.put(StreamsConfig.GROUP_PROTOCOL_CONFIG, "streams");
        props.put(StreamsConfig.STATE_DIR_CONFIG, stateDir);
        props.put(StreamsConfig.COMMIT_INTERVAL_MS_CONFIG, 100);
        props.put(StreamsConfig.NUM_STREAM_THREADS_CONFIG, 1);
        props.put(StreamsConfig.DEFAULT_KEY_SERDE_CLASS_CONFIG, Serdes.ByteArray().getClass());
        props.put(StreamsConfig.DEFAULT_VALUE_SERDE_CLASS_CONFIG, Serdes.ByteArray().getClass());
        props.put(StreamsConfig.mainConsumerPrefix(ConsumerConfig.INTERCEPTOR_CLASSES_CONFIG),
            CommitReporter.class.getName());
        props.put(StreamsConfig.mainConsumerPrefix(ConsumerConfig.AUTO_OFFSET_RESET_CONFIG), "earliest");
        StreamsBuilder builder = new StreamsBuilder();
        builder.<byte[], byte[]>stream(Arrays.asList(topics.split(","))).process(() -> new Reporter(id));
        KafkaStreams streams = new KafkaStreams(builder.build(), props);
        streams.setStateListener((next, old) -> event(
            "state", id, ",\"old\":" + quote(old.name()) + ",\"new\":" + quote(next.name())));
        streams.setUncaughtExceptionHandler(e -> {
            event("error", id, ",\"message\":" + quote(String.valueOf(e)));
            return org.apache.kafka.streams.errors.StreamsUncaughtExceptionHandler
                .StreamThreadExceptionResponse.SHUTDOWN_CLIENT;
        });
        APPS.put(id, streams);
        double called = now();
        streams.start();
        emit("{\"ev\":\"started\",\"id\":" + quote(id) + ",\"called\":" + called + ",\"returned\":" + now() + "}");
    }

    static void close(String id) {
        KafkaStreams streams = APPS.remove(id);
        if (streams == null) {
            event("closed", id, ",\"ok\":false");
            return;
        }
        event("closing", id, "");
        boolean ok = streams.close(CloseOptions.groupMembershipOperation(
            CloseOptions.GroupMembershipOperation.LEAVE_GROUP).withTimeout(Duration.ofSeconds(30)));
        ASSIGNED.remove(id);
        event("closed", id, ",\"ok\":" + ok);
    }

    /** Watches every instance's active tasks: a change is reported when observed (every 5 ms). */
    static void watchAssignments() {
        while (true) {
            for (Map.Entry<String, KafkaStreams> entry : APPS.entrySet()) {
                Set<String> tps = new TreeSet<>();
                try {
                    for (ThreadMetadata thread : entry.getValue().metadataForLocalThreads()) {
                        for (TaskMetadata task : thread.activeTasks()) {
                            for (TopicPartition tp : task.topicPartitions()) {
                                tps.add(quote(tp.topic() + ":" + tp.partition()));
                            }
                        }
                    }
                } catch (RuntimeException e) {
                    continue; // closing meanwhile
                }
                String now = String.join(",", tps);
                String before = ASSIGNED.put(entry.getKey(), now);
                if (!now.equals(before == null ? "" : before)) {
                    event("assigned", entry.getKey(), ",\"tps\":[" + now + "]");
                }
            }
            try {
                Thread.sleep(5);
            } catch (InterruptedException e) {
                return;
            }
        }
    }

    public static void main(String[] args) throws Exception {
        Thread watcher = new Thread(RaceStreamsDriver::watchAssignments, "assignment-watcher");
        watcher.setDaemon(true);
        watcher.start();
        BufferedReader in = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
        emit("{\"ev\":\"ready\",\"id\":\"\",\"t\":" + now() + "}");
        String line;
        while ((line = in.readLine()) != null) {
            String[] words = line.trim().split(" ");
            String id = words.length > 1 ? words[1] : "";
            try {
                switch (words[0]) {
                    case "start" -> {
                        String[] a = words;
                        new Thread(() -> start(a[1], a[2], a[3], a[4], a[5]), "start-" + id).start();
                    }
                    case "close" -> new Thread(() -> close(id), "close-" + id).start();
                    case "exit" -> {
                        List<Thread> closing = new ArrayList<>();
                        for (String open : APPS.keySet()) {
                            Thread t = new Thread(() -> close(open));
                            t.start();
                            closing.add(t);
                        }
                        for (Thread t : closing) t.join();
                        return;
                    }
                    default -> event("error", id, ",\"message\":" + quote("unknown command " + line));
                }
            } catch (RuntimeException e) {
                event("error", id, ",\"message\":" + quote(String.valueOf(e)));
            }
        }
    }
}
