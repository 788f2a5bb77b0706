package outboxredis_test

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/gormoutbox/outbox"
	"github.com/gormoutbox/outbox/adapters/outboxredis"
	"github.com/gormoutbox/outbox/internal/testenv"
	"github.com/gormoutbox/outbox/relay"
)

func TestEntriesDecodeBackToTheEnvelopes(t *testing.T) {
	rdb := newRedis(t)
	stream := streamName(t, rdb, "pub-roundtrip")
	full := &outbox.Envelope{
		ID: "ev-1", Type: "order.created", AggregateType: "order", AggregateID: "42",
		PartitionKey: "customer-7", TenantID: "acme", Topic: stream, Version: 3, Attempt: 2,
		Payload: []byte(`{"total":12.5,"items":["a","b"]}`),
		Headers: map[string]string{
			"traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
			"tracestate":  "vendor=x",
			"x-request":   "r-1",
		},
		CreatedAt: envelope("x", "x").CreatedAt,
	}
	binary := &outbox.Envelope{ID: "ev-2", Type: "blob.stored", Topic: stream, Attempt: 1,
		Payload: []byte{0, 1, 2, 0xff}, CreatedAt: full.CreatedAt}
	own := &outbox.Envelope{ID: "ev-3", Type: "t", Topic: stream, Source: "billing", Attempt: 1}
	in := []*outbox.Envelope{full, binary, own}

	pub := outboxredis.NewStreamPublisher(rdb, outboxredis.WithSource("orders-service"))
	must(t, pub.Validate())
	for i, err := range pub.PublishBatch(t.Context(), in) {
		if err != nil {
			t.Fatalf("event %d: %v", i, err)
		}
	}
	msgs, err := rdb.XRange(t.Context(), stream, "-", "+").Result()
	must(t, err)
	if len(msgs) != len(in) {
		t.Fatalf("%d entries, want %d", len(msgs), len(in))
	}
	for i, m := range msgs {
		want := *in[i]
		if want.Source == "" {
			want.Source = "orders-service"
		}
		if m.Values[outboxredis.FieldID] != want.ID || m.Values[outboxredis.FieldType] != want.Type {
			t.Errorf("entry %d: id/type fields %v, %v", i, m.Values[outboxredis.FieldID], m.Values[outboxredis.FieldType])
		}
		got, err := outbox.DecodeEnvelope([]byte(m.Values[outboxredis.FieldEvent].(string)))
		must(t, err)
		if !got.CreatedAt.Equal(want.CreatedAt) {
			t.Errorf("entry %d: time %v, want %v", i, got.CreatedAt, want.CreatedAt)
		}
		got.CreatedAt = want.CreatedAt
		if !reflect.DeepEqual(got, &want) {
			t.Errorf("entry %d decodes to\n%+v\nwant\n%+v", i, got, &want)
		}
	}
	if in[0].Source != "" {
		t.Errorf("the caller's envelope was modified: Source %q", in[0].Source)
	}
}

func TestStreamFromTopicFunctionOrDefault(t *testing.T) {
	rdb := newRedis(t)
	prefix := streamName(t, rdb, "pub-streams", ":orders", ":mapped-x", ":fallback", ":outbox")
	e := func(id, topic string) *outbox.Envelope {
		env := envelope(id, "t")
		env.Topic = topic
		return env
	}

	byTopic := outboxredis.NewStreamPublisher(rdb, outboxredis.WithStreamPrefix(prefix+":"))
	must(t, byTopic.Publish(t.Context(), e("a", "orders")))
	must(t, byTopic.Publish(t.Context(), e("b", ""))) // default stream "outbox"

	mapped := outboxredis.NewStreamPublisher(rdb,
		outboxredis.WithStreamPrefix(prefix+":"),
		outboxredis.WithDefaultStream("fallback"),
		outboxredis.WithStreamFunc(func(e *outbox.Envelope) string {
			if e.ID == "d" {
				return "" // the default stream
			}
			return "mapped-" + e.Type
		}))
	x := e("c", "orders")
	x.Type = "x"
	must(t, mapped.Publish(t.Context(), x))
	must(t, mapped.Publish(t.Context(), e("d", "orders")))

	want := map[string][]string{
		prefix + ":orders":   {"a"},
		prefix + ":outbox":   {"b"},
		prefix + ":mapped-x": {"c"},
		prefix + ":fallback": {"d"},
	}
	for stream, ids := range want {
		msgs, err := rdb.XRange(t.Context(), stream, "-", "+").Result()
		must(t, err)
		var got []string
		for _, m := range msgs {
			got = append(got, m.Values[outboxredis.FieldID].(string))
		}
		if !reflect.DeepEqual(got, ids) {
			t.Errorf("stream %s holds %v, want %v", stream, got, ids)
		}
	}
	if got := mapped.Stream(x); got != prefix+":mapped-x" {
		t.Errorf("Stream = %q", got)
	}
}

