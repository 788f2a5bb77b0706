package relay

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgproto3"
)

// walTx is one committed transaction read from the slot: its events (the
// content of its messages) and the partition keys of the unfinished rows
// it inserted into the outbox table, in the order written.
type walTx struct {
	end    pglogrepl.LSN // the transaction's end: confirmed once it is settled
	commit time.Time
	items  []walItem
}

// walItem is a message, decoded by the reader into its event, or (ev nil)
// the key of a row inserted into the outbox table, which the key's later
// events must wait behind.
type walItem struct {
	ev  *walEvent // nil: a row's key
	key string
}

// statusEvery is how often the reader reports the confirmed position when
// it has not changed (PostgreSQL's wal_sender_timeout is 60s by default);
// readTick bounds how late a new confirmed position is reported.
const (
	statusEvery = 10 * time.Second
	readTick    = 100 * time.Millisecond
)

// replicationDSN returns dsn opening a replication connection.
func replicationDSN(dsn string) string {
	if strings.Contains(dsn, "://") {
		if strings.Contains(dsn, "?") {
			return dsn + "&replication=database"
		}
		return dsn + "?replication=database"
	}
	return dsn + " replication=database"
}

// startStream opens a replication connection and starts streaming the
// slot from its confirmed position, with pgoutput's messages.
func (s *walStreamer) startStream(ctx context.Context) (*pgconn.PgConn, error) {
	cctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	conn, err := pgconn.Connect(cctx, replicationDSN(s.dsn))
	if err != nil {
		return nil, fmt.Errorf("opening the replication connection: %w", err)
	}
	args := []string{"proto_version '1'", "publication_names '" + s.setup.Publication + "'", "messages 'true'"}
	if err := pglogrepl.StartReplication(cctx, conn, s.setup.Slot, 0, pglogrepl.StartReplicationOptions{PluginArgs: args}); err != nil {
		_ = conn.Close(context.Background())
		return nil, err
	}
	return conn, nil
}

// reader reads one replication connection.
type reader struct {
	s        *walStreamer
	conn     *pgconn.PgConn
	tx       *walTx
	relation uint32 // the outbox table's relation id; 0 until announced
	keyCol   int
	stateCol int

	pushedEnd pglogrepl.LSN // the end of the last transaction pushed
	idleEnd   pglogrepl.LSN // a later position with nothing to deliver before it
	reported  pglogrepl.LSN
	lastSent  time.Time // when reported was sent
	nextTick  time.Time // the read deadline
}

// read receives transactions and pushes those with events (or keys) to
// s.txs until ctx ends or the connection fails; it reports the settled
// position to the server as it advances.
func (rd *reader) read(ctx context.Context) error {
	for ctx.Err() == nil {
		if err := rd.status(false); err != nil {
			return err
		}
		msg, err := rd.conn.ReceiveMessage(context.Background())
		var ne net.Error
		if errors.As(err, &ne) && ne.Timeout() {
			continue
		}
		if err != nil {
			return fmt.Errorf("receiving from the slot: %w", err)
		}
		switch m := msg.(type) {
		case *pgproto3.ErrorResponse:
			return pgconn.ErrorResponseToPgError(m)
		case *pgproto3.CopyData:
			if err := rd.copyData(ctx, m.Data); err != nil {
				return err
			}
		}
	}
	return nil
}

// status reports the confirmed position when it advanced (the deliverer
// settled a batch: seen within readTick, the read deadline), every
// statusEvery, or at once when force; and renews the read deadline.
func (rd *reader) status(force bool) error {
	now := time.Now()
	if target := rd.confirmable(); force || target != rd.reported || !now.Before(rd.lastSent.Add(statusEvery)) {
		if err := pglogrepl.SendStandbyStatusUpdate(context.Background(), rd.conn, pglogrepl.StandbyStatusUpdate{WALWritePosition: target}); err != nil {
			return fmt.Errorf("confirming %s: %w", target, err)
		}
		rd.reported, rd.lastSent = target, now
	}
	if !now.Before(rd.nextTick) {
		rd.nextTick = now.Add(readTick)
		_ = rd.conn.Conn().SetReadDeadline(rd.nextTick)
	}
	return nil
}

