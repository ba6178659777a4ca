package main

import (
	"reflect"
	"sort"
	"strings"

	resourcev1 "k8s.io/api/resource/v1"
)

// apiFields lists every JSON field path under a ResourceSlice's spec, from the v1 Go types:
// "devices[].attributes{}.strings". A new release's new fields show up here first.
func apiFields() []string {
	var out []string
	var walk func(t reflect.Type, prefix string, depth int)
	walk = func(t reflect.Type, prefix string, depth int) {
		for t.Kind() == reflect.Pointer {
			t = t.Elem()
		}
		switch t.Kind() {
		case reflect.Slice:
			if t.Elem().Kind() != reflect.Uint8 {
				walk(t.Elem(), prefix+"[]", depth)
			}
			return
		case reflect.Map:
			walk(t.Elem(), prefix+"{}", depth)
			return
		case reflect.Struct:
		default:
			return
		}
		// Quantities and times are values, not objects of fields.
		if t.PkgPath() == "k8s.io/apimachinery/pkg/api/resource" || t.Name() == "Time" || depth > 8 {
			return
		}
		for i := 0; i < t.NumField(); i++ {
			f := t.Field(i)
			name := strings.Split(f.Tag.Get("json"), ",")[0]
			if name == "" || name == "-" {
				continue
			}
			path := name
			if prefix != "" {
				path = prefix + "." + name
			}
			out = append(out, path)
			walk(f.Type, path, depth+1)
		}
	}
	walk(reflect.TypeOf(resourcev1.ResourceSliceSpec{}), "", 0)
	sort.Strings(out)
	return out
}

// usedFields adds the field paths of a rendered spec (as apiFields writes them) to used.
func usedFields(v any, prefix string, used map[string]bool) {
	switch v := v.(type) {
	case M:
		for k, x := range v {
			path := k
			if prefix != "" {
				path = prefix + "." + k
			}
			if isMapField(prefix) {
				path = prefix + "{}"
			}
			used[path] = true
			usedFields(x, path, used)
		}
	case L:
		for _, x := range v {
			usedFields(x, prefix+"[]", used)
		}
	}
}

// isMapField: the members of these are keys, not field names.
func isMapField(path string) bool {
	for _, m := range []string{"attributes", "capacity", "counters", "nodeAllocatableResources"} {
		if path == m || strings.HasSuffix(path, "."+m) {
			return true
		}
	}
	return false
}

// missingFields are the API's fields no case sets.
func missingFields(used map[string]bool) []string {
	var missing []string
	for _, f := range apiFields() {
		if !used[f] {
			missing = append(missing, f)
		}
	}
	return missing
}
