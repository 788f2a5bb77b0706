package main

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"gorm.io/gorm"

	"github.com/gormoutbox/outbox"
	"github.com/gormoutbox/outbox/adapters/outboxkafka"
	"github.com/gormoutbox/outbox/internal/testenv"
)

// kafkaRecords reads n records from the topics, from their start, waiting
// up to 30 s for them.
func kafkaRecords(t *testing.T, seeds []string, n int, topics ...string) []*kgo.Record {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(seeds...), kgo.ConsumeTopics(topics...),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	must(t, err)
	defer cl.Close()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	var got []*kgo.Record
	for len(got) < n {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			t.Fatalf("topics %v: %d records, want %d", topics, len(got), n)
		}
		fs.EachError(func(topic string, p int32, err error) { t.Logf("fetching %s/%d: %v", topic, p, err) })
		got = append(got, fs.Records()...)
	}
	return got
}

func header(r *kgo.Record, name string) string {
	for _, h := range r.Headers {
		if h.Key == name {
			return string(h.Value)
		}
	}
	return ""
}

// relay --to kafka produces to Kafka through outboxkafka (on kfake, three
// in-process brokers speaking the real protocol): the Topic names the
// topic, --topic is the topic of events without one, the partition key
// keys the record and keeps a key's events in commit order on one
// partition; with metrics and a description. An event without a topic is
// dead at once with the reason, --kafka-layout debezium writes Debezium's
// records, and a cluster that is down spends no attempt.
func TestRelayToKafka(t *testing.T) {
	c, err := kfake.NewCluster(kfake.NumBrokers(3), kfake.SeedTopics(3, "orders", "fallback", "outbox.event.order"))
	must(t, err)
	t.Cleanup(c.Close)
	seeds := c.ListenAddrs()
	brokers := strings.Join(seeds, ",")

	u, db := cliDB(t, testenv.SQLite)
	cmd(t, u, "migrate").ok(t)
	must(t, db.Transaction(func(tx *gorm.DB) error {
		for i := range 12 {
			if err := outbox.Emit(tx, outbox.Event{ID: fmt.Sprintf("k%d-%02d", i%3, i), Type: "cli.test", Topic: "orders", PartitionKey: fmt.Sprintf("key-%d", i%3)}); err != nil {
				return err
			}
		}
		return nil
	}))
	emitTopic(t, db, "", ids("plain", 4)...)
	addr := freeAddr(t)
	_, stderr, stop := startRelay(t, u, "--to", "kafka", "--kafka-brokers", brokers, "--topic", "fallback", "--metrics-addr", addr, "--worker-id", "cli-kafka")
	recs := kafkaRecords(t, seeds, 16, "orders", "fallback")
	byKey := map[string][]string{}
	partitions := map[string]map[int32]bool{}
	for _, r := range recs {
		e, err := outbox.DecodeEnvelope(r.Value)
		if err != nil || header(r, "content-type") != outboxkafka.ContentType {
			t.Errorf("record %s/%d@%d: content-type %q, %v", r.Topic, r.Partition, r.Offset, header(r, "content-type"), err)
			continue
		}
		if want := map[bool]string{true: "fallback", false: "orders"}[strings.HasPrefix(e.ID, "plain")]; r.Topic != want {
			t.Errorf("event %s in topic %s, want %s", e.ID, r.Topic, want)
		}
		if r.Topic == "orders" {
			if string(r.Key) != e.PartitionKey {
				t.Errorf("event %s keyed %q, want its partition key %q", e.ID, r.Key, e.PartitionKey)
			}
			byKey[e.PartitionKey] = append(byKey[e.PartitionKey], e.ID)
			if partitions[e.PartitionKey] == nil {
				partitions[e.PartitionKey] = map[int32]bool{}
			}
			partitions[e.PartitionKey][r.Partition] = true
		}
	}
	for key, got := range byKey {
		if !slices.IsSorted(got) || len(got) != 4 || len(partitions[key]) != 1 {
			t.Errorf("key %s: %v on partitions %v, want its 4 events in commit order on one partition", key, got, partitions[key])
		}
	}
	waitPublished(t, addr, 16)
	if p, w := publisherOf(t, u, "cli-kafka"), "kafka topic <Topic> (default fallback), structured layout on "+brokers; p != w {
		t.Errorf("stats describes the relay's publisher as %q, want %q", p, w)
	}
	stop()
	if t.Failed() {
		t.Logf("relay stderr:\n%s", stderr)
	}

	emitTopic(t, db, "", "no-topic")
	r := cmd(t, u, "dispatch-once", "--to", "kafka", "--kafka-brokers", brokers, "--json").ok(t)
	var dead outbox.OutboxEvent
	must(t, db.Where("event_id = ?", "no-topic").First(&dead).Error)
	reason := ""
	if dead.LastError != nil {
		reason = *dead.LastError
	}
	if res := decodeJSON[map[string]int](t, r.stdout); res["dead"] != 1 || dead.Status != outbox.StatusDead || !strings.Contains(reason, "topic") {
		t.Errorf("dispatch-once of an event without a topic, without --topic: %v; the event is %s (%q), want dead naming the topic", res, dead.Status, reason)
	}

	must(t, db.Transaction(func(tx *gorm.DB) error {
		return outbox.Emit(tx, outbox.Event{ID: "dbz", Type: "order.created", AggregateType: "order", AggregateID: "42", Payload: map[string]int{"total": 7}})
	}))
	r = cmd(t, u, "dispatch-once", "--to", "kafka", "--kafka-brokers", brokers, "--kafka-layout", "debezium", "--json").ok(t)
	if res := decodeJSON[map[string]int](t, r.stdout); res["published"] != 1 {
		t.Errorf("dispatch-once --kafka-layout debezium: %v", res)
	}
	if d := kafkaRecords(t, seeds, 1, "outbox.event.order")[0]; string(d.Key) != "42" || header(d, "id") != "dbz" || string(d.Value) != `{"total":7}` || len(d.Headers) != 1 {
		t.Errorf("the Debezium record: key %q, headers %v, value %s", d.Key, d.Headers, d.Value)
	}

	c.Close()
	emitTopic(t, db, "orders", "down")
	r = cmd(t, u, "dispatch-once", "--to", "kafka", "--kafka-brokers", brokers, "--lease", "5s", "--json").ok(t)
	if res := decodeJSON[map[string]int](t, r.stdout); res["released"] != 1 {
		t.Errorf("dispatch-once to a cluster that is down: %v, want the event released", res)
	}
	untouched(t, db, "down")
	if r := cmd(t, u, "relay", "--to", "kafka", "--kafka-brokers", "nohostport"); r.code != 2 || !strings.Contains(r.stderr, "want host:port") {
		t.Errorf("relay --to kafka with a bad broker: exit %d, %s", r.code, r.stderr)
	}
}
