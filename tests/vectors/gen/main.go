// Command quantityvectors prints test vectors for resource.Quantity as JSON:
// for each input, the string Go's Quantity.String() prints after ParseQuantity
// (null when Go refuses the input) and the exact value as "<mantissa>e<exponent>"
// with trailing zeros moved into the exponent ("0" for zero).
//
//	cd tests/vectors/gen && GOFLAGS=-mod=mod go run . > ../quantities.json
package main

import (
	"encoding/json"
	"fmt"
	"math/big"
	"os"

	"k8s.io/apimachinery/pkg/api/resource"
)

type vector struct {
	Input     string  `json:"input"`
	Canonical *string `json:"canonical"`
	Value     *string `json:"value"`
}

// inputs combines number shapes with every suffix kind and sign, then adds
// strings that probe the scanner's edges.
func inputs() []string {
	numbers := []string{
		"0", "00", "1", "5", "007", "10", "100", "999", "1000", "1023", "1024", "1025",
		"1536", "2048", "4096", "12345", "1000000", "123456789012345678",
		"1234567890123456789", "9223372036854775807", "9223372036854775808",
		"99999999999999999999", "0.5", "1.5", "1.500", "1.25", "0.1", "0.001", "0.0001",
		"0.0000000001", "0.000000001", "0.0000000015", "123.456", ".5", "5.", ".", "0.0",
		"1.000000000000000000001",
	}
	suffixes := []string{
		"", "n", "u", "m", "k", "M", "G", "T", "P", "E",
		"Ki", "Mi", "Gi", "Ti", "Pi", "Ei",
		"e0", "e3", "E3", "e-3", "e+2", "e1", "e-1", "e-12", "e18", "e21", "e100",
	}
	var out []string
	for _, n := range numbers {
		for _, s := range suffixes {
			out = append(out, n+s)
		}
	}
	for _, n := range []string{"1", "1.5", "1024", "0.5", "1025", "0"} {
		for _, s := range []string{"", "m", "k", "Ki", "Mi", "Ei", "e3", "e-2"} {
			out = append(out, "-"+n+s, "+"+n+s)
		}
	}
	out = append(out,
		"", " ", " 1", "1 ", "-", "+", "--1", "+-1", "-+1", "..", "1..", "1.2.3", ".Ei", ".e-10",
		"1K", "1ki", "1KI", "1mi", "1i", "1Kib", "1e", "1E", "1e+", "1e-", "1ee3", "1EE", "1e3Ki",
		"1e1.5", "1.5e1.5", "Ki", "e3", "k", "0x10", "1,000", "1_000", "abc", "1a", "∞", "１",
		"79228162514264337593543950335", "79228162514264337593543950336", "-79228162514264337593543950336",
		"123456789012345678901234567890", "0.079228162514264337593543950336", "1e2147483647", "1e1000", "1e-1000", "1e1001", "1e-1001", "-1e1001", "1e99999999999999999999", "1e-30", "-1e-30",
		"16Ei", "8Ei", "7.99Ei", "-16Ei", "0.5Ki", "0.001Ki", "1.0001Ki", "1000E", "1000000E",
		"0.0000000001Ki", "1Pi", "1024Pi", "1048576Ti", "1.5Pi", "3Ei", "1023Ki", "1032Ki",
		"01Ki", "+1Ki", "000001", "1.0", "1.10", "100m", "1000m", "1500m", "0.5m", "1000000000n",
		"1000001n", "12e6", "12e-6", "120e-7", "1e9", "1E-9", "1e-9", "1e-10", "5e-10",
	)
	return out
}

// valueKey strips the factors of ten from the exact decimal value.
func valueKey(q resource.Quantity) string {
	d := q.AsDec()
	m := new(big.Int).Set(d.UnscaledBig())
	if m.Sign() == 0 {
		return "0"
	}
	exp := -int64(d.Scale())
	ten := big.NewInt(10)
	r := new(big.Int)
	for {
		qq, rem := new(big.Int).QuoRem(m, ten, r)
		if rem.Sign() != 0 {
			break
		}
		m = qq
		exp++
	}
	return fmt.Sprintf("%se%d", m.String(), exp)
}

func main() {
	var vectors []vector
	for _, in := range inputs() {
		v := vector{Input: in}
		if q, err := resource.ParseQuantity(in); err == nil {
			canonical := q.String()
			value := valueKey(q)
			v.Canonical, v.Value = &canonical, &value
		}
		vectors = append(vectors, v)
	}
	enc := json.NewEncoder(os.Stdout)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", " ")
	if err := enc.Encode(vectors); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}
