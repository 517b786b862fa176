"""kafka-console-producer.sh and kafka-console-consumer.sh on odradek: stdin lines to
records and back, with Kafka's reader and formatter properties."""

from __future__ import annotations

import struct

import pytest

from odradek.client import Admin, NewTopic, Producer
from tests.commands.conftest import kafka_table

pytestmark = pytest.mark.interop

PRODUCER = "kafka-console-producer.sh"
CONSUMER = "kafka-console-consumer.sh"


def create(kafka, topic: str, partitions: int = 1) -> None:
    kafka.ok("kafka-topics.sh", "--create", "--topic", topic, "--partitions", str(partitions))


def test_round_trip_with_keys_headers_and_nulls(kafka, topic):
    create(kafka, topic)
    lines = "h1:a,h2:b|k1|v1\nNULL|k2|with|bars\nNULL|NULL|v3\nh3:NULL|k4|NULL\n"
    r = kafka.ok(PRODUCER, "--topic", topic, "--property", "parse.key=true", "--property", "key.separator=|",
                 "--property", "parse.headers=true", "--property", "headers.delimiter=|", "--property",
                 "null.marker=NULL", input=lines)
    assert r.stdout == "" and r.stderr == ""

    r = kafka.ok(CONSUMER, "--topic", topic, "--from-beginning", "--max-messages", "4",
                 "--property", "print.key=true", "--property", "print.headers=true", "--property",
                 "print.partition=true", "--property", "print.offset=true", "--property", "key.separator= ; ",
                 "--property", "null.literal=<null>")
    assert r.stdout.splitlines() == [
        "Partition:0 ; Offset:0 ; h1:a,h2:b ; k1 ; v1",
        "Partition:0 ; Offset:1 ; NO_HEADERS ; k2 ; with|bars",  # split at the first separators only
        "Partition:0 ; Offset:2 ; NO_HEADERS ; <null> ; v3",
        "Partition:0 ; Offset:3 ; h3:<null> ; k4 ; <null>",
    ]
    assert r.stderr.strip() == "Processed a total of 4 messages"

    # Timestamps, no value, another line separator.
    r = kafka.ok(CONSUMER, "--topic", topic, "--partition", "0", "--offset", "1", "--max-messages", "2",
                 "--property", "print.timestamp=true", "--property", "print.key=true", "--property",
                 "print.value=false", "--property", "line.separator=;")
    first, second, rest = r.stdout.split(";")
    assert first.startswith("CreateTime:") and first.endswith("\tk2") and second.endswith("\tnull") and rest == ""


def test_bad_line_stops_the_producer_unless_ignore_error(kafka, topic):
    create(kafka, topic)
    r = kafka.fails(PRODUCER, "--topic", topic, "--property", "parse.key=true", "--property", "key.separator=:",
                    input="a:1\nno-separator\nb:2\n")
    assert "No key separator found on line number 2: 'no-separator'" in r.stderr
    kafka.ok(PRODUCER, "--topic", topic, "--property", "parse.key=true", "--property", "key.separator=:",
             "--property", "ignore.error=true", input="c:3\nplain\n")
    r = kafka.ok(CONSUMER, "--topic", topic, "--from-beginning", "--timeout-ms", "1500", "--property",
                 "print.key=true", "--property", "key.separator==")
    assert r.stdout == "a=1\nc=3\nnull=plain\n"


def test_producer_options_and_auto_created_topic(kafka, topic, tmp_path):
    config = tmp_path / "producer.properties"
    config.write_text("acks=1\nlinger.ms=0\nbuffer.memory=1000000\n")
    r = kafka.ok(PRODUCER, "--topic", topic, "--compression-codec", "--sync", "--request-required-acks", "all",
                 "--producer.config", str(config), "--producer-property", "client.id=my-producer",
                 "--producer-property", "unknown.thing=1", "--max-block-ms", "1000", input="x\ny\n")
    assert "ignoring producer properties odradek's client does not support: unknown.thing" in r.stderr
    # The broker created the topic on the producer's first metadata request.
    assert kafka.ok("kafka-topics.sh", "--list", "--topic", topic).stdout == f"{topic}\n"
    r = kafka.ok(CONSUMER, "--topic", topic, "--from-beginning", "--max-messages", "2")
    assert sorted(r.stdout.split()) == ["x", "y"]
    kafka.fails(PRODUCER, "--topic", topic, "--compression-codec", "brotli", input="z\n",
                error="Invalid value brotli for configuration compression.type")
    kafka.fails(PRODUCER, "--topic", topic, "--line-reader", "my.Reader", input="z\n", error="no line reader my.Reader")
    kafka.fails(PRODUCER, input="z\n", error='Missing required argument "[topic]"')


