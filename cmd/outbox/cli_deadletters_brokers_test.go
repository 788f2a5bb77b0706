package main

import (
	"context"
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/hibiken/asynq"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/redis/go-redis/v9"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/gormoutbox/outbox/adapters/outboxamqp"
	"github.com/gormoutbox/outbox/adapters/outboxasynq"
	"github.com/gormoutbox/outbox/adapters/outboxkafka"
	"github.com/gormoutbox/outbox/adapters/outboxnats"
	"github.com/gormoutbox/outbox/adapters/outboxredis"
	"github.com/gormoutbox/outbox/consume"
	"github.com/gormoutbox/outbox/internal/testenv"
)

// runConsumer runs c until t ends.
func runConsumer(t *testing.T, c *consume.Consumer, err error) {
	t.Helper()
	must(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			t.Errorf("the consumer did not stop within 10s")
		}
	})
}

// consumerOptions are quick retries, and logs with OUTBOX_TEST_LOG=1.
func consumerOptions(t *testing.T, more ...consume.Option) []consume.Option {
	return append([]consume.Option{consume.WithLogger(testenv.Logger(t)), consume.WithRetryDelay(50 * time.Millisecond),
		consume.WithMaxRetryDelay(50 * time.Millisecond)}, more...)
}

// redisClient is a client of the test's Redis whose keys containing name
// are deleted when t ends.
func redisClient(t *testing.T, addr, name string) *redis.Client {
	t.Helper()
	rdb := redis.NewClient(&redis.Options{Addr: addr})
	t.Cleanup(func() {
		ctx := context.Background()
		keys, _ := rdb.Keys(ctx, "*"+name+"*").Result()
		if len(keys) > 0 {
			_ = rdb.Del(ctx, keys...).Err()
		}
		_ = rdb.SRem(ctx, "asynq:queues", name).Err()
		_ = rdb.Close()
	})
	return rdb
}

// A Redis Streams consumer's dead-letter stream, listed, replayed and
// served by the admin page.
func TestDeadLettersRedis(t *testing.T) {
	addr := testenv.RedisAddr(t)
	t.Parallel()
	u := cliEnvDB(t)
	stream := testenv.Name("cli-dl")
	rdb := redisClient(t, addr, stream)
	var r refuser
	c, err := outboxredis.NewConsumer(rdb, stream, "billing", "c1", r.handler(), consumerOptions(t,
		outboxredis.WithDeadLetterStream(stream+".dead"), outboxredis.WithBlock(50*time.Millisecond))...)
	runConsumer(t, c, err)
	d := deadCase{flag: "redis://" + addr + "/0?stream=" + url.QueryEscape(stream+".dead"), name: "redis:" + stream + ".dead", missing: "1-1", reason: deadReason, deliveries: 1}
	e := deadEnvelope("ev-redis", stream)
	publishDead(t, outboxredis.NewStreamPublisher(rdb), e, u, d)
	m, _ := findDead(t, deadListOf(t, u, d), e.ID)

	base, _ := startAdmin(t, []string{"OUTBOX_DB=" + u}, "--dead-letters", "billing="+d.flag)
	res, err := (&http.Client{Timeout: 10 * time.Second}).Get(base + "consumers?source=billing")
	must(t, err)
	body, _ := io.ReadAll(res.Body)
	res.Body.Close()
	if res.StatusCode != http.StatusOK || !strings.Contains(string(body), m.ID) || !strings.Contains(string(body), e.ID) {
		t.Errorf("the admin page's dead letter billing: %d\n%s", res.StatusCode, body)
	}
	checkDeadLetter(t, u, d, &r, e)
}

// asynq's archive of a queue, listed and replayed.
func TestDeadLettersAsynq(t *testing.T) {
	addr := testenv.RedisAddr(t)
	t.Parallel()
	u := cliEnvDB(t)
	q := testenv.Name("cli-dlq")
	redisClient(t, addr, q) // deletes the queue's keys
	var r refuser
	mux := asynq.NewServeMux()
	mux.Handle("order.created", outboxasynq.Handler(r.handler(), consumerOptions(t)...))
	srv := asynq.NewServer(asynq.RedisClientOpt{Addr: addr}, asynq.Config{Concurrency: 1, Queues: map[string]int{q: 1},
		IsFailure: outboxasynq.IsFailure, TaskCheckInterval: 20 * time.Millisecond, DelayedTaskCheckInterval: 100 * time.Millisecond,
		ShutdownTimeout: 5 * time.Second, LogLevel: asynq.FatalLevel})
	must(t, srv.Start(mux))
	t.Cleanup(srv.Shutdown)
	client := asynq.NewClient(asynq.RedisClientOpt{Addr: addr})
	t.Cleanup(func() { _ = client.Close() })
	d := deadCase{flag: "asynq://" + addr + "/0?queue=" + q, name: "asynq:" + q, missing: "nope", reason: deadReason, deliveries: 1}
	e := deadEnvelope("ev-asynq", q)
	publishDead(t, outboxasynq.NewPublisher(client), e, u, d)
	checkDeadLetter(t, u, d, &r, e)
}

