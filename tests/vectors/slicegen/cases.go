package main

import (
	"fmt"
	"strings"
)

// The generated cases: every field of ResourceSliceSpec and Device, each rule at its
// boundaries (limit and limit+1, charset, empty, duplicates) and in combinations.

var rep = strings.Repeat

// cases collects kases with unique names.
type cases []kase

func (cs *cases) add(name string, p M) {
	cs.addFull(name, driver, "p", p)
}

func (cs *cases) addFull(name, drv, poolName string, p M) {
	*cs = append(*cs, kase{name: name, driver: drv, pool: poolName, plain: p})
}

// device adds a case of one device in an all-nodes slice.
func (cs *cases) device(name string, d M) {
	cs.add(name, pool(slice(d)))
}

// labelish are DNS label candidates: device, counter set and counter names, groups.
var labelish = []string{
	"a", "0", "dev-0", "a-b", "a--b", "1-2", "memory-slice-0", rep("a", 63), rep("a", 64), "",
	"A", "Dev", "a_b", "mem_a", "a.b", "-a", "a-", "x.com/mem", "é", "a b",
}

// qualified are attribute / capacity name candidates: C identifiers with an optional domain.
var qualified = []string{
	"a", "_x", "x_1", "X", "Upper_Case", rep("a", 32), rep("a", 33), "", "1a", "a-b", "a.b", "é",
	"gpu.example.com/a", "example.com/" + rep("b", 32), "example.com/" + rep("b", 33),
	"Gpu.Example.COM/a", "UPPER.com/a", "/a", "a/", "a/b/c", rep("d", 63) + "/a",
	rep("d", 64) + "/a", "d_d/a", "ex ample/a", "a.b.c/x_y", "-a.com/x", "a.com/1x",
}

var quantities = []string{"1", "0", "-1", "1Gi", "1000m", "0.5", "1e3", "16Ei", "+1", "100M"}

var nodeNames = []string{"node-1", "n.example.com", "Node-1", "node_1", rep("n", 253), rep("n", 254), "-n"}

func expr(key, op string, values ...string) M {
	m := M{"key": key, "operator": op}
	if values != nil {
		l := L{}
		for _, v := range values {
			l = append(l, v)
		}
		m["values"] = l
	}
	return m
}

func selector(terms ...M) M {
	l := L{}
	for _, t := range terms {
		l = append(l, t)
	}
	return M{"nodeSelectorTerms": l}
}

func term(exprs ...M) M {
	l := L{}
	for _, e := range exprs {
		l = append(l, e)
	}
	return M{"matchExpressions": l}
}

func fieldTerm(exprs ...M) M {
	l := L{}
	for _, e := range exprs {
		l = append(l, e)
	}
	return M{"matchFields": l}
}

var validSelector = selector(term(expr("zone", "In", "a")))

// selectors are node selector candidates, by name.
var selectors = map[string]M{
	"in":                 validSelector,
	"notin":              selector(term(expr("zone", "NotIn", "a", "b"))),
	"exists":             selector(term(expr("example.com/zone", "Exists"))),
	"doesnotexist":       selector(term(expr("zone", "DoesNotExist"))),
	"gt":                 selector(term(expr("rank", "Gt", "1"))),
	"lt-word":            selector(term(expr("rank", "Lt", "x"))),
	"gt-two":             selector(term(expr("rank", "Gt", "1", "2"))),
	"lt-none":            selector(term(expr("rank", "Lt"))),
	"no-terms":           selector(),
	"no-terms-key":       M{},
	"two-terms":          selector(term(expr("zone", "In", "a")), term(expr("zone", "In", "b"))),
	"empty-term":         selector(M{}),
	"bad-operator":       selector(term(expr("zone", "Foo", "a"))),
	"lower-operator":     selector(term(expr("zone", "in", "a"))),
	"in-no-values":       selector(term(expr("zone", "In"))),
	"exists-values":      selector(term(expr("zone", "Exists", "a"))),
	"bad-key":            selector(term(expr("a b", "In", "a"))),
	"empty-key":          selector(term(expr("", "Exists"))),
	"long-key":           selector(term(expr(rep("k", 64), "Exists"))),
	"bad-value":          selector(term(expr("zone", "In", "a b"))),
	"long-value":         selector(term(expr("zone", "In", rep("v", 64)))),
	"empty-value":        selector(term(expr("zone", "In", ""))),
	"two-exprs":          selector(term(expr("zone", "In", "a"), expr("rack", "Exists"))),
	"field-name":         selector(fieldTerm(expr("metadata.name", "In", "node-1"))),
	"field-name-notin":   selector(fieldTerm(expr("metadata.name", "NotIn", "node-1"))),
	"field-two-values":   selector(fieldTerm(expr("metadata.name", "In", "a", "b"))),
	"field-exists":       selector(fieldTerm(expr("metadata.name", "Exists"))),
	"field-other-key":    selector(fieldTerm(expr("spec.unschedulable", "In", "true"))),
	"field-bad-node":     selector(fieldTerm(expr("metadata.name", "In", "Node_1"))),
	"field-and-labels":   selector(M{"matchExpressions": L{expr("zone", "In", "a")}, "matchFields": L{expr("metadata.name", "In", "n")}}),
	"second-term-broken": selector(term(expr("zone", "In", "a")), term(expr("zone", "Foo"))),
}

// counterPool is a pool whose first slice shares set-0 with counters mem and cap (and the
// given extra sets), so the devices of devSlice may consume them.
func counterPool(devSlice M, extraSets ...any) M {
	sets := L{counterSet("set-0", "mem", "cap")}
	sets = append(sets, extraSets...)
	return pool(with(slice(), "sharedCounters", sets), devSlice)
}

func counterSet(name string, counters ...string) M {
	c := M{}
	for _, n := range counters {
		c[n] = M{"value": "8Gi"}
	}
	return M{"name": name, "counters": c}
}

func consume(set string, counters ...string) M {
	c := M{}
	for _, n := range counters {
		c[n] = M{"value": "1Gi"}
	}
	return M{"counterSet": set, "counters": c}
}

