package duckdbcheck

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
	"time"
)

// OrdersConfig is DESIGN.md's example configuration of PUT
// /v1/streams/orders: Parquet, partitioned by event date and region.
const OrdersConfig = `{"format": "parquet",
 "partition": "dt={time:ts:%Y-%m-%d}/region={field:region}",
 "schema": {"fields": [
   {"name": "id", "type": "int64", "required": true},
   {"name": "region", "type": "string", "required": true},
   {"name": "amount", "type": "double"},
   {"name": "ts", "type": "timestamp", "required": true}]}}`

// Order is a record of OrdersConfig's stream.
type Order struct {
	ID     int64
	Region string
	Amount float64 // NaN when absent
	TS     time.Time
}

// JSON is the order as one NDJSON record: ts as RFC 3339 in a -05:00
// offset, or as epoch milliseconds (the same instant either way).
func (o Order) JSON(epochMillis bool) []byte {
	ts := fmt.Sprintf("%q", o.TS.In(time.FixedZone("", -5*3600)).Format(time.RFC3339Nano))
	if epochMillis {
		ts = fmt.Sprint(o.TS.UnixMilli())
	}
	s := fmt.Sprintf(`{"id":%d,"region":%q,"ts":%s`, o.ID, o.Region, ts)
	if !math.IsNaN(o.Amount) {
		s += fmt.Sprintf(`,"amount":%g`, o.Amount)
	}
	return []byte(s + "}")
}

// MakeOrders returns n orders, ids 1 to n, seeded (the seed is logged):
// three regions (one with a space, percent-encoded in paths), times over
// three days, every fourth amount absent.
func MakeOrders(t testing.TB, seed uint64, n int) []Order {
	t.Helper()
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, 0))
	regions := []string{"eu-west", "us-east", "ap south"}
	base := time.Date(2026, 11, 28, 20, 0, 0, 0, time.UTC)
	out := make([]Order, n)
	for i := range out {
		o := Order{
			ID:     int64(i + 1),
			Region: regions[rng.IntN(len(regions))],
			Amount: math.NaN(),
			TS:     base.Add(time.Duration(rng.IntN(3*24*3600*1000)) * time.Millisecond),
		}
		if i%4 != 0 {
			o.Amount = float64(rng.IntN(100000)) / 100
		}
		out[i] = o
	}
	return out
}
