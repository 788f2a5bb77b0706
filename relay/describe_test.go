package relay_test

import (
	"context"
	"testing"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"

	"github.com/gormoutbox/outbox"
	"github.com/gormoutbox/outbox/adapters/inproc"
	"github.com/gormoutbox/outbox/adapters/outboxasynq"
	"github.com/gormoutbox/outbox/adapters/outboxredis"
	"github.com/gormoutbox/outbox/relay"
)

// The adapters say where they deliver, for heartbeats and "outbox stats".
func TestAdaptersDescribeThemselves(t *testing.T) {
	client := asynq.NewClient(asynq.RedisClientOpt{Addr: "127.0.0.1:1"})
	defer client.Close()
	rdb := redis.NewClient(&redis.Options{Addr: "cache:6380", DB: 2})
	defer rdb.Close()
	mux := inproc.NewMux(nil)
	for _, typ := range []string{"order.paid", "order.created"} {
		if err := mux.HandleFunc(typ, "mail", func(context.Context, *outbox.Envelope) error { return nil }); err != nil {
			t.Fatal(err)
		}
	}
	topic := func(e *outbox.Envelope) string { return e.Topic }
	cases := []struct {
		pub  relay.Describer
		want string
	}{
		{outboxasynq.NewPublisher(client), "asynq queue default (or the event's Topic)"},
		{outboxasynq.NewPublisher(client, outboxasynq.WithQueue(topic)), "asynq queue chosen by WithQueue"},
		{outboxredis.NewStreamPublisher(rdb), "redis stream outbox (or the event's Topic) on cache:6380 db 2"},
		{outboxredis.NewStreamPublisher(rdb, outboxredis.WithStreamPrefix("app:"), outboxredis.WithDefaultStream("ev")),
			"redis stream app:ev (or app:<Topic>) on cache:6380 db 2"},
		{outboxredis.NewStreamPublisher(rdb, outboxredis.WithStreamFunc(topic)), "redis stream <chosen by WithStreamFunc> on cache:6380 db 2"},
		{inproc.NewMux(nil), "inproc, no handlers"},
		{mux, "inproc handlers of order.created, order.paid"},
	}
	for _, c := range cases {
		if got := c.pub.Describe(); got != c.want {
			t.Errorf("%T.Describe() = %q, want %q", c.pub, got, c.want)
		}
	}
}