// confirmable is the position the slot may confirm: the end of the last
// settled transaction, or past it when every transaction pushed is settled
// and the server has sent nothing to deliver since.
func (rd *reader) confirmable() pglogrepl.LSN {
	settled := pglogrepl.LSN(rd.s.settled.Load())
	if settled >= rd.pushedEnd {
		return max(settled, rd.idleEnd)
	}
	return settled
}

// copyData handles one message of the replication stream.
func (rd *reader) copyData(ctx context.Context, data []byte) error {
	if len(data) == 0 {
		return nil
	}
	switch data[0] {
	case pglogrepl.PrimaryKeepaliveMessageByteID:
		ka, err := pglogrepl.ParsePrimaryKeepaliveMessage(data[1:])
		if err != nil {
			return err
		}
		if rd.tx == nil {
			rd.idleEnd = max(rd.idleEnd, ka.ServerWALEnd)
		}
		if ka.ReplyRequested {
			return rd.status(true)
		}
	case pglogrepl.XLogDataByteID:
		xld, err := pglogrepl.ParseXLogData(data[1:])
		if err != nil {
			return err
		}
		m, err := pglogrepl.Parse(xld.WALData)
		if err != nil {
			return fmt.Errorf("decoding the stream: %w", err)
		}
		return rd.message(ctx, m)
	}
	return nil
}

// message adds a pgoutput message to the transaction being read, and
// pushes the transaction at its commit.
func (rd *reader) message(ctx context.Context, m pglogrepl.Message) error {
	switch m := m.(type) {
	case *pglogrepl.BeginMessage:
		rd.tx = &walTx{commit: m.CommitTime}
	case *pglogrepl.LogicalDecodingMessage:
		if rd.tx != nil && m.Transactional && m.Prefix == rd.s.setup.Prefix {
			// Decoded here, beside the deliverer (the decoder copies what
			// it keeps of the receive buffer).
			rd.tx.items = append(rd.tx.items, walItem{ev: rd.s.eventOf(m, rd.tx.commit)})
		}
	case *pglogrepl.RelationMessage:
		rd.relationOf(m)
	case *pglogrepl.InsertMessage:
		rd.inserted(m)
	case *pglogrepl.CommitMessage:
		tx := rd.tx
		rd.tx = nil
		if tx == nil {
			return nil
		}
		tx.end = m.TransactionEndLSN
		if len(tx.items) == 0 {
			rd.idleEnd = max(rd.idleEnd, tx.end)
			return nil
		}
		return rd.push(ctx, tx)
	}
	return nil
}

// relationOf notes the outbox table's relation id and columns.
func (rd *reader) relationOf(m *pglogrepl.RelationMessage) {
	if m.RelationName != rd.s.setup.Table {
		return
	}
	rd.relation, rd.keyCol, rd.stateCol = m.RelationID, -1, -1
	for i, c := range m.Columns {
		switch c.Name {
		case "partition_key":
			rd.keyCol = i
		case "status":
			rd.stateCol = i
		}
	}
}

// inserted notes the key of an unfinished keyed row inserted into the
// outbox table (by a writer in table mode, or a spill).
func (rd *reader) inserted(m *pglogrepl.InsertMessage) {
	if rd.tx == nil || m.RelationID != rd.relation || rd.keyCol < 0 || rd.stateCol < 0 || m.Tuple == nil ||
		len(m.Tuple.Columns) <= max(rd.keyCol, rd.stateCol) {
		return
	}
	key, state := string(m.Tuple.Columns[rd.keyCol].Data), string(m.Tuple.Columns[rd.stateCol].Data)
	if key != "" && state != "dead" && state != "published" {
		rd.tx.items = append(rd.tx.items, walItem{key: key})
	}
}

// push hands tx to the deliverer, reporting the confirmed position while
// it waits (a deliverer backing off from an unavailable publisher).
func (rd *reader) push(ctx context.Context, tx *walTx) error {
	t := time.NewTicker(statusEvery / 2)
	defer t.Stop()
	for {
		select {
		case rd.s.txs <- tx:
			rd.pushedEnd = tx.end
			rd.idleEnd = 0
			rd.s.received(tx)
			return nil
		case <-ctx.Done():
			return nil
		case <-t.C:
			if err := rd.status(true); err != nil {
				return err
			}
		}
	}
}
