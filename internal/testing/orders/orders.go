// Package orders makes the order records that the codec tests and
// benchmarks of staging and internal/format encode: test tooling only.
package orders

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/eosink/eosink/internal/streamconf"
)

// Schema is the orders schema: every Parquet type a stream may use.
var Schema = &streamconf.Schema{Fields: []streamconf.Field{
	{Name: "id", Type: streamconf.TypeInt64, Required: true},
	{Name: "region", Type: streamconf.TypeString, Required: true},
	{Name: "amount", Type: streamconf.TypeDouble},
	{Name: "paid", Type: streamconf.TypeBool},
	{Name: "ts", Type: streamconf.TypeTimestamp, Required: true},
	{Name: "meta", Type: streamconf.TypeJSON},
}}

// Records returns n distinct records matching Schema, seeded: numbers,
// quoted and non-ASCII strings, both timestamp forms, nulls, nested JSON.
func Records(t testing.TB, seed uint64, n int) [][]byte {
	t.Helper()
	rng := rand.New(rand.NewPCG(seed, 0))
	regions := []string{"eu-west", "us-east", "ap \"south\"", "é"}
	base := time.Date(2026, 11, 29, 0, 0, 0, 0, time.UTC)
	out := make([][]byte, n)
	for i := range out {
		ts := base.Add(time.Duration(rng.IntN(48*3600)) * time.Second)
		var tsJSON string
		if i%2 == 0 {
			tsJSON = fmt.Sprintf("%q", ts.In(time.FixedZone("", 3600)).Format(time.RFC3339))
		} else {
			tsJSON = fmt.Sprint(ts.UnixMilli())
		}
		var b strings.Builder
		fmt.Fprintf(&b, `{"id":%d,"region":%q,"ts":%s`, i, regions[rng.IntN(len(regions))], tsJSON)
		if i%3 != 0 {
			fmt.Fprintf(&b, `,"amount":%d.%02d`, rng.IntN(10000), rng.IntN(100))
		}
		if i%5 == 0 {
			b.WriteString(`,"paid":true`)
		} else if i%5 == 1 {
			b.WriteString(`,"paid":null`)
		}
		if i%7 == 0 {
			fmt.Fprintf(&b, `,"meta":{"k":[%d, "v"]}`, i)
		}
		b.WriteString("}")
		out[i] = []byte(b.String())
	}
	return out
}

// Batches joins recs into batches of per records, each record ending in
// '\n' (the last batch may hold fewer): the bodies a writer would send.
func Batches(recs [][]byte, per int) [][]byte {
	var out [][]byte
	for i := 0; i < len(recs); i += per {
		var batch []byte
		for _, r := range recs[i:min(i+per, len(recs))] {
			batch = append(append(batch, r...), '\n')
		}
		out = append(out, batch)
	}
	return out
}