func counterNames(n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("c-%d", i)
	}
	return out
}

func strs(values ...string) L {
	l := L{}
	for _, v := range values {
		l = append(l, v)
	}
	return l
}

func ints(n int) L {
	l := L{}
	for i := 0; i < n; i++ {
		l = append(l, i)
	}
	return l
}

func names(prefix string, n int) L {
	l := L{}
	for i := 0; i < n; i++ {
		l = append(l, fmt.Sprintf("%s%d", prefix, i))
	}
	return l
}

// attrs is n int attributes a0..a(n-1).
func attrs(n int) M {
	m := M{}
	for i := 0; i < n; i++ {
		m[fmt.Sprintf("a%d", i)] = M{"int": i}
	}
	return m
}

func caps(n int) M {
	m := M{}
	for i := 0; i < n; i++ {
		m[fmt.Sprintf("c%d", i)] = M{"value": "1"}
	}
	return m
}

func generate() []kase {
	var cs cases
	genDriverAndPool(&cs)
	genNodeSelection(&cs)
	genDeviceCounts(&cs)
	genDeviceNames(&cs)
	genAttributes(&cs)
	genCapacity(&cs)
	genTaints(&cs)
	genCounters(&cs)
	genBinding(&cs)
	genPerDevice(&cs)
	genNodeAllocatable(&cs)
	genPartitionType(&cs)
	genSkipNodeOperations(&cs)
	genCombinations(&cs)
	genValid(&cs)
	return cs
}

func genDriverAndPool(cs *cases) {
	drivers := []string{
		"gpu.example.com", "a", "a.b", rep("a", 63), rep("a", 64), "Gpu.Example.com", "GPU",
		"gpu_example.com", "-a", "a-", "a..b", ".a", "a.", "é.com", "a b", "0.example.com",
		rep("a", 30) + "." + rep("b", 32), rep("a", 30) + "." + rep("b", 33),
	}
	for i, d := range drivers {
		cs.addFull(fmt.Sprintf("driver/%d", i), d, "p", pool(slice(dev("dev-0"))))
		// The driver is also an attribute domain.
		cs.addFull(fmt.Sprintf("driver/%d/own-domain-attribute", i), d, "p",
			pool(slice(dev("dev-0", "attributes", M{d + "/x": M{"int": 1}}))))
	}
	poolNames := []string{
		"p", "a/b", "a.b/c-d", "a//b", "/a", "a/", "UP", "Up/x", "a_b", rep("a", 63), rep("a", 64),
		rep("a", 63) + "." + rep("b", 63) + "." + rep("c", 63) + "." + rep("d", 61),
		rep("a", 63) + "." + rep("b", 63) + "." + rep("c", 63) + "." + rep("d", 62),
		rep("a", 63) + "/" + rep("b", 63) + "/" + rep("c", 63) + "/" + rep("d", 61),
		rep("a", 63) + "/" + rep("b", 63) + "/" + rep("c", 63) + "/" + rep("d", 62),
		"-a", "a-", "é", "a b", "node-1", "x.example.com/gpus",
	}
	for i, n := range poolNames {
		cs.addFull(fmt.Sprintf("pool-name/%d", i), driver, n, pool(slice(dev("dev-0"))))
	}
	for _, g := range []int64{-1, 0, 1, 1 << 62} {
		cs.add(fmt.Sprintf("generation/%d", g), with(pool(slice(dev("dev-0"))), "generation", g))
	}
	// Several slices: each one is validated on its own; resourceSliceCount is the number.
	for _, n := range []int{1, 2, 5} {
		var slices []M
		for i := 0; i < n; i++ {
			slices = append(slices, slice(dev(fmt.Sprintf("dev-%d", i))))
		}
		cs.add(fmt.Sprintf("slices/%d", n), pool(slices...))
	}
	cs.add("slices/empty-slice", pool(slice()))
	cs.add("slices/one-empty-of-two", pool(slice(), slice(dev("dev-0"))))
	cs.add("slices/second-broken", pool(slice(dev("dev-0")), slice(dev("Dev-1"))))
}

func genNodeSelection(cs *cases) {
	nodeNameOpts := []any{nil, "node-1", "Node_1", ""}
	selOpts := []string{"", "in", "two-terms"}
	for _, nn := range nodeNameOpts {
		for _, sel := range selOpts {
			for _, all := range []bool{false, true} {
				for _, per := range []any{nil, true, false} {
					for _, perDev := range []bool{false, true} {
						d := dev("dev-0")
						if perDev {
							d = dev("dev-0", "allNodes", true)
						}
						p := with(pool(with(slice(d), "perDeviceNodeSelection", per)), "nodeName", nn, "allNodes", all)
						if sel != "" {
							p["nodeSelector"] = selectors[sel]
						}
						cs.add(fmt.Sprintf("node-selection/nodeName=%v/selector=%s/allNodes=%v/perDevice=%v/deviceAllNodes=%v", nn, sel, all, per, perDev), p)
					}
				}
			}
		}
	}
	for _, n := range nodeNames {
		cs.add("node-name/"+n, with(pool(slice(dev("dev-0"))), "nodeName", n, "allNodes", false))
	}
	for _, k := range sortedKeys(selectors) {
		cs.add("node-selector/"+k, with(pool(slice(dev("dev-0"))), "nodeSelector", selectors[k], "allNodes", false))
		// Two slices of a pool carry the same selection.
		cs.add("node-selector/"+k+"/two-slices", with(pool(slice(dev("dev-0")), slice(dev("dev-1"))), "nodeSelector", selectors[k], "allNodes", false))
	}
	// A pool with per-device slices and plain ones.
	cs.add("node-selection/mixed-per-device", pool(with(slice(dev("dev-0", "allNodes", true)), "perDeviceNodeSelection", true), slice(dev("dev-1"))))
	cs.add("node-selection/per-device-only", with(pool(with(slice(dev("dev-0", "nodeName", "node-1")), "perDeviceNodeSelection", true)), "allNodes", false))
	cs.add("node-selection/per-device-and-plain-no-pool-selection", with(pool(with(slice(dev("dev-0", "nodeName", "node-1")), "perDeviceNodeSelection", true), slice(dev("dev-1"))), "allNodes", false))
}

