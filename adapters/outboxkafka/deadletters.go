package outboxkafka

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/gormoutbox/outbox/consume"
)

// The headers a Consumer adds to a record it produces to its dead-letter
// topic (WithDeadLetterTopic), and those of replayed records.
const (
	HeaderDeadReason     = "outbox-dead-reason"     // why it is dead
	HeaderDeadTopic      = "outbox-dead-topic"      // where it was consumed
	HeaderDeadPartition  = "outbox-dead-partition"  // its partition there
	HeaderDeadOffset     = "outbox-dead-offset"     // its offset there
	HeaderDeadGroup      = "outbox-dead-group"      // the consumer group
	HeaderDeadDeliveries = "outbox-dead-deliveries" // its counted runs, the last included
	// HeaderReplayedFrom is on a record ReplayDead produced back to its
	// topic: "<dead-letter topic>/<partition>@<offset>".
	HeaderReplayedFrom = "outbox-replayed-from"
	// HeaderReplayed is on the marker ReplayDead adds to the dead-letter
	// topic once it replayed a record: the replayed record's offset in the
	// same partition.
	HeaderReplayed = "outbox-replayed"
)

// DeadLetters reads a Consumer's dead-letter topic, for the admin page and
// the CLI (consume.DeadLetterReader), and replays its records
// (consume.DeadLetterReplayer). Kafka cannot delete a record: ReplayDead
// produces a replayed record back to its partition and then a marker to
// the dead-letter topic (HeaderReplayed), after which DeadLetters leaves
// it out. Each call makes a client of its own (reading by offset, outside
// any group) and closes it.
type DeadLetters struct {
	client []kgo.Opt
	topic  string
}

var (
	_ consume.DeadLetterReader   = (*DeadLetters)(nil)
	_ consume.DeadLetterReplayer = (*DeadLetters)(nil)
)

// NewDeadLetters returns a reader of the dead-letter topic deadTopic
// through clients made with client (the connection's options, as given to
// NewConsumer).
func NewDeadLetters(client []kgo.Opt, deadTopic string) *DeadLetters {
	return &DeadLetters{client: slices.Clip(client), topic: deadTopic}
}

// DeadLetters returns up to limit dead records after cursor ("" for the
// first page), partition by partition in offset order, leaving out the
// replayed ones and the markers, and the cursor of the next page
// ("partition:offset", "" when there is none). A page reads each partition
// it looks at from the cursor to its end, to find the markers.
func (d *DeadLetters) DeadLetters(ctx context.Context, cursor string, limit int) ([]consume.DeadMessage, string, error) {
	from, at, err := parseID(cursor)
	if err != nil && cursor != "" {
		return nil, "", fmt.Errorf("outboxkafka: dead letters of %s: bad cursor %q", d.topic, cursor)
	}
	ends, err := d.ends(ctx)
	if err != nil {
		return nil, "", err
	}
	var page []consume.DeadMessage
	for _, p := range slices.Sorted(maps.Keys(ends)) {
		if p < from {
			continue
		}
		start := int64(0)
		if p == from {
			start = at
		}
		recs, err := d.read(ctx, p, start, ends[p])
		if err != nil {
			return nil, "", err
		}
		for _, r := range recs {
			if len(page) == limit {
				return page, idOf(r), nil
			}
			page = append(page, deadMessage(r))
		}
	}
	return page, "", nil
}

// ReplayDead produces the dead records of ids ("partition:offset") back to
// the topic and partition they were consumed from, without the dead
// headers and with HeaderReplayedFrom, then marks each replayed
// (HeaderReplayed); ids not found, markers and records replayed already
// are skipped. It returns how many it replayed.
func (d *DeadLetters) ReplayDead(ctx context.Context, ids ...string) (int, error) {
	want := map[int32]map[int64]bool{}
	for _, id := range ids {
		if p, o, err := parseID(id); err == nil {
			if want[p] == nil {
				want[p] = map[int64]bool{}
			}
			want[p][o] = true
		}
	}
	ends, err := d.ends(ctx)
	if err != nil {
		return 0, err
	}
	cl, err := kgo.NewClient(append(d.client, kgo.RecordPartitioner(kgo.ManualPartitioner()))...)
	if err != nil {
		return 0, fmt.Errorf("outboxkafka: dead letters of %s: %w", d.topic, err)
	}
	defer cl.Close()
	n := 0
	for p, offsets := range want {
		recs, err := d.read(ctx, p, slices.Min(slices.Collect(maps.Keys(offsets))), ends[p])
		if err != nil {
			return n, err
		}
		for _, r := range recs {
			if !offsets[r.Offset] {
				continue
			}
			if err := d.replay(ctx, cl, r); err != nil {
				return n, err
			}
			n++
		}
	}
	return n, nil
}

