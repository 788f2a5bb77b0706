package relay_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"log/slog"
	"time"

	"gorm.io/gorm"
	"gorm.io/gorm/logger"

	"github.com/gormoutbox/outbox"
	"github.com/gormoutbox/outbox/internal/testenv"
	"github.com/gormoutbox/outbox/relay"
)

func exampleDB(name string) *gorm.DB {
	db, err := gorm.Open(testenv.SQLiteDialector("file:"+name+"?mode=memory&cache=shared&_txlock=immediate"), &gorm.Config{Logger: logger.Discard})
	if err != nil {
		log.Fatal(err)
	}
	if err := db.Use(&outbox.Plugin{AutoMigrate: true}); err != nil {
		log.Fatal(err)
	}
	return db
}

// A relay with a publisher of your own. RunOnce delivers one batch; a
// worker process runs Start instead.
func Example() {
	db := exampleDB("relay-example")
	_ = db.Transaction(func(tx *gorm.DB) error {
		return outbox.Emit(tx,
			outbox.Event{Type: "user.signed_up", Payload: map[string]string{"email": "ada@example.com"}},
			outbox.Event{Type: "user.signed_up", Payload: map[string]string{"email": "bob@example.com"}},
		)
	})

	pub := relay.PublisherFunc(func(ctx context.Context, e *outbox.Envelope) error {
		var p struct{ Email string }
		if err := e.Unmarshal(&p); err != nil {
			return outbox.Permanent(err) // retrying cannot fix a bad payload
		}
		fmt.Println("welcome mail to", p.Email, "attempt", e.Attempt)
		return nil
	})
	r, err := relay.New(db, pub, relay.WithConcurrency(1), relay.WithLogger(slog.New(slog.DiscardHandler)))
	if err != nil {
		log.Fatal(err)
	}
	res, err := r.RunOnce(context.Background())
	fmt.Printf("%+v %v\n", res, err)
	// Output:
	// welcome mail to ada@example.com attempt 1
	// welcome mail to bob@example.com attempt 1
	// {Claimed:2 Published:2 Failed:0 Dead:0 Released:0 Lost:0 Abandoned:0 Rescued:0} <nil>
}

// Dead letters: list them, then replay them once the cause is fixed.
func ExampleInspector_ReplayAll() {
	db := exampleDB("relay-replay")
	_ = db.Transaction(func(tx *gorm.DB) error {
		return outbox.Emit(tx, outbox.Event{ID: "invoice-7", Type: "invoice.issued"})
	})
	broken := relay.PublisherFunc(func(context.Context, *outbox.Envelope) error {
		return outbox.Permanent(errors.New("template missing"))
	})
	r, _ := relay.New(db, broken, relay.WithLogger(slog.New(slog.DiscardHandler)))
	_, _ = r.RunOnce(context.Background())

	insp, err := relay.NewInspector(db)
	if err != nil {
		panic(err)
	}
	dead, _ := insp.ListDead(context.Background(), relay.Filter{Type: "invoice.issued"})
	for _, e := range dead {
		fmt.Println(e.EventID, e.Status, *e.LastError)
	}
	n, _ := insp.ReplayAll(context.Background(), relay.Filter{Type: "invoice.issued"})
	fmt.Println("replayed", n)
	stats, _ := insp.GetStats(context.Background())
	fmt.Println(stats.Counts)
	// Output:
	// invoice-7 dead permanent: template missing
	// replayed 1
	// map[pending:1]
}

// One active relay per table: run the same relay in several processes
// with WithSingleActive; one takes the table's advisory lock and claims,
// the others stand by and take over when it stops or dies. On SQLite
// there is no lock and the relay is always active.
func ExampleWithSingleActive() {
	db := exampleDB("relay-single-active")
	_ = db.Transaction(func(tx *gorm.DB) error {
		return outbox.Emit(tx, outbox.Event{Type: "user.signed_up", Payload: map[string]string{"email": "ada@example.com"}})
	})

	published := make(chan string, 1)
	pub := relay.PublisherFunc(func(ctx context.Context, e *outbox.Envelope) error {
		published <- e.Type
		return nil
	})
	r, err := relay.New(db, pub, relay.WithSingleActive(), relay.WithWorkerID("worker-1"),
		relay.WithHeartbeat(100*time.Millisecond), relay.WithLogger(slog.New(slog.DiscardHandler)))
	if err != nil {
		log.Fatal(err)
	}
	insp, err := relay.NewInspector(db)
	if err != nil {
		log.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.Start(ctx) }()
	fmt.Println("published", <-published)
	for {
		// The heartbeats say which relay is active.
		if relays, err := insp.Relays(ctx); err == nil && len(relays) == 1 {
			fmt.Println(relays[0].ID, relays[0].Role)
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	cancel()
	<-done
	// Output:
	// published user.signed_up
	// worker-1 active
}