func genDeviceCounts(cs *cases) {
	features := map[string][]any{
		"plain":    nil,
		"taint":    {"taints", L{M{"key": "k", "effect": "NoSchedule"}}},
		"list":     {"attributes", M{"l": M{"ints": L{1}}}},
		"binding":  {"bindingConditions", strs("a"), "bindingFailureConditions", strs("b")},
		"multiple": {"allowMultipleAllocations", true},
		"consumes": {"consumesCounters", L{consume("set-0", "mem")}},
	}
	for _, f := range sortedKeys(features) {
		for _, n := range []int{0, 1, 63, 64, 65, 127, 128, 129} {
			devs := devices(n, features[f]...)
			var p M
			if f == "consumes" {
				p = counterPool(slice(devs...))
			} else {
				p = pool(slice(devs...))
			}
			cs.add(fmt.Sprintf("device-count/%s/%d", f, n), p)
		}
		// One advanced device among plain ones lowers the limit of the slice.
		if f != "plain" {
			devs := devices(65)
			one := dev("dev-64", features[f]...)
			devs[64] = one
			var p M
			if f == "consumes" {
				p = counterPool(slice(devs...))
			} else {
				p = pool(slice(devs...))
			}
			cs.add(fmt.Sprintf("device-count/%s/one-of-65", f), p)
		}
	}
	// The empty list attribute counts as a list for the limit (it is refused anyway).
	devs := devices(65)
	devs[0] = dev("dev-0", "attributes", M{"l": M{"ints": L{}}})
	cs.add("device-count/empty-list/65", pool(slice(devs...)))
}

func genDeviceNames(cs *cases) {
	for i, n := range labelish {
		cs.device(fmt.Sprintf("device-name/%d", i), dev(n))
	}
	cs.add("device-name/duplicate", pool(slice(dev("a"), dev("b"), dev("a"))))
	cs.add("device-name/duplicate-three", pool(slice(dev("a"), dev("a"), dev("a"))))
	cs.add("device-name/missing", pool(slice(M{"attributes": attrs(1)})))
}

// attrValues are attribute value candidates, by name.
var attrValues = map[string]any{
	"int":                 M{"int": 1},
	"int-negative":        M{"int": -5},
	"int-max":             M{"int": int64(1<<63 - 1)},
	"bool":                M{"bool": true},
	"bool-false":          M{"bool": false},
	"string":              M{"string": "x"},
	"string-empty":        M{"string": ""},
	"string-64":           M{"string": rep("s", 64)},
	"string-65":           M{"string": rep("s", 65)},
	"string-utf8-64":      M{"string": rep("é", 32)},
	"string-utf8-65":      M{"string": rep("é", 32) + "x"},
	"version":             M{"version": "1.0.0"},
	"version-full":        M{"version": "1.0.0-alpha.1+build.5"},
	"version-short":       M{"version": "1.0"},
	"version-v":           M{"version": "v1.0.0"},
	"version-leading-0":   M{"version": "01.0.0"},
	"version-pre-0":       M{"version": "1.0.0-01"},
	"version-empty":       M{"version": ""},
	"version-64":          M{"version": "1.0.0-" + rep("a", 58)},
	"version-65":          M{"version": "1.0.0-" + rep("a", 59)},
	"none":                M{},
	"int-and-bool":        M{"int": 1, "bool": true},
	"string-and-version":  M{"string": "a", "version": "1.0.0"},
	"int-and-ints":        M{"int": 1, "ints": L{1}},
	"bools-empty":         M{"bools": L{}},
	"ints-empty":          M{"ints": L{}},
	"strings-empty":       M{"strings": L{}},
	"versions-empty":      M{"versions": L{}},
	"bools":               M{"bools": L{true, false}},
	"ints":                M{"ints": L{1, 2, 3}},
	"ints-duplicate":      M{"ints": L{1, 1}},
	"strings":             M{"strings": strs("a", "b")},
	"strings-duplicate":   M{"strings": strs("a", "a")},
	"strings-65":          M{"strings": strs("a", rep("s", 65))},
	"strings-64":          M{"strings": strs(rep("s", 64))},
	"strings-empty-item":  M{"strings": strs("")},
	"versions":            M{"versions": strs("1.0.0", "2.0.0")},
	"versions-bad":        M{"versions": strs("1.0.0", "x")},
	"versions-65":         M{"versions": strs("1.0.0-" + rep("a", 59))},
	"versions-duplicate":  M{"versions": strs("1.0.0", "1.0.0")},
	"ints-48":             M{"ints": ints(48)},
	"ints-49":             M{"ints": ints(49)},
	"strings-and-ints":    M{"strings": strs("a"), "ints": L{1}},
	"bools-and-bool":      M{"bools": L{true}, "bool": true},
	"strings-and-strings": M{"strings": strs("a"), "string": "b"},
}

