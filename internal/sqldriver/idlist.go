package sqldriver

import (
	"strconv"
	"strings"
)

// InList returns "col IN (?, …)" with one argument per id: the IDList of
// databases without array parameters.
func InList(col string, ids []int64) (string, []any) {
	var sb strings.Builder
	sb.Grow(len(col) + 6 + 3*len(ids))
	sb.WriteString(col)
	sb.WriteString(" IN (")
	args := make([]any, len(ids))
	for i, id := range ids {
		if i > 0 {
			sb.WriteString(", ")
		}
		sb.WriteByte('?')
		args[i] = id
	}
	sb.WriteByte(')')
	return sb.String(), args
}

// ArrayLiteral returns ids as a PostgreSQL array literal: {1,2,3}.
func ArrayLiteral(ids []int64) string {
	b := make([]byte, 0, 2+8*len(ids))
	b = append(b, '{')
	for i, id := range ids {
		if i > 0 {
			b = append(b, ',')
		}
		b = strconv.AppendInt(b, id, 10)
	}
	return string(append(b, '}'))
}