func TestMaxLenTrimsApproximately(t *testing.T) {
	rdb := newRedis(t)
	stream := streamName(t, rdb, "pub-maxlen")
	pub := outboxredis.NewStreamPublisher(rdb, outboxredis.WithDefaultStream(stream), outboxredis.WithMaxLen(100))
	const total = 3000
	for start := 0; start < total; start += 100 {
		batch := make([]*outbox.Envelope, 100)
		for i := range batch {
			batch[i] = envelope(fmt.Sprintf("ev-%d", start+i), "t")
		}
		for _, err := range pub.PublishBatch(t.Context(), batch) {
			must(t, err)
		}
	}
	n, err := rdb.XLen(t.Context(), stream).Result()
	must(t, err)
	if n < 100 || n > 400 {
		t.Errorf("XLEN %d after %d appends with MAXLEN ~ 100: want at least 100 and well below %d", n, total, total)
	}
	// The newest entry is kept.
	last, err := rdb.XRevRangeN(t.Context(), stream, "+", "-", 1).Result()
	must(t, err)
	if len(last) != 1 || last[0].Values[outboxredis.FieldID] != fmt.Sprintf("ev-%d", total-1) {
		t.Errorf("newest entry %v", last)
	}
}

func TestBatchReportsEachEntrysOwnResult(t *testing.T) {
	rdb := newRedis(t)
	good := streamName(t, rdb, "pub-batch-good")
	bad := streamName(t, rdb, "pub-batch-bad")
	must(t, rdb.Set(t.Context(), bad, "not a stream", 0).Err()) // XADD to it: WRONGTYPE

	es := []*outbox.Envelope{envelope("a", "t"), envelope("b", "t"), nil, envelope("c", "t")}
	es[0].Topic, es[1].Topic, es[3].Topic = good, bad, good
	errs := outboxredis.NewStreamPublisher(rdb).PublishBatch(t.Context(), es)
	if len(errs) != len(es) {
		t.Fatalf("%d results for %d events", len(errs), len(es))
	}
	if errs[0] != nil || errs[3] != nil {
		t.Errorf("good entries failed: %v, %v", errs[0], errs[3])
	}
	if errs[1] == nil || outbox.IsUnavailable(errs[1]) || outbox.IsPermanent(errs[1]) {
		t.Errorf("WRONGTYPE entry: %v, want an ordinary (retryable) error", errs[1])
	}
	if !outbox.IsPermanent(errs[2]) {
		t.Errorf("nil envelope: %v, want permanent", errs[2])
	}
	if n := rdb.XLen(t.Context(), good).Val(); n != 2 {
		t.Errorf("good stream holds %d entries, want 2", n)
	}
}

func TestPublisherValidate(t *testing.T) {
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"}) // never dialled
	defer rdb.Close()
	cases := map[string]*outboxredis.StreamPublisher{
		"nil client":     outboxredis.NewStreamPublisher(nil),
		"empty source":   outboxredis.NewStreamPublisher(rdb, outboxredis.WithSource("")),
		"empty default":  outboxredis.NewStreamPublisher(rdb, outboxredis.WithDefaultStream("")),
		"nil stream fn":  outboxredis.NewStreamPublisher(rdb, outboxredis.WithStreamFunc(nil)),
		"negative len":   outboxredis.NewStreamPublisher(rdb, outboxredis.WithMaxLen(-1)),
		"empty producer": outboxredis.NewStreamPublisher(rdb, outboxredis.WithIdempotentProducer("")),
		"nil logger":     outboxredis.NewStreamPublisher(rdb, outboxredis.WithLogger(nil)),
	}
	db := testenv.Open(t, testenv.SQLite)
	must(t, db.Use(&outbox.Plugin{AutoMigrate: true}))
	for name, pub := range cases {
		err := pub.Validate()
		if !errors.Is(err, outboxredis.ErrInvalidOption) {
			t.Errorf("%s: Validate = %v, want ErrInvalidOption", name, err)
		}
		if _, err := relay.New(db, pub); !errors.Is(err, outboxredis.ErrInvalidOption) {
			t.Errorf("%s: relay.New = %v, want it refused", name, err)
		}
	}
	ok := outboxredis.NewStreamPublisher(rdb, outboxredis.WithMaxLen(0), outboxredis.WithStreamPrefix(""))
	if err := ok.Validate(); err != nil {
		t.Errorf("valid options: %v", err)
	}
}

func TestIdempotentProducerFallsBackBeforeRedis86(t *testing.T) {
	rdb := newRedis(t)
	info := rdb.Info(t.Context(), "server").Val()
	stream := streamName(t, rdb, "pub-idmp")
	pub := outboxredis.NewStreamPublisher(rdb, outboxredis.WithDefaultStream(stream),
		outboxredis.WithIdempotentProducer("relay"), outboxredis.WithLogger(testLogger(t)))
	e := envelope("same", "t")
	for range 2 {
		must(t, pub.Publish(t.Context(), e))
		for _, err := range pub.PublishBatch(t.Context(), []*outbox.Envelope{e}) {
			must(t, err)
		}
	}
	n := rdb.XLen(t.Context(), stream).Val()
	// Redis 7 appends every copy; from 8.6 IDMP keeps one.
	if n != 4 && n != 1 {
		t.Errorf("XLEN %d, want 4 (no IDMP) or 1 (IDMP); server: %.40q", n, info)
	}
}