func genAttributes(cs *cases) {
	for _, k := range sortedKeys(attrValues) {
		for _, n := range []string{"a", "example.com/a", "gpu.example.com/x_y"} {
			cs.device(fmt.Sprintf("attribute-value/%s/%s", k, n), dev("dev-0", "attributes", M{n: attrValues[k]}))
		}
	}
	for i, n := range qualified {
		cs.device(fmt.Sprintf("attribute-name/%d", i), dev("dev-0", "attributes", M{n: M{"int": 1}}))
		cs.device(fmt.Sprintf("capacity-name/%d", i), dev("dev-0", "capacity", M{n: M{"value": "1"}}))
		cs.device(fmt.Sprintf("attribute-name/%d/bad-value", i), dev("dev-0", "attributes", M{n: M{"string": rep("s", 65)}}))
	}
	// The number of attribute values of a device (list items count one each).
	for _, total := range []int{47, 48, 49, 60} {
		for _, scalars := range []int{0, 1, 2, 10} {
			if scalars > total {
				continue
			}
			a := attrs(scalars)
			rest := total - scalars
			for j := 0; rest > 0; j++ {
				n := rest
				if n > 20 {
					n = 20
				}
				a[fmt.Sprintf("l%d", j)] = M{"ints": ints(n)}
				rest -= n
			}
			cs.device(fmt.Sprintf("attribute-values/%d/%d-scalars", total, scalars), dev("dev-0", "attributes", a))
		}
	}
	cs.device("attribute-values/strings-49", dev("dev-0", "attributes", M{"s": M{"strings": names("s", 49)}}))
	cs.device("attribute-values/bools-25-versions-24", dev("dev-0", "attributes", M{"b": M{"bools": boolList(25)}, "v": M{"versions": versionList(24)}}))
	cs.device("attribute-values/bools-25-versions-23", dev("dev-0", "attributes", M{"b": M{"bools": boolList(25)}, "v": M{"versions": versionList(23)}}))
	// Attributes and capacities of a device together.
	for _, na := range []int{0, 1, 16, 31, 32, 33} {
		for _, nc := range []int{0, 1, 16, 32, 33} {
			d := dev("dev-0")
			if na > 0 {
				d["attributes"] = attrs(na)
			}
			if nc > 0 {
				d["capacity"] = caps(nc)
			}
			cs.device(fmt.Sprintf("attributes-and-capacity/%d+%d", na, nc), d)
		}
	}
	cs.device("attributes-and-capacity/33-with-list", dev("dev-0", "attributes", with(attrs(32), "l", M{"ints": L{1}})))
}

func boolList(n int) L {
	l := L{}
	for i := 0; i < n; i++ {
		l = append(l, i%2 == 0)
	}
	return l
}

func versionList(n int) L {
	l := L{}
	for i := 0; i < n; i++ {
		l = append(l, fmt.Sprintf("1.%d.0", i))
	}
	return l
}

// policies are requestPolicy candidates for a capacity of value 10, by name.
var policies = map[string]M{
	"empty":                  {},
	"default-only":           {"default": "1"},
	"values":                 {"default": "1", "validValues": strs("1", "2")},
	"values-unsorted":        {"default": "1", "validValues": strs("2", "1")},
	"values-duplicate":       {"default": "1", "validValues": strs("1", "1")},
	"values-duplicate-value": {"default": "1", "validValues": strs("1", "1000m")},
	"values-fractional-dup":  {"default": "1", "validValues": strs("1", "1.5", "1500m")},
	"values-over":            {"default": "1", "validValues": strs("1", "11")},
	"values-equal-value":     {"default": "10", "validValues": strs("1", "10")},
	"values-no-default":      {"validValues": strs("1", "2")},
	"values-default-absent":  {"default": "3", "validValues": strs("1", "2")},
	"values-10":              {"default": "1", "validValues": strs("1", "2", "3", "4", "5", "6", "7", "8", "9", "10")},
	"values-11":              {"default": "1", "validValues": strs("0", "1", "2", "3", "4", "5", "6", "7", "8", "9", "10")},
	"values-milli":           {"default": "500m", "validValues": strs("500m", "1")},
	"values-empty":           {"default": "1", "validValues": L{}},
	"values-and-range":       {"default": "1", "validValues": strs("1"), "validRange": M{"min": "1"}},
	"range-min":              {"default": "1", "validRange": M{"min": "1"}},
	"range-no-default":       {"validRange": M{"min": "1"}},
	"range-no-min":           {"default": "1", "validRange": M{"max": "5"}},
	"range-min-over":         {"default": "11", "validRange": M{"min": "11"}},
	"range-default-below":    {"default": "1", "validRange": M{"min": "2"}},
	"range-max":              {"default": "2", "validRange": M{"min": "1", "max": "5"}},
	"range-max-below-min":    {"default": "2", "validRange": M{"min": "3", "max": "2"}},
	"range-max-over":         {"default": "2", "validRange": M{"min": "1", "max": "11"}},
	"range-default-over-max": {"default": "6", "validRange": M{"min": "1", "max": "5"}},
	"range-step":             {"default": "3", "validRange": M{"min": "1", "max": "9", "step": "2"}},
	"range-step-zero":        {"default": "1", "validRange": M{"min": "1", "step": "0"}},
	"range-step-negative":    {"default": "1", "validRange": M{"min": "1", "step": "-1"}},
	"range-step-too-big":     {"default": "1", "validRange": M{"min": "1", "step": "10"}},
	"range-step-fits":        {"default": "1", "validRange": M{"min": "1", "step": "9"}},
	"range-default-off-step": {"default": "2", "validRange": M{"min": "1", "step": "2"}},
	"range-max-off-step":     {"default": "1", "validRange": M{"min": "1", "max": "4", "step": "2"}},
	"range-fraction":         {"default": "1.5", "validRange": M{"min": "500m", "step": "500m"}},
	"range-fraction-off":     {"default": "1.2", "validRange": M{"min": "500m", "step": "500m"}},
	"range-fraction-default": {"default": "1.5", "validRange": M{"min": "1", "step": "1"}},
	"range-micro":            {"default": "1", "validRange": M{"min": "0.0001", "step": "1"}},
	"range-negative-min":     {"default": "1", "validRange": M{"min": "-1", "step": "1"}},
	"range-negative-nostep":  {"default": "1", "validRange": M{"min": "-1"}},
	"range-huge":             {"default": "1", "validRange": M{"min": "1", "max": "1e19", "step": "1"}},
	"range-milli-default":    {"default": "1500m", "validRange": M{"min": "1"}},
	"range-empty":            {"default": "1", "validRange": M{}},
}

