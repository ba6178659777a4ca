package main

import (
	"encoding/json"
	"fmt"
	"strings"
)

// The cases: those of TestValidateClaimStatusUpdate about status.devices (named "go-..."),
// then each rule of an entry at its boundaries.

var rep = strings.Repeat

const (
	driver  = "gpu.example.com"
	pool    = "node-1"
	device  = "gpu-0"
	shareID = "aaaaaaaa-aaaa-aaaa-aaaa-aaaaaaaaaaaa"
	when    = "2024-01-02T03:04:05Z"
)

func with(m M, kv ...any) M {
	out := M{}
	for k, v := range m {
		out[k] = v
	}
	for i := 0; i < len(kv); i += 2 {
		out[kv[i].(string)] = kv[i+1]
	}
	return out
}

// entry is the status of gpu.example.com/node-1/gpu-0 with the given members.
func entry(kv ...any) M {
	return with(M{"driver": driver, "pool": pool, "device": device}, kv...)
}

// cond is a valid condition of type t; kv override its members (a nil value removes one).
func cond(t string, kv ...any) M {
	c := with(M{"type": t, "status": "True", "reason": "Prepared", "message": "", "lastTransitionTime": when}, kv...)
	for k, v := range c {
		if v == nil {
			delete(c, k)
		}
	}
	return c
}

func conds(n int) L {
	l := L{}
	for i := 0; i < n; i++ {
		l = append(l, cond(fmt.Sprintf("test-%d", i), "reason", "test_reason"))
	}
	return l
}

func strs(s ...string) L {
	l := L{}
	for _, x := range s {
		l = append(l, x)
	}
	return l
}

func ips(n int) L {
	l := L{}
	for i := 0; i < n; i++ {
		l = append(l, fmt.Sprintf("10.9.8.%d/24", i))
	}
	return l
}

// sized is a data object of exactly n bytes as the apiserver encodes it: {"str":"xxx..."}.
func sized(n int) M {
	return M{"str": rep("x", n-len(`{"str":""}`))}
}

// padded is m with a member "pad" that makes it n bytes long as the apiserver encodes it.
func padded(n int, m M) M {
	m = with(m, "pad", "")
	size := len(encoded(m))
	if size > n {
		panic(fmt.Sprintf("padded: %d bytes before padding, over %d", size, n))
	}
	m["pad"] = rep("x", n-size)
	if got := len(encoded(m)); got != n {
		panic(fmt.Sprintf("padded: %d bytes, not %d", got, n))
	}
	return m
}

// raw is a JSON number written as it is (1.0 stays 1.0 in the vector file).
func raw(text string) json.RawMessage {
	return json.RawMessage(text)
}

func raws(text string, n int) L {
	l := L{}
	for i := 0; i < n; i++ {
		l = append(l, raw(text))
	}
	return l
}

