"""The benchmark broker (scripts/kafka/kafka.sh, Apache Kafka 4.4) and topic chores."""
import os
import subprocess

from .util import ROOT, BenchError, log, run

KAFKA_SH = os.path.join(ROOT, "scripts", "kafka", "kafka.sh")


class Broker:
    """One broker on 127.0.0.1:port. start() reuses a running one; stop() stops only a broker
    this harness started (and wipes its data directory: GBs per scenario), unless keep."""

    def __init__(self, port, keep=False):
        self.port = port
        self.keep = keep
        self.started = False
        self.pending = []  # background topic deletions
        self.bootstrap = f"127.0.0.1:{port}"
        self.env = dict(os.environ, KAFKA_PORT=str(port), KAFKA_HEAP=os.environ.get("KAFKA_HEAP", "1g"))
        self.run_dir = os.environ.get("KAFKA_RUN_DIR", f"/tmp/tidemark-kafka-{port}")
        self.libs = os.path.join(os.environ.get("TIDEMARK_CACHE", os.path.expanduser("~/.cache/tidemark")), "kafka-4.4.0", "libs")

    def up(self):
        return subprocess.run(["bash", KAFKA_SH, "status"], env=self.env, capture_output=True).returncode == 0

    def start(self):
        if self.up():
            log(f"broker: reusing the broker on {self.bootstrap}")
        else:
            log(f"broker: starting Kafka on {self.bootstrap}")
            run(["bash", KAFKA_SH, "start"], f"starting the broker on {self.bootstrap} ({KAFKA_SH})", env=self.env, timeout=300)
            self.started = True
        return self

    def pid(self):
        try:
            return int(open(os.path.join(self.run_dir, "pid")).read().strip())
        except (OSError, ValueError):
            return None

    def stop(self):
        for p in self.pending:
            p.wait()
        if self.started and not self.keep:
            log("broker: stopping the broker this run started, wiping its data")
            subprocess.run(["bash", KAFKA_SH, "stop"], env=self.env, capture_output=True)
            subprocess.run(["rm", "-rf", os.path.join(self.run_dir, "data")])

    def _tool(self, cls, *args, what, timeout=120):
        cmd = ["java", "-Xmx256m", "-cp", os.path.join(self.libs, "*"), "-Dlog4j2.level=error", cls, "--bootstrap-server", self.bootstrap, *args]
        return run(cmd, what, timeout=timeout)

    def delete_topics(self, regex, wait=True):
        """Deletes the topics matching regex (frees the broker's disk between runs); errors ignored.
        wait=False: in the background (the JVM tool takes seconds); stop() waits for those."""
        if not wait:
            cmd = ["java", "-Xmx256m", "-cp", os.path.join(self.libs, "*"), "-Dlog4j2.level=error", "org.apache.kafka.tools.TopicCommand",
                   "--bootstrap-server", self.bootstrap, "--delete", "--topic", regex]
            self.pending.append(subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
            return
        try:
            self._tool("org.apache.kafka.tools.TopicCommand", "--delete", "--topic", regex, what=f"deleting topics {regex}")
        except BenchError:
            pass

    def retention(self, topic, retention_ms, segment_ms=60000):
        """Shortens a topic's retention (soak: the log must not grow without bound either)."""
        self._tool("org.apache.kafka.tools.ConfigCommand", "--alter", "--entity-type", "topics", "--entity-name", topic,
                   "--add-config", f"retention.ms={retention_ms},segment.ms={segment_ms}", what=f"shortening the retention of {topic}")

    def end_offsets(self, topic):
        """{partition: end offset} of topic."""
        out = self._tool("org.apache.kafka.tools.GetOffsetShell", "--topic", topic, "--time", "-1", what=f"reading the end offsets of {topic}")
        ends = {}
        for line in out.split():
            t, p, o = line.rsplit(":", 2)
            if t == topic:
                ends[int(p)] = int(o)
        if not ends:
            raise BenchError(f"topic {topic} has no partitions on {self.bootstrap}")
        return ends