func genCapacity(cs *cases) {
	for _, v := range quantities {
		cs.device("capacity-value/"+v, dev("dev-0", "capacity", M{"c": M{"value": v}}))
	}
	for _, k := range sortedKeys(policies) {
		for _, multi := range []any{nil, false, true} {
			d := dev("dev-0", "capacity", M{"c": M{"value": "10", "requestPolicy": policies[k]}})
			if multi != nil {
				d["allowMultipleAllocations"] = multi
			}
			cs.device(fmt.Sprintf("request-policy/%s/multi=%v", k, multi), d)
		}
	}
	cs.device("request-policy/two-capacities", dev("dev-0", "allowMultipleAllocations", true, "capacity", M{
		"a": M{"value": "10", "requestPolicy": policies["values-unsorted"]},
		"b": M{"value": "4", "requestPolicy": policies["range-step"]},
	}))
	cs.device("request-policy/fractional-value", dev("dev-0", "allowMultipleAllocations", true, "capacity", M{
		"a": M{"value": "1500m", "requestPolicy": M{"default": "500m", "validRange": M{"min": "500m", "step": "250m"}}},
	}))
	cs.device("capacity/no-value", dev("dev-0", "capacity", M{"c": M{}}))
	cs.device("capacity/null-policy", dev("dev-0", "capacity", M{"c": M{"value": "1", "requestPolicy": nil}}))
	cs.device("capacity/multiple-no-policy", dev("dev-0", "allowMultipleAllocations", true, "capacity", M{"a": M{"value": "1"}}))
}

func taint(kv ...any) M {
	return with(M{"key": "k", "effect": "NoSchedule"}, kv...)
}

func genTaints(cs *cases) {
	for _, n := range []int{0, 1, 16, 17} {
		l := L{}
		for i := 0; i < n; i++ {
			l = append(l, taint("key", fmt.Sprintf("k%d", i)))
		}
		cs.device(fmt.Sprintf("taints/count-%d", n), dev("dev-0", "taints", l))
	}
	keys := []string{"k", "example.com/k", "", "a b", "-a", rep("k", 63), rep("k", 64), "Example.com/k", "a/b/c", "K", "a_b.c-d", "/k", "example.com/"}
	for i, k := range keys {
		cs.device(fmt.Sprintf("taints/key/%d", i), dev("dev-0", "taints", L{taint("key", k)}))
	}
	values := []string{"", "v", rep("v", 63), rep("v", 64), "a b", "-a", "a_b.c-D", "a-"}
	for i, v := range values {
		cs.device(fmt.Sprintf("taints/value/%d", i), dev("dev-0", "taints", L{taint("value", v)}))
	}
	for _, e := range []string{"NoSchedule", "NoExecute", "None", "", "Bogus", "noschedule", "PreferNoSchedule"} {
		cs.device("taints/effect/"+e, dev("dev-0", "taints", L{taint("effect", e)}))
	}
	cs.device("taints/no-key", dev("dev-0", "taints", L{M{"effect": "NoSchedule"}}))
	cs.device("taints/no-effect", dev("dev-0", "taints", L{M{"key": "k"}}))
	cs.device("taints/time", dev("dev-0", "taints", L{taint("timeAdded", "2026-01-02T03:04:05Z")}))
	cs.device("taints/duplicate", dev("dev-0", "taints", L{taint(), taint()}))
	cs.device("taints/same-key-other-effect", dev("dev-0", "taints", L{taint(), taint("effect", "NoExecute")}))
}

func genCounters(cs *cases) {
	// Counter set and counter names, shared and consumed alike.
	for i, n := range labelish {
		cs.add(fmt.Sprintf("counters/set-name/%d", i), counterPool(slice(dev("dev-0", "consumesCounters", L{consume(n, "mem")})), counterSet(n, "mem")))
		cs.add(fmt.Sprintf("counters/counter-name/%d", i), counterPool(slice(dev("dev-0", "consumesCounters", L{consume("set-1", n)})), counterSet("set-1", n)))
		cs.add(fmt.Sprintf("counters/shared-only-name/%d", i), pool(with(slice(), "sharedCounters", L{counterSet("s", n)})))
	}
	for _, v := range quantities {
		cs.add("counters/shared-value/"+v, pool(with(slice(), "sharedCounters", L{M{"name": "s", "counters": M{"c": M{"value": v}}}})))
		cs.add("counters/consumed-value/"+v, counterPool(slice(dev("dev-0", "consumesCounters", L{M{"counterSet": "set-0", "counters": M{"mem": M{"value": v}}}}))))
	}
	// Sets per slice, counters per set.
	for _, n := range []int{0, 1, 8, 9} {
		l := L{}
		for i := 0; i < n; i++ {
			l = append(l, counterSet(fmt.Sprintf("s-%d", i), "c"))
		}
		cs.add(fmt.Sprintf("counters/sets/%d", n), pool(with(slice(), "sharedCounters", l)))
	}
	for _, n := range []int{0, 1, 32, 33} {
		cs.add(fmt.Sprintf("counters/per-set/%d", n), pool(with(slice(), "sharedCounters", L{counterSet("s", counterNames(n)...)})))
		cs.add(fmt.Sprintf("counters/per-consumption/%d", n), pool(
			with(slice(), "sharedCounters", L{counterSet("s", counterNames(32)...)}),
			slice(dev("dev-0", "consumesCounters", L{consume("s", counterNames(n)...)}))))
	}
	cs.add("counters/sets-total-over-32", pool(with(slice(), "sharedCounters", L{counterSet("s", counterNames(20)...), counterSet("t", counterNames(20)...)})))
	cs.add("counters/set-no-counters-key", pool(with(slice(), "sharedCounters", L{M{"name": "s"}})))
	cs.add("counters/set-no-name", pool(with(slice(), "sharedCounters", L{M{"counters": M{"c": M{"value": "1"}}}})))
	cs.add("counters/set-duplicate", pool(with(slice(), "sharedCounters", L{counterSet("s", "c"), counterSet("s", "d")})))
	cs.add("counters/set-and-devices", pool(with(slice(dev("dev-0")), "sharedCounters", L{counterSet("s", "c")})))
	cs.add("counters/counter-no-value", pool(with(slice(), "sharedCounters", L{M{"name": "s", "counters": M{"c": M{}}}})))
	// Consumptions of a device.
	for _, n := range []int{0, 1, 2, 3} {
		l := L{}
		extra := L{}
		for i := 0; i < n; i++ {
			l = append(l, consume(fmt.Sprintf("x-%d", i), "c"))
			extra = append(extra, counterSet(fmt.Sprintf("x-%d", i), "c"))
		}
		cs.add(fmt.Sprintf("counters/consumptions/%d", n), counterPool(slice(dev("dev-0", "consumesCounters", l)), extra...))
	}
	cs.add("counters/consumption-duplicate-set", counterPool(slice(dev("dev-0", "consumesCounters", L{consume("set-0", "mem"), consume("set-0", "cap")}))))
	cs.add("counters/consumption-no-counters", counterPool(slice(dev("dev-0", "consumesCounters", L{M{"counterSet": "set-0"}}))))
	cs.add("counters/consumption-empty-counters", counterPool(slice(dev("dev-0", "consumesCounters", L{M{"counterSet": "set-0", "counters": M{}}}))))
	cs.add("counters/consumption-no-set", counterPool(slice(dev("dev-0", "consumesCounters", L{M{"counters": M{"mem": M{"value": "1"}}}}))))
	cs.add("counters/consumption-counter-no-value", counterPool(slice(dev("dev-0", "consumesCounters", L{M{"counterSet": "set-0", "counters": M{"mem": M{}}}}))))
	// Compatibility groups.
	groups := map[string]any{
		"nil": nil, "empty": L{}, "one": strs("a"), "two": strs("a", "b"), "three": strs("a", "b", "c"),
		"duplicate": strs("a", "a"), "upper": strs("A"), "underscore": strs("a_b"), "blank": strs(""),
		"63": strs(rep("g", 63)), "64": strs(rep("g", 64)), "dot": strs("a.b"), "dash-end": strs("a-"),
		"digit": strs("0"), "slash": strs("x.com/g"),
	}
	for _, k := range sortedKeys(groups) {
		c := consume("set-0", "mem")
		if groups[k] != nil {
			c["compatibilityGroups"] = groups[k]
		}
		cs.add("counters/compatibility-groups/"+k, counterPool(slice(dev("dev-0", "consumesCounters", L{c}))))
	}
	// Counters across several devices and sets.
	cs.add("counters/mig-style", pool(
		with(slice(), "sharedCounters", L{counterSet("gpu-0", "memory-slice-0", "memory-slice-1", "multiprocessors")}),
		slice(
			dev("gpu-0-mig-1g", "consumesCounters", L{consume("gpu-0", "memory-slice-0", "multiprocessors")}),
			dev("gpu-0-mig-2g", "consumesCounters", L{consume("gpu-0", "memory-slice-0", "memory-slice-1", "multiprocessors")}),
		)))
}

