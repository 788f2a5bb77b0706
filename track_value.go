package outbox

import (
	"context"
	"reflect"

	"gorm.io/gorm/schema"
)

// goValue returns the Go value of field f of row. For a field with a
// serializer (serializer:json, gob, unixtime or one of the application's),
// f.ValueOf returns GORM's serializer wrapper, which refers to the field's
// schema and cannot be marshalled; the field itself holds the Go value.
func goValue(ctx context.Context, f *schema.Field, row reflect.Value) any {
	if f.Serializer != nil {
		return f.ReflectValueOf(ctx, row).Interface()
	}
	v, _ := f.ValueOf(ctx, row)
	return v
}

// assignedValue returns the Go value of an assignment GORM made for
// field f (an update's SET): the value itself, or for a field with a
// serializer the value GORM's wrapper holds (GORM keeps the field of the
// value it was taken from, and that value, in the wrapper's exported
// Field and Destination).
func assignedValue(ctx context.Context, f *schema.Field, v any) any {
	if f == nil || f.Serializer == nil {
		return v
	}
	w := reflect.ValueOf(v)
	if w.Kind() != reflect.Pointer || w.IsNil() || w.Elem().Kind() != reflect.Struct || w.Elem().Type().PkgPath() != "gorm.io/gorm/schema" {
		return v // a value given in a map or to Update: the Go value
	}
	field, dst := w.Elem().FieldByName("Field"), w.Elem().FieldByName("Destination")
	if !field.IsValid() || !dst.IsValid() {
		return v
	}
	sf, ok := field.Interface().(*schema.Field)
	from, ok2 := dst.Interface().(reflect.Value)
	if !ok || !ok2 || sf == nil || !from.IsValid() {
		return v
	}
	return sf.ReflectValueOf(ctx, from).Interface()
}