def test_consumer_group_commits_what_it_printed(kafka, topic):
    create(kafka, topic, 2)
    kafka.ok(PRODUCER, "--topic", topic, input="".join(f"{i}\n" for i in range(6)))
    group = f"g-{topic}"
    # group.protocol=classic, the Java consumer's default
    r = kafka.ok(CONSUMER, "--topic", topic, "--group", group, "--from-beginning", "--max-messages", "6")
    assert sorted(r.stdout.split()) == [str(i) for i in range(6)]
    rows = kafka_table(kafka.ok("kafka-consumer-groups.sh", "--describe", "--group", group).stdout)
    assert sum(int(r["CURRENT-OFFSET"]) for r in rows) == 6 and {r["LAG"] for r in rows} == {"0"}
    listed = kafka_table(kafka.ok("kafka-consumer-groups.sh", "--list", "--type").stdout)
    assert [r["TYPE"] for r in listed if r["GROUP"] == group] == ["Classic"]
    kafka.ok(PRODUCER, "--topic", topic, input="6\n")
    r = kafka.ok(CONSUMER, "--topic", topic, "--consumer-property", f"group.id={group}", "--timeout-ms", "4000")
    assert r.stdout == "6\n" and r.stderr.strip() == "Processed a total of 1 messages"


def test_include_regex_and_deserializers(kafka, topic):
    names = [f"{topic}-a", f"{topic}-b"]
    with Admin(kafka.bootstrap) as admin:
        admin.create_topics([NewTopic(n, 1) for n in names])
    with Producer(kafka.bootstrap, linger_ms=0) as producer:
        producer.send(names[0], struct.pack(">q", -42), struct.pack(">i", 7))
        producer.send(names[1], struct.pack(">q", 2**40), struct.pack(">i", 8))
    r = kafka.ok(CONSUMER, "--include", f"{topic}-.*", "--from-beginning", "--timeout-ms", "1500",
                 "--key-deserializer", "org.apache.kafka.common.serialization.IntegerDeserializer",
                 "--value-deserializer", "org.apache.kafka.common.serialization.LongDeserializer",
                 "--property", "print.key=true")
    assert sorted(r.stdout.splitlines()) == ["7\t-42", f"8\t{2**40}"]
    r = kafka.fails(CONSUMER, "--topic", names[0], "--from-beginning", "--max-messages", "1",
                    "--value-deserializer", "org.apache.kafka.common.serialization.IntegerDeserializer")
    assert "Size of data received by IntegerDeserializer is not 4" in r.stderr
    r = kafka.ok(CONSUMER, "--topic", names[0], "--from-beginning", "--timeout-ms", "1000", "--skip-message-on-error",
                 "--value-deserializer", "org.apache.kafka.common.serialization.IntegerDeserializer")
    assert r.stdout == "" and "skipping this message" in r.stderr
    kafka.fails(CONSUMER, "--topic", names[0], "--value-deserializer", "com.example.Avro", error="no deserializer")


@pytest.mark.parametrize("args, error", [
    ([], "Exactly one of --include/--topic is required."),
    (["--topic", "t", "--include", "t"], "Exactly one of --include/--topic is required."),
    (["--topic", "t", "--offset", "3"], "The partition is required when offset is specified."),
    (["--include", "t", "--partition", "0"], "The topic is required when partition is specified."),
    (["--topic", "t", "--partition", "0", "--offset", "1", "--from-beginning"],
     "Options from-beginning and offset cannot be specified together."),
    (["--topic", "t", "--partition", "0", "--group", "g"], "Options group and partition cannot be specified together."),
    (["--topic", "t", "--group", "g", "--consumer-property", "group.id=h"], "do not match"),
    (["--topic", "t", "--partition", "0", "--offset", "soon"], "The provided offset value 'soon' is incorrect."),
    (["--topic", "t", "--formatter", "my.Formatter"], "no formatter my.Formatter"),
])
def test_consumer_usage_errors_exit_1(kafka, args, error):
    kafka.fails(CONSUMER, *args, error=error)


def test_missing_partition_and_conflicting_reset(kafka, topic):
    create(kafka, topic)
    kafka.fails(CONSUMER, "--topic", topic, "--partition", "5", error=f"Partition 5 of topic {topic} does not exist")
    kafka.fails(CONSUMER, "--topic", topic, "--from-beginning", "--consumer-property", "auto.offset.reset=latest",
                error="Can't simultaneously specify --from-beginning and 'auto.offset.reset=latest'")