func genBinding(cs *cases) {
	lists := map[string]any{
		"nil": nil, "empty": L{}, "one": strs("a"), "two": strs("a", "b"), "four": names("c", 4),
		"five": names("c", 5), "duplicate": strs("a", "a"), "bad": strs("a b"), "domain": strs("example.com/ready"),
		"blank": strs(""), "63": strs(rep("c", 63)), "64": strs(rep("c", 64)), "upper": strs("Ready"),
		"other": strs("x", "y"),
	}
	for _, bc := range sortedKeys(lists) {
		for _, bfc := range sortedKeys(lists) {
			d := dev("dev-0")
			if lists[bc] != nil {
				d["bindingConditions"] = lists[bc]
			}
			if lists[bfc] != nil {
				d["bindingFailureConditions"] = lists[bfc]
			}
			cs.device(fmt.Sprintf("binding/%s/%s", bc, bfc), d)
		}
	}
	for _, b := range []bool{false, true} {
		cs.device(fmt.Sprintf("binds-to-node/%v", b), dev("dev-0", "bindsToNode", b))
		cs.device(fmt.Sprintf("binds-to-node/%v/with-conditions", b), dev("dev-0", "bindsToNode", b, "bindingConditions", strs("a"), "bindingFailureConditions", strs("b")))
	}
}

func genPerDevice(cs *cases) {
	variants := map[string][]any{
		"none":              nil,
		"node-name":         {"nodeName", "node-1"},
		"node-name-empty":   {"nodeName", ""},
		"node-name-bad":     {"nodeName", "Node_1"},
		"node-name-long":    {"nodeName", rep("n", 254)},
		"all-nodes":         {"allNodes", true},
		"all-nodes-false":   {"allNodes", false},
		"selector":          {"nodeSelector", validSelector},
		"name-and-all":      {"nodeName", "node-1", "allNodes", true},
		"name-and-selector": {"nodeName", "node-1", "nodeSelector", validSelector},
		"all-three":         {"nodeName", "node-1", "nodeSelector", validSelector, "allNodes", true},
		"false-and-name":    {"nodeName", "node-1", "allNodes", false},
	}
	for _, sel := range sortedKeys(selectors) {
		variants["selector-"+sel] = []any{"nodeSelector", selectors[sel]}
	}
	for _, k := range sortedKeys(variants) {
		for _, per := range []any{nil, true} {
			p := with(pool(with(slice(dev("dev-0", variants[k]...)), "perDeviceNodeSelection", per)))
			if per == true {
				p["allNodes"] = false
			}
			cs.add(fmt.Sprintf("per-device/%s/perDevice=%v", k, per), p)
		}
	}
	cs.add("per-device/two-devices", with(pool(with(slice(dev("dev-0", "nodeName", "node-1"), dev("dev-1", "allNodes", true)), "perDeviceNodeSelection", true)), "allNodes", false))
}