// A RabbitMQ dead-letter queue, listed and replayed.
func TestDeadLettersAMQP(t *testing.T) {
	brokerURL := amqpURLOf(t)
	t.Parallel()
	u := cliEnvDB(t)
	conn, err := amqp.Dial(brokerURL)
	must(t, err)
	t.Cleanup(func() { _ = conn.Close() })
	ch, err := conn.Channel()
	must(t, err)
	q := testenv.Name("cli-dl")
	dlq := q + ".dead"
	_, err = ch.QueueDeclare(dlq, false, false, false, false, nil)
	must(t, err)
	_, err = ch.QueueDeclare(q, false, false, false, false, amqp.Table{"x-dead-letter-exchange": "", "x-dead-letter-routing-key": dlq})
	must(t, err)
	t.Cleanup(func() {
		if ch, err := conn.Channel(); err == nil {
			_, _ = ch.QueueDelete(q, false, false, false)
			_, _ = ch.QueueDelete(dlq, false, false, false)
		}
	})
	var r refuser
	c, err := outboxamqp.NewConsumer(conn, q, r.handler(), consumerOptions(t)...)
	runConsumer(t, c, err)
	pub, err := outboxamqp.NewPublisher(conn)
	must(t, err)
	d := deadCase{flag: withQuery(t, brokerURL, "queue", dlq), name: "amqp:" + dlq, missing: "nope", reason: "rejected"}
	e := deadEnvelope("ev-amqp", q)
	publishDead(t, pub, e, u, d)
	checkDeadLetter(t, u, d, &r, e)
}

// A NATS dead-letter stream named by the environment, with a label,
// listed and replayed.
func TestDeadLettersNATS(t *testing.T) {
	natsURL := natsURLOf(t)
	t.Parallel()
	u := cliEnvDB(t)
	nc, err := nats.Connect(natsURL)
	must(t, err)
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	must(t, err)
	_, stream := natsStream(t, js)
	_, dead := natsStream(t, js)
	var r refuser
	c, err := outboxnats.NewConsumer(js, stream, "billing", r.handler(), consumerOptions(t,
		outboxnats.WithDeadLetterSubject(dead+".billing"), outboxnats.WithFetchWait(100*time.Millisecond))...)
	runConsumer(t, c, err)
	pub, err := outboxnats.NewPublisher(js, outboxnats.WithSubjectPrefix(stream+"."))
	must(t, err)
	dl := withQuery(t, natsURL, "stream", dead, "subject", dead+".billing")
	d := deadCase{env: []string{deadLettersEnv + "= \tbilling=" + dl + "\n"}, name: "billing", missing: "999999", reason: "no such customer", deliveries: 1}
	e := deadEnvelope("ev-nats", "orders")
	publishDead(t, pub, e, u, d)
	checkDeadLetter(t, u, d, &r, e)
}

// A Kafka dead-letter topic (on kfake), listed and replayed: the replayed
// record is marked, and left out.
func TestDeadLettersKafka(t *testing.T) {
	t.Parallel()
	u := cliEnvDB(t)
	cluster, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(2, "orders", "orders.dead"))
	must(t, err)
	t.Cleanup(cluster.Close)
	seeds := cluster.ListenAddrs()
	opts := []kgo.Opt{kgo.SeedBrokers(seeds...), kgo.MetadataMinAge(20 * time.Millisecond),
		kgo.RetryBackoffFn(func(int) time.Duration { return 20 * time.Millisecond })}
	var r refuser
	c, err := outboxkafka.NewConsumer(opts, "orders", "billing", r.handler(), consumerOptions(t, outboxkafka.WithDeadLetterTopic("orders.dead"))...)
	runConsumer(t, c, err)
	cl, err := kgo.NewClient(opts...)
	must(t, err)
	t.Cleanup(cl.Close)
	pub, err := outboxkafka.NewPublisher(cl)
	must(t, err)
	d := deadCase{flag: "kafka://" + strings.Join(seeds, ",") + "?topic=orders.dead", name: "kafka:orders.dead", missing: "0:999999", reason: deadReason, deliveries: 1}
	e := deadEnvelope("ev-kafka", "orders")
	publishDead(t, pub, e, u, d)
	checkDeadLetter(t, u, d, &r, e)
}
