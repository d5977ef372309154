package gateway_test

import (
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/courier-oss/courier/api"
)

// TestOpenAPISchemasMatchTheWireTypes: each schema a generated client decodes answers into
// names exactly the fields the gateway writes, and marks required exactly those it always
// writes (the api type's fields without omitempty), so a TypeScript or Go caller generated from
// the document neither misses a field nor has to check for one that is always there.
func TestOpenAPISchemasMatchTheWireTypes(t *testing.T) {
	doc, _ := openAPISpec(t)
	for name, typ := range map[string]reflect.Type{
		"OutboxRecord": reflect.TypeOf(api.OutboxRecord{}),
		"Timer":        reflect.TypeOf(api.Timer{}),
		"Task":         reflect.TypeOf(api.Task{}),
		// POST /v1/tasks/results's answer, and the pushes (webhooks) and their answers.
		"TaskResultsAnswer":   reflect.TypeOf(api.TaskResultsAnswer{}),
		"TaskResultAnswer":    reflect.TypeOf(api.TaskResultAnswer{}),
		"TaskPush":            reflect.TypeOf(api.TaskPush{}),
		"PushAnswer":          reflect.TypeOf(api.PushAnswer{}),
		"TaskPushBatch":       reflect.TypeOf(api.TaskPushBatch{}),
		"TaskPushBatchAnswer": reflect.TypeOf(api.TaskPushBatchAnswer{}),
		"TaskRefusal":         reflect.TypeOf(api.TaskRefusal{}),
	} {
		t.Run(name, func(t *testing.T) {
			ref, ok := doc.Components.Schemas[name]
			require.True(t, ok, "components/schemas/%s", name)
			var fields, always []string
			wireFields(typ, &fields, &always)
			var props []string
			for p := range ref.Value.Properties {
				props = append(props, p)
			}
			slices.Sort(fields)
			slices.Sort(always)
			slices.Sort(props)
			required := slices.Clone(ref.Value.Required)
			slices.Sort(required)
			require.Equal(t, fields, props, "the schema's properties are the fields api.%s writes", typ.Name())
			require.Equal(t, always, required, "the schema's required fields are those api.%s always writes", typ.Name())
		})
	}
}

// wireFields lists the JSON names of typ's fields (embedded structs flattened), and apart those
// written always (no omitempty).
func wireFields(typ reflect.Type, fields, always *[]string) {
	for f := range typ.Fields() {
		tag := f.Tag.Get("json")
		if f.Anonymous && tag == "" {
			wireFields(f.Type, fields, always)
			continue
		}
		if tag == "-" || !f.IsExported() {
			continue
		}
		name, opts, _ := strings.Cut(tag, ",")
		if name == "" {
			name = f.Name
		}
		*fields = append(*fields, name)
		if !strings.Contains(opts, "omitempty") && !strings.Contains(opts, "omitzero") {
			*always = append(*always, name)
		}
	}
}