// allocatable are nodeAllocatableResources entries, by name; capacity "mem" exists.
var allocatable = map[string]any{
	"empty":                   M{},
	"mapping-empty":           M{"mapping": M{}},
	"capacity":                M{"mapping": M{"capacityKey": "mem", "capacityMultiplier": "1"}},
	"capacity-qualified":      M{"mapping": M{"capacityKey": "gpu.example.com/mem", "capacityMultiplier": "1"}},
	"capacity-unknown":        M{"mapping": M{"capacityKey": "other", "capacityMultiplier": "1"}},
	"capacity-empty-key":      M{"mapping": M{"capacityKey": "", "capacityMultiplier": "1"}},
	"capacity-no-multiplier":  M{"mapping": M{"capacityKey": "mem"}},
	"multiplier-no-key":       M{"mapping": M{"capacityMultiplier": "1"}},
	"multiplier-zero":         M{"mapping": M{"capacityKey": "mem", "capacityMultiplier": "0"}},
	"multiplier-negative":     M{"mapping": M{"capacityKey": "mem", "capacityMultiplier": "-1"}},
	"multiplier-milli":        M{"mapping": M{"capacityKey": "mem", "capacityMultiplier": "1000m"}},
	"device-multiplier":       M{"mapping": M{"deviceMultiplier": "1"}},
	"device-multiplier-milli": M{"mapping": M{"deviceMultiplier": "1000m"}},
	"device-multiplier-zero":  M{"mapping": M{"deviceMultiplier": "0"}},
	"device-multiplier-neg":   M{"mapping": M{"deviceMultiplier": "-2"}},
	"both-multipliers":        M{"mapping": M{"capacityKey": "mem", "capacityMultiplier": "2", "deviceMultiplier": "1"}},
	"overhead-empty":          M{"overhead": M{}},
	"overhead-pod":            M{"overhead": M{"perPod": "100Mi"}},
	"overhead-container":      M{"overhead": M{"perContainer": "1"}},
	"overhead-zero":           M{"overhead": M{"perPod": "0"}},
	"overhead-negative":       M{"overhead": M{"perPod": "-1"}},
	"overhead-both-negative":  M{"overhead": M{"perPod": "-1", "perContainer": "-1"}},
	"mapping-and-overhead":    M{"mapping": M{"deviceMultiplier": "1"}, "overhead": M{"perPod": "1"}},
	"bad-mapping-and-empty":   M{"mapping": M{"deviceMultiplier": "0"}, "overhead": M{}},
}

func genNodeAllocatable(cs *cases) {
	for _, k := range sortedKeys(allocatable) {
		cs.device("node-allocatable/"+k, dev("dev-0", "capacity", M{"mem": M{"value": "8Gi"}, "gpu.example.com/mem": M{"value": "1"}},
			"nodeAllocatableResources", M{"memory": allocatable[k]}))
	}
	cs.device("node-allocatable/no-capacity", dev("dev-0", "nodeAllocatableResources", M{"memory": allocatable["capacity"]}))
	resourceNames := []string{
		"cpu", "memory", "ephemeral-storage", "hugepages-2Mi", "hugepages-1Gi", "pods", "storage",
		"example.com/gpu", "nvidia.com/gpu", "", "requests.cpu", "CPU", "hugepages-", "attachable-volumes-x",
	}
	for _, n := range resourceNames {
		cs.device("node-allocatable/name/"+n, dev("dev-0", "nodeAllocatableResources", M{n: allocatable["device-multiplier"]}))
	}
	cs.device("node-allocatable/empty-map", dev("dev-0", "nodeAllocatableResources", M{}))
}

func genPartitionType(cs *cases) {
	profile := func(v any) M { return M{"gpu.example.com/profile": v} }
	consumer := func(name string, a M) M {
		d := dev(name, "consumesCounters", L{consume("set-0", "mem")})
		if a != nil {
			d["attributes"] = a
		}
		return d
	}
	attrsOf := map[string]M{
		"string":        profile(M{"string": "1g"}),
		"int":           profile(M{"int": 1}),
		"missing":       nil,
		"bare":          {"profile": M{"string": "1g"}},
		"bare-int":      {"profile": M{"int": 1}},
		"other-domain":  {"example.com/profile": M{"string": "1g"}},
		"both":          {"profile": M{"int": 1}, "gpu.example.com/profile": M{"string": "1g"}},
		"string-list":   profile(M{"strings": strs("1g")}),
		"invalid-value": profile(M{"string": rep("s", 65)}),
	}
	names := []string{"gpu.example.com/profile", "profile", "example.com/profile", "Gpu.Example.com/profile", "gpu.example.com/", "/profile", "gpu.example.com/pro-file", "a/b/c", ""}
	for i, n := range names {
		for _, k := range sortedKeys(attrsOf) {
			cs.add(fmt.Sprintf("partition-type/%d/%s", i, k), counterPool(with(slice(consumer("dev-0", attrsOf[k]), dev("dev-1")), "partitionTypeAttribute", n)))
		}
		cs.add(fmt.Sprintf("partition-type/%d/no-consumers", i), pool(with(slice(dev("dev-0", "attributes", profile(M{"string": "1g"}))), "partitionTypeAttribute", n)))
		cs.add(fmt.Sprintf("partition-type/%d/no-devices", i), pool(with(slice(), "partitionTypeAttribute", n, "sharedCounters", L{counterSet("s", "c")})))
	}
	cs.add("partition-type/two-consumers-one-missing", counterPool(with(slice(consumer("dev-0", attrsOf["string"]), consumer("dev-1", nil)), "partitionTypeAttribute", "gpu.example.com/profile")))
}

func genSkipNodeOperations(cs *cases) {
	ops := map[string]L{
		"empty": {}, "prepare": strs("NodePrepareResources"), "unprepare": strs("NodeUnprepareResources"),
		"both": strs("NodePrepareResources", "NodeUnprepareResources"), "all": strs("*"),
		"prepare-all": strs("NodePrepareResources", "*"), "bogus": strs("Bogus"), "blank": strs(""),
		"duplicate": strs("NodeUnprepareResources", "NodeUnprepareResources"), "lower": strs("nodeprepareresources"),
		"all-duplicate": strs("*", "*"), "three": strs("NodePrepareResources", "NodeUnprepareResources", "*"),
		"bogus-and-valid": strs("NodeUnprepareResources", "Bogus"),
	}
	for _, k := range sortedKeys(ops) {
		cs.add("skip-node-operations/"+k, pool(with(slice(dev("dev-0")), "skipNodeOperations", ops[k])))
		cs.add("skip-node-operations/"+k+"/no-devices", pool(with(slice(), "skipNodeOperations", ops[k])))
	}
}