// replay produces r back to where it was consumed, then its marker.
func (d *DeadLetters) replay(ctx context.Context, cl *kgo.Client, r *kgo.Record) error {
	part, err := strconv.Atoi(headerValue(r, HeaderDeadPartition))
	if err != nil {
		return fmt.Errorf("outboxkafka: dead record %s of %s has no source partition", idOf(r), d.topic)
	}
	back := &kgo.Record{Topic: headerValue(r, HeaderDeadTopic), Partition: int32(part), Key: r.Key, Value: r.Value,
		Headers: append(withoutHeaders(r.Headers, "outbox-dead-"), header(HeaderReplayedFrom, fmt.Sprintf("%s/%d@%d", d.topic, r.Partition, r.Offset)))}
	marker := &kgo.Record{Topic: d.topic, Partition: r.Partition, Headers: []kgo.RecordHeader{header(HeaderReplayed, strconv.FormatInt(r.Offset, 10))}}
	for _, rec := range []*kgo.Record{back, marker} {
		if err := cl.ProduceSync(ctx, rec).FirstErr(); err != nil {
			return fmt.Errorf("outboxkafka: replaying %s of %s to %s: %w", idOf(r), d.topic, back.Topic, err)
		}
	}
	return nil
}

// ends returns the end offset of each partition of the topic.
func (d *DeadLetters) ends(ctx context.Context) (map[int32]int64, error) {
	cl, err := kgo.NewClient(d.client...)
	if err != nil {
		return nil, fmt.Errorf("outboxkafka: dead letters of %s: %w", d.topic, err)
	}
	defer cl.Close()
	listed, err := kadm.NewClient(cl).ListEndOffsets(ctx, d.topic)
	if err == nil {
		err = listed.Error()
	}
	if err != nil {
		return nil, fmt.Errorf("outboxkafka: dead letters of %s: listing offsets: %w", d.topic, err)
	}
	ends := map[int32]int64{}
	listed.Each(func(o kadm.ListedOffset) { ends[o.Partition] = o.Offset })
	return ends, nil
}

// read returns the dead records of partition p from offset from up to
// end, in offset order: the markers, and those they mark, left out.
func (d *DeadLetters) read(ctx context.Context, p int32, from, end int64) ([]*kgo.Record, error) {
	if from >= end {
		return nil, nil
	}
	cl, err := kgo.NewClient(append(d.client, kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{
		d.topic: {p: kgo.NewOffset().At(from)}}))...)
	if err != nil {
		return nil, fmt.Errorf("outboxkafka: dead letters of %s: %w", d.topic, err)
	}
	defer cl.Close()
	var recs []*kgo.Record
	replayed := map[int64]bool{}
	for last := from - 1; last+1 < end; {
		fs := cl.PollFetches(ctx)
		if err := fs.Err0(); err != nil {
			return nil, fmt.Errorf("outboxkafka: reading %s/%d: %w", d.topic, p, err)
		}
		fs.EachRecord(func(r *kgo.Record) {
			last = r.Offset
			if m := headerValue(r, HeaderReplayed); m != "" {
				o, _ := strconv.ParseInt(m, 10, 64)
				replayed[o] = true
			} else if r.Offset < end {
				recs = append(recs, r)
			}
		})
	}
	return slices.DeleteFunc(recs, func(r *kgo.Record) bool { return replayed[r.Offset] }), nil
}

// deadMessage describes a dead record.
func deadMessage(r *kgo.Record) consume.DeadMessage {
	m := consume.DeadMessage{ID: idOf(r), Reason: headerValue(r, HeaderDeadReason), DeadAt: r.Timestamp,
		Source: headerValue(r, HeaderDeadTopic) + " (group " + headerValue(r, HeaderDeadGroup) + ")"}
	m.Deliveries, _ = strconv.Atoi(headerValue(r, HeaderDeadDeliveries))
	m.Envelope, _ = decodeRecord(r)
	return m
}

// idOf names a record of a partition: "partition:offset".
func idOf(r *kgo.Record) string { return fmt.Sprintf("%d:%d", r.Partition, r.Offset) }

// parseID reads "partition:offset".
func parseID(id string) (int32, int64, error) {
	ps, os, ok := strings.Cut(id, ":")
	p, perr := strconv.ParseInt(ps, 10, 32)
	o, oerr := strconv.ParseInt(os, 10, 64)
	if !ok || perr != nil || oerr != nil || p < 0 || o < 0 {
		return 0, 0, fmt.Errorf("%q is not partition:offset", id)
	}
	return int32(p), o, nil
}
