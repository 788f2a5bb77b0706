package dialect

import (
	"strings"
	"time"
)

// Builder accumulates SQL text and its arguments in order, with the
// dialect's clock expressions.
type Builder struct {
	kind Kind
	sb   strings.Builder
	args []any
}

// NewBuilder returns an empty Builder for k.
func (k Kind) NewBuilder() *Builder { return &Builder{kind: k} }

// Add appends sql and its arguments.
func (b *Builder) Add(sql string, args ...any) {
	b.sb.WriteString(sql)
	b.args = append(b.args, args...)
}

// Now appends the current time by the database clock.
func (b *Builder) Now() {
	s, a := b.kind.Now()
	b.Add(s, a...)
}

// NowPlus appends the current time plus d by the database clock.
func (b *Builder) NowPlus(d time.Duration) {
	s, a := b.kind.NowPlus(d)
	b.Add(s, a...)
}

// IDList appends "col is one of ids" in the dialect's form (see
// sqldriver.Statements.IDList).
func (b *Builder) IDList(col string, ids []int64) {
	s, a := b.kind.Driver().IDList(col, ids)
	b.Add(s, a...)
}

// SQL returns the text built so far.
func (b *Builder) SQL() string { return b.sb.String() }

// Args returns the arguments of the text built so far.
func (b *Builder) Args() []any { return b.args }