// fragments are parts of a device, by field group: every pair of groups is combined, and
// every group's first few variants together, so rules meet each other.
var fragments = [][]struct {
	name string
	kv   []any
}{
	{
		{"attr-int", []any{"attributes", M{"a": M{"int": 1}}}},
		{"attr-list", []any{"attributes", M{"a": M{"strings": strs("x", "y")}}}},
		{"attr-empty-list", []any{"attributes", M{"a": M{"ints": L{}}}}},
		{"attr-bad-name", []any{"attributes", M{"a-b": M{"int": 1}}}},
		{"attr-upper-domain", []any{"attributes", M{"Example.com/a": M{"bool": true}}}},
		{"attr-two-types", []any{"attributes", M{"a": M{"int": 1, "string": "x"}}}},
		{"attr-long-string", []any{"attributes", M{"a": M{"string": rep("s", 65)}}}},
		{"attr-49-values", []any{"attributes", M{"a": M{"ints": ints(49)}}}},
	},
	{
		{"cap", []any{"capacity", M{"c": M{"value": "1Gi"}}}},
		{"cap-policy", []any{"allowMultipleAllocations", true, "capacity", M{"c": M{"value": "10", "requestPolicy": policies["range-step"]}}}},
		{"cap-policy-single", []any{"capacity", M{"c": M{"value": "10", "requestPolicy": policies["values"]}}}},
		{"cap-policy-bad", []any{"allowMultipleAllocations", true, "capacity", M{"c": M{"value": "10", "requestPolicy": policies["values-unsorted"]}}}},
		{"cap-bad-name", []any{"capacity", M{"1c": M{"value": "1"}}}},
		{"cap-no-value", []any{"capacity", M{"c": M{}}}},
	},
	{
		{"taint", []any{"taints", L{taint()}}},
		{"taint-bad-effect", []any{"taints", L{taint("effect", "Bogus")}}},
		{"taint-bad-key", []any{"taints", L{taint("key", "a b")}}},
		{"taints-17", []any{"taints", func() L {
			l := L{}
			for i := 0; i < 17; i++ {
				l = append(l, taint("key", fmt.Sprintf("k%d", i)))
			}
			return l
		}()}},
	},
	{
		{"consumes", []any{"consumesCounters", L{consume("set-0", "mem")}}},
		{"consumes-groups", []any{"consumesCounters", L{with(consume("set-0", "mem"), "compatibilityGroups", strs("g-1", "g-2"))}}},
		{"consumes-bad-counter", []any{"consumesCounters", L{M{"counterSet": "set-0", "counters": M{}}}}},
		{"consumes-dup", []any{"consumesCounters", L{consume("set-0", "mem"), consume("set-0", "cap")}}},
	},
	{
		{"binding", []any{"bindingConditions", strs("ready"), "bindingFailureConditions", strs("failed"), "bindsToNode", true}},
		{"binding-one-sided", []any{"bindingConditions", strs("ready")}},
		{"binding-overlap", []any{"bindingConditions", strs("ready"), "bindingFailureConditions", strs("ready")}},
		{"binding-bad", []any{"bindingConditions", strs("a b"), "bindingFailureConditions", strs("x")}},
	},
	{
		{"allocatable", []any{"nodeAllocatableResources", M{"cpu": allocatable["device-multiplier"]}}},
		{"allocatable-bad-name", []any{"nodeAllocatableResources", M{"pods": allocatable["device-multiplier"]}}},
		{"allocatable-empty", []any{"nodeAllocatableResources", M{"memory": M{}}}},
	},
}

// merge puts kv into d, merging the maps of attributes and capacity.
func merge(d M, kv []any) {
	for i := 0; i < len(kv); i += 2 {
		k := kv[i].(string)
		if old, ok := d[k].(M); ok {
			d[k] = with(old)
			for mk, mv := range kv[i+1].(M) {
				d[k].(M)[mk] = mv
			}
			continue
		}
		d[k] = kv[i+1]
	}
}

func genCombinations(cs *cases) {
	for g := range fragments {
		for h := g + 1; h < len(fragments); h++ {
			for _, a := range fragments[g] {
				for _, b := range fragments[h] {
					d := dev("dev-0")
					merge(d, a.kv)
					merge(d, b.kv)
					cs.add("combination/"+a.name+"+"+b.name, counterPool(slice(d, dev("dev-1"))))
				}
			}
		}
	}
	// Three variants of every group at once.
	var walk func(g int, d M, name string)
	walk = func(g int, d M, name string) {
		if g == len(fragments) {
			cs.add("combination/all/"+name, counterPool(slice(d)))
			return
		}
		for i, f := range fragments[g] {
			if i == 3 {
				break
			}
			next := with(d)
			merge(next, f.kv)
			walk(g+1, next, name+fmt.Sprint(i))
		}
	}
	walk(0, dev("dev-0"), "")
	// Two devices of a slice each with their own problems, in both orders.
	for _, a := range fragments[0] {
		for _, b := range fragments[2] {
			d0, d1 := dev("dev-0"), dev("dev-1")
			merge(d0, a.kv)
			merge(d1, b.kv)
			cs.add("combination/two-devices/"+a.name+"+"+b.name, pool(slice(d0, d1)))
			cs.add("combination/two-devices/"+b.name+"+"+a.name, pool(slice(d1, d0)))
		}
	}
}

// genValid combines valid values of many fields: the cores must accept every one.
func genValid(cs *cases) {
	values := []string{"int", "int-negative", "bool", "string", "string-empty", "string-64", "version", "version-full", "bools", "ints", "strings", "versions", "ints-48"}
	for _, a := range values {
		for _, q := range quantities {
			for _, extra := range []string{"plain", "taint", "per-device"} {
				d := dev("dev-0", "attributes", M{"gpu.example.com/a": attrValues[a], "b": M{"int": 2}}, "capacity", M{"example.com/c": M{"value": q}})
				p := pool(slice(d, dev("dev-1")))
				switch extra {
				case "taint":
					d["taints"] = L{taint("value", "v")}
				case "per-device":
					d["nodeName"] = "node-1"
					p["slices"].(L)[0].(M)["devices"].(L)[1].(M)["allNodes"] = true
					p["slices"].(L)[0] = with(p["slices"].(L)[0].(M), "perDeviceNodeSelection", true)
					p["allNodes"] = false
				}
				cs.add(fmt.Sprintf("valid/%s/%s/%s", a, q, extra), p)
			}
		}
	}
}