func generate() []kase {
	var cs []kase
	add := func(name string, e M) { cs = append(cs, kase{name: name, entry: e}) }

	// TestValidateClaimStatusUpdate's device-status cases.
	fullIPs := strs("10.9.8.0/24", "2001:db8::/64", "10.9.8.1/24", "2001:db8::1/64",
		"10.9.8.2/24", "10.9.8.3/24", "10.9.8.4/24", "10.9.8.5/24", "10.9.8.6/24", "10.9.8.7/24",
		"10.9.8.8/24", "10.9.8.9/24", "10.9.8.10/24", "10.9.8.11/24", "10.9.8.12/24", "10.9.8.13/24")
	add("go-valid-network-device-status", entry(
		"conditions", conds(8),
		"data", M{"kind": "foo", "apiVersion": "dra.example.com/v1"},
		"networkData", M{"interfaceName": rep("x", 256), "hardwareAddress": rep("x", 128), "ips": fullIPs}))
	add("go-valid-network-device-status-with-multi-byte-interface-name-and-hardware-address", entry(
		"conditions", conds(8),
		"data", M{"kind": "foo", "apiVersion": "dra.example.com/v1"},
		"networkData", M{"interfaceName": rep("𝄞", 256/4), "hardwareAddress": rep("𝄞", 128/4), "ips": fullIPs}))
	add("go-invalid-device-status-duplicate-ips", entry(
		"networkData", M{"ips": strs("2001:db8::1/64", "2001:db8::1/64")}))
	add("go-invalid-network-device-status", entry(
		"networkData", M{"interfaceName": rep("x", 257), "hardwareAddress": rep("x", 129),
			"ips": strs("300.9.8.0/24", "010.009.008.000/24", "2001:0db8::1/64")}))
	add("go-invalid-network-device-status-with-multi-byte-interface-name-and-hardware-address", entry(
		"networkData", M{"interfaceName": rep("𝄞", 256), "hardwareAddress": rep("𝄞", 128),
			"ips": strs("300.9.8.0/24", "010.009.008.000/24", "2001:0db8::1/64")}))
	add("go-invalid-data-device-status", entry("data", "foo"))
	add("go-invalid-data-device-status-limits", entry(
		"data", sized(10*1024+1), "conditions", conds(9), "networkData", M{"ips": ips(17)}))
	add("go-valid-add-enable-both-device-status-and-consumable-capacity-features", entry("shareID", shareID))
	add("go-invalid-add-allocated-status-invalid-share-id-length", entry("shareID", "a"))
	add("go-invalid-add-allocated-status-invalid-share-id-format", entry("shareID", "Aaaaaaaa-aaaa-aaaa-aaaa-aaaaaaaaaaaa"))

	// The key: driver, pool, device, shareID.
	add("key-only", entry())
	add("driver-upper-case", entry("driver", "GPU.example.com"))
	add("driver-too-long", entry("driver", rep("d", 64)))
	add("driver-63", entry("driver", rep("d", 63)))
	add("driver-not-dns", entry("driver", "gpu_example"))
	add("pool-with-slashes", entry("pool", "rack-1/node-1"))
	add("pool-253", entry("pool", rep("p", 253)))
	add("pool-254", entry("pool", rep("p", 254)))
	add("pool-empty-part", entry("pool", "a//b"))
	add("pool-upper-case", entry("pool", "Node-1"))
	add("device-upper-case", entry("device", "GPU-0"))
	add("device-64", entry("device", rep("g", 64)))
	add("device-dot", entry("device", "gpu.0"))
	add("share-id-braces", entry("shareID", "{"+shareID+"}"))
	add("share-id-no-hyphens", entry("shareID", strings.ReplaceAll(shareID, "-", "")))
	add("share-id-urn", entry("shareID", "urn:uuid:"+shareID))
	add("share-id-not-hex", entry("shareID", "gaaaaaaa-aaaa-aaaa-aaaa-aaaaaaaaaaaa"))
	add("share-id-hyphens-moved", entry("shareID", "aaaaaaaaa-aaa-aaaa-aaaa-aaaaaaaaaaaa"))

	// Conditions: metav1.Condition, at most 8, unique types.
	add("conditions-8", entry("conditions", conds(8)))
	add("conditions-9", entry("conditions", conds(9)))
	add("conditions-duplicate-type", entry("conditions", L{cond("Ready"), cond("Ready", "status", "False")}))
	add("conditions-two-without-type", entry("conditions", L{cond("Ready", "type", nil), cond("Ready", "type", nil)}))
	add("conditions-two-empty-types", entry("conditions", L{cond(""), cond("")}))
	add("condition-type-prefixed", entry("conditions", L{cond("gpu.example.com/Ready")}))
	add("condition-type-missing", entry("conditions", L{cond("Ready", "type", nil)}))
	add("condition-type-empty", entry("conditions", L{cond("")}))
	add("condition-type-space", entry("conditions", L{cond("Not ready")}))
	add("condition-type-63", entry("conditions", L{cond(rep("t", 63))}))
	add("condition-type-64", entry("conditions", L{cond(rep("t", 64))}))
	add("condition-type-bad-prefix", entry("conditions", L{cond("Example.com/Ready")}))
	add("condition-type-two-slashes", entry("conditions", L{cond("a.com/b/c")}))
	add("condition-type-dash-end", entry("conditions", L{cond("ready-")}))
	add("condition-status-false", entry("conditions", L{cond("Ready", "status", "False")}))
	add("condition-status-unknown", entry("conditions", L{cond("Ready", "status", "Unknown")}))
	add("condition-status-lower", entry("conditions", L{cond("Ready", "status", "true")}))
	add("condition-status-missing", entry("conditions", L{cond("Ready", "status", nil)}))
	add("condition-status-other", entry("conditions", L{cond("Ready", "status", "Maybe")}))
	add("condition-observed-generation", entry("conditions", L{cond("Ready", "observedGeneration", 3)}))
	add("condition-observed-generation-negative", entry("conditions", L{cond("Ready", "observedGeneration", -1)}))
	add("condition-time-missing", entry("conditions", L{cond("Ready", "lastTransitionTime", nil)}))
	add("condition-time-offset", entry("conditions", L{cond("Ready", "lastTransitionTime", "2024-01-02T05:04:05+02:00")}))
	add("condition-time-fraction", entry("conditions", L{cond("Ready", "lastTransitionTime", "2024-01-02T03:04:05.25Z")}))
	add("condition-time-not-rfc3339", entry("conditions", L{cond("Ready", "lastTransitionTime", "2024-01-02 03:04:05")}))
	add("condition-time-no-zone", entry("conditions", L{cond("Ready", "lastTransitionTime", "2024-01-02T03:04:05")}))
	add("condition-time-month-13", entry("conditions", L{cond("Ready", "lastTransitionTime", "2024-13-02T03:04:05Z")}))
	for i, t := range []string{
		"2024-01-02t03:04:05Z", "2024-01-02T03:04:05z", "2024-01-02T24:00:00Z", "2024-12-31T23:59:60Z",
		"2024-02-30T03:04:05Z", "2023-02-29T03:04:05Z", "2024-02-29T03:04:05Z", "2024-01-02T03:04:05+24:00",
		"2024-01-02T03:04:05+23:59", "2024-01-02T03:04:05-00:00", "0000-01-02T03:04:05Z", "9999-12-31T23:59:59Z",
		"2024-01-02T03:04:05,5Z", "2024-01-02T03:04:05.123456789Z", "2024-01-02T03:04:05.1234567890Z",
		"2024-01-02T03:04:05.Z", "2024-01-02T3:04:05Z", "24-01-02T03:04:05Z", "2024-01-02T03:04:05+0200",
		"2024-01-02T03:04:05 Z", "",
	} {
		add(fmt.Sprintf("condition-time-%02d", i), entry("conditions", L{cond("Ready", "lastTransitionTime", t)}))
	}
	add("condition-time-zero", entry("conditions", L{cond("Ready", "lastTransitionTime", "0001-01-01T00:00:00Z")}))
	add("condition-time-zero-offset", entry("conditions", L{cond("Ready", "lastTransitionTime", "0001-01-01T01:00:00+01:00")}))
	add("condition-time-zero-fraction", entry("conditions", L{cond("Ready", "lastTransitionTime", "0001-01-01T00:00:00.000000001Z")}))
	add("condition-reason-missing", entry("conditions", L{cond("Ready", "reason", nil)}))
	add("condition-reason-empty", entry("conditions", L{cond("Ready", "reason", "")}))
	add("condition-reason-separators", entry("conditions", L{cond("Ready", "reason", "A,B:c_d")}))
	add("condition-reason-space", entry("conditions", L{cond("Ready", "reason", "Not ready")}))
	add("condition-reason-ends-comma", entry("conditions", L{cond("Ready", "reason", "Ready,")}))
	add("condition-reason-ends-underscore", entry("conditions", L{cond("Ready", "reason", "Ready_")}))
	add("condition-reason-starts-digit", entry("conditions", L{cond("Ready", "reason", "1Ready")}))
	add("condition-reason-dash", entry("conditions", L{cond("Ready", "reason", "Not-ready")}))
	add("condition-reason-1024", entry("conditions", L{cond("Ready", "reason", rep("r", 1024))}))
	add("condition-reason-1025", entry("conditions", L{cond("Ready", "reason", rep("r", 1025))}))
	add("condition-message", entry("conditions", L{cond("Ready", "message", "all good: 8 lanes")}))
	add("condition-message-missing", entry("conditions", L{cond("Ready", "message", nil)}))
	add("condition-message-32768", entry("conditions", L{cond("Ready", "message", rep("m", 32*1024))}))
	add("condition-message-32769", entry("conditions", L{cond("Ready", "message", rep("m", 32*1024+1))}))
	add("condition-message-multi-byte", entry("conditions", L{cond("Ready", "message", rep("é", 16*1024+1))}))
	add("condition-unknown-field", entry("conditions", L{cond("Ready", "severity", "High")}))
	add("condition-several-problems", entry("conditions", L{
		cond("Ready"), cond("bad type", "status", "Yes", "reason", "bad reason", "observedGeneration", -2)}))

	// Data: a JSON object of at most 10 KiB as the apiserver encodes it.
	add("data-empty-object", entry("data", M{}))
	add("data-nested", entry("data", M{"a": L{1, 2.5, true, nil, "x"}, "b": M{"c": M{}}}))
	add("data-10240", entry("data", sized(10*1024)))
	add("data-10241", entry("data", sized(10*1024+1)))
	add("data-list", entry("data", L{1, 2}))
	add("data-number", entry("data", 7))
	add("data-true", entry("data", true))
	// "<", ">" and "&" take 6 bytes each once encoded (\u003c), U+2028 and U+2029 too.
	add("data-html-escaped-10240", entry("data", padded(10*1024, M{"s": rep("<>&", 500)})))
	add("data-html-escaped-10241", entry("data", padded(10*1024+1, M{"s": rep("<>&", 500)})))
	add("data-line-separators-10240", entry("data", padded(10*1024, M{"s": rep("\u2028\u2029", 800)})))
	add("data-line-separators-10241", entry("data", padded(10*1024+1, M{"s": rep("\u2028\u2029", 800)})))
	add("data-control-characters", entry("data", M{"s": "\x00\x01\b\f\n\r\t\x1f\x7f\"\\/"}))
	add("data-control-characters-10240", entry("data", padded(10*1024, M{"s": rep("\x00\x01\b\f\n\r\t\x1f\x7f\"\\/", 300)})))
	add("data-control-characters-10241", entry("data", padded(10*1024+1, M{"s": rep("\x00\x01\b\f\n\r\t\x1f\x7f\"\\/", 300)})))
	add("data-multi-byte-10240", entry("data", padded(10*1024, M{"s": rep("é𝄞", 1000)})))
	add("data-multi-byte-10241", entry("data", padded(10*1024+1, M{"s": rep("é𝄞", 1000)})))
	// Numbers are encoded as Go encodes them: 1e-7 (not 1e-07), 1 for 1.0, 1e+21.
	add("data-small-floats-10240", entry("data", padded(10*1024, M{"f": raws("1e-7", 2000)})))
	add("data-small-floats-10241", entry("data", padded(10*1024+1, M{"f": raws("1e-7", 2000)})))
	add("data-whole-floats-10240", entry("data", padded(10*1024, M{"f": raws("1.0", 3000)})))
	add("data-whole-floats-10241", entry("data", padded(10*1024+1, M{"f": raws("1.0", 3000)})))
	add("data-big-floats-10240", entry("data", padded(10*1024, M{"f": raws("1e21", 1000), "g": raws("1e20", 100)})))
	add("data-big-floats-10241", entry("data", padded(10*1024+1, M{"f": raws("1e21", 1000), "g": raws("1e20", 100)})))
	add("data-floats", entry("data", M{"f": L{raw("1e21"), raw("1e20"), raw("123456789.125"), raw("-0.5"), raw("1e-6"),
		raw("1.5e-7"), raw("1.7976931348623157e308"), raw("5e-324"), raw("-0.0"), raw("0.1"), raw("100.0")}}))
	add("data-ints", entry("data", M{"i": L{raw("9223372036854775807"), raw("-9223372036854775808"), raw("0"), raw("-1")}}))
	add("data-int-beyond-int64", entry("data", M{"i": raw("9223372036854775808")}))
	add("data-uint64", entry("data", M{"i": raw("12345678901234567890")}))
	add("data-negative-zero-10240", entry("data", padded(10*1024, M{"z": raws("-0.0", 2000)})))
	add("data-negative-zero-10241", entry("data", padded(10*1024+1, M{"z": raws("-0.0", 2000)})))
	add("data-uint64-10240", entry("data", padded(10*1024, M{"u": raws("12345678901234567890", 400)})))
	add("data-uint64-10241", entry("data", padded(10*1024+1, M{"u": raws("12345678901234567890", 400)})))
	add("data-int-beyond-int64-10240", entry("data", padded(10*1024, M{"i": raws("100000000000000000000000", 300)})))
	add("data-int-beyond-int64-10241", entry("data", padded(10*1024+1, M{"i": raws("100000000000000000000000", 300)})))
	add("data-keys-sorted", entry("data", M{"b": 1, "a": 2, "é": 3, "Z": 4}))

	// Network data: interfaceName <= 256 bytes, hardwareAddress <= 128 bytes, at most 16
	// unique IPs, each an address with its prefix length in canonical form.
	add("network-empty", entry("networkData", M{}))
	add("network-interface-256", entry("networkData", M{"interfaceName": rep("i", 256)}))
	add("network-interface-257", entry("networkData", M{"interfaceName": rep("i", 257)}))
	add("network-interface-multi-byte-257", entry("networkData", M{"interfaceName": rep("é", 128) + "i"}))
	add("network-hardware-address-128", entry("networkData", M{"hardwareAddress": rep("h", 128)}))
	add("network-hardware-address-129", entry("networkData", M{"hardwareAddress": rep("h", 129)}))
	add("network-hardware-address-any-text", entry("networkData", M{"hardwareAddress": "not a MAC address"}))
	add("network-ips-16", entry("networkData", M{"ips": ips(16)}))
	add("network-ips-17", entry("networkData", M{"ips": ips(17)}))
	add("network-ips-17-with-a-bad-one", entry("networkData", M{"ips": append(ips(16), "bad")}))
	add("network-ips-empty-list", entry("networkData", M{"ips": L{}}))
	for i, ip := range []string{
		"10.9.8.7/24", "10.9.8.0/24", "0.0.0.0/0", "255.255.255.255/32", "10.9.8.7/33",
		"10.9.8.7", "10.9.8.7/", "10.9.8.7/024", "10.9.8.7/+24", "010.9.8.7/24", "10.9.8.256/24",
		"10.9.8/24", " 10.9.8.7/24", "10.9.8.7/24 ", "",
		"2001:db8::1/64", "2001:db8::/64", "::/0", "::1/128", "2001:db8::1/129",
		"2001:DB8::1/64", "2001:db8:0:0:0:0:0:1/64", "2001:0db8::1/64",
		"2001:db8:0:1:1:1:1:1/64", "2001:db8::1:1:1:1:1/64",
		"2001:db8::1:0:0:1/64", "2001:db8:0:0:1::1/64",
		"::ffff:10.9.8.7/120", "::ffff:10.9.8.7/24", "::10.9.8.7/128", "::a09:807/128",
		"64:ff9b::10.9.8.7/96", "64:ff9b::a09:807/96", "fe80::1%eth0/64", "fe80::1/64",
		"2001:db8::1/64/64", "1.2.3.4.5/24",
	} {
		add(fmt.Sprintf("network-ip-%02d-%s", i, ipName(ip)), entry("networkData", M{"ips": strs(ip)}))
	}
	add("network-ips-duplicate-canonical", entry("networkData", M{"ips": strs("10.9.8.7/24", "10.9.8.7/24")}))
	add("network-ips-same-address-other-prefix", entry("networkData", M{"ips": strs("10.9.8.7/24", "10.9.8.7/16")}))
	add("network-unknown-field", entry("networkData", M{"mtu": 9000}))
	add("network-interface-not-string", entry("networkData", M{"interfaceName": 1}))
	add("network-ips-not-list", entry("networkData", M{"ips": "10.9.8.7/24"}))

	// Members of the wrong type, unknown members.
	add("unknown-member", entry("health", "ok"))
	add("conditions-not-list", entry("conditions", cond("Ready")))
	add("condition-observed-generation-string", entry("conditions", L{cond("Ready", "observedGeneration", "3")}))
	add("condition-status-bool", entry("conditions", L{cond("Ready", "status", true)}))

	// Everything at once.
	add("all-members", entry("shareID", shareID,
		"conditions", L{cond("Ready"), cond("gpu.example.com/Healthy", "status", "Unknown", "observedGeneration", 2)},
		"data", M{"apiVersion": "gpu.example.com/v1", "kind": "GpuStatus", "uuid": "GPU-1234"},
		"networkData", M{"interfaceName": "eth1", "hardwareAddress": "00:11:22:33:44:55",
			"ips": strs("10.9.8.7/24", "2001:db8::7/64")}))
	add("all-members-all-bad", entry("shareID", "x",
		"conditions", append(conds(8), cond("Ready", "reason", "")),
		"data", sized(10*1024+100),
		"networkData", M{"interfaceName": rep("i", 300), "hardwareAddress": rep("h", 200),
			"ips": strs("10.9.8.7", "10.9.8.7/24", "10.9.8.7/24")}))
	return cs
}

// ipName makes a case name of an address.
func ipName(ip string) string {
	if ip == "" {
		return "empty"
	}
	r := strings.NewReplacer("/", "_", ":", "c", ".", "d", "%", "pct", " ", "sp", "+", "plus")
	return r.Replace(ip)
}