func TestOutageIsUnavailable(t *testing.T) {
	addr := testenv.RedisAddr(t)
	proxy := testenv.NewProxy(t, addr)
	rdb := newRedisAt(t, proxy.Addr())
	stream := streamName(t, newRedis(t), "pub-outage")
	pub := outboxredis.NewStreamPublisher(rdb, outboxredis.WithDefaultStream(stream))
	must(t, pub.Publish(t.Context(), envelope("before", "t"))) // a pooled connection exists

	proxy.Cut()
	err := pub.Publish(t.Context(), envelope("during", "t"))
	if !outbox.IsUnavailable(err) {
		t.Errorf("Publish during a cut: %v, want Unavailable", err)
	}
	for i, err := range pub.PublishBatch(t.Context(), []*outbox.Envelope{envelope("b1", "t"), envelope("b2", "t")}) {
		if !outbox.IsUnavailable(err) {
			t.Errorf("PublishBatch entry %d during a cut: %v, want Unavailable", i, err)
		}
	}
	refused := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", MaxRetries: -1})
	defer refused.Close()
	if err := outboxredis.NewStreamPublisher(refused).Publish(t.Context(), envelope("x", "t")); !outbox.IsUnavailable(err) {
		t.Errorf("connection refused: %v, want Unavailable", err)
	}

	proxy.Restore()
	must(t, pub.Publish(context.Background(), envelope("after", "t")))
	if n := rdb.XLen(t.Context(), stream).Val(); n != 2 {
		t.Errorf("XLEN %d, want 2 (before and after)", n)
	}
}

// WithKeyChain: each keyed entry names the previous entry of its key in
// its stream, in a batch and across calls; unkeyed entries name none.
func TestKeyChainNamesEachKeysPreviousEntry(t *testing.T) {
	rdb := newRedis(t)
	stream := streamName(t, rdb, "chain")
	pub := outboxredis.NewStreamPublisher(rdb, outboxredis.WithDefaultStream(stream), outboxredis.WithKeyChain(), outboxredis.WithMaxLen(1000))
	keyed := func(id, key string) *outbox.Envelope { e := envelope(id, "t"); e.PartitionKey = key; return e }
	for i, err := range pub.PublishBatch(t.Context(), []*outbox.Envelope{
		keyed("a1", "a"), keyed("b1", "b"), envelope("n1", "t"), keyed("a2", "a"), keyed("b2", "b"),
	}) {
		if err != nil {
			t.Fatalf("entry %d: %v", i, err)
		}
	}
	must(t, pub.Publish(t.Context(), keyed("a3", "a")))
	entries, err := rdb.XRange(t.Context(), stream, "-", "+").Result()
	must(t, err)
	entryOf, after := map[string]string{}, map[string]any{}
	for _, m := range entries {
		id := m.Values[outboxredis.FieldID].(string)
		entryOf[id], after[id] = m.ID, m.Values[outboxredis.FieldAfter]
	}
	want := map[string]any{"a1": nil, "b1": nil, "n1": nil, "a2": entryOf["a1"], "b2": entryOf["b1"], "a3": entryOf["a2"]}
	for id, w := range want {
		if after[id] != w {
			t.Errorf("entry of %s: after = %v, want %v", id, after[id], w)
		}
	}
	last, err := rdb.Get(t.Context(), outboxredis.ChainKey(stream, "a")).Result()
	must(t, err)
	if last != entryOf["a3"] {
		t.Errorf("chain of key a ends at %s, want %s", last, entryOf["a3"])
	}
}

// The publisher says where it appends, for relay heartbeats and "outbox
// stats".
func TestPublisherDescribesItself(t *testing.T) {
	rdb := redis.NewClient(&redis.Options{Addr: "cache:6380", DB: 2}) // never dialled
	defer rdb.Close()
	topic := func(e *outbox.Envelope) string { return e.Topic }
	for _, c := range []struct {
		pub  relay.Describer
		want string
	}{
		{outboxredis.NewStreamPublisher(rdb), "redis stream outbox (or the event's Topic) on cache:6380 db 2"},
		{outboxredis.NewStreamPublisher(rdb, outboxredis.WithStreamPrefix("app:"), outboxredis.WithDefaultStream("ev")),
			"redis stream app:ev (or app:<Topic>) on cache:6380 db 2"},
		{outboxredis.NewStreamPublisher(rdb, outboxredis.WithStreamFunc(topic)), "redis stream <chosen by WithStreamFunc> on cache:6380 db 2"},
	} {
		if got := c.pub.Describe(); got != c.want {
			t.Errorf("Describe() = %q, want %q", got, c.want)
		}
	}
}
