package batch

// DefaultLimits returns the limits the zero Limits takes: 64 MiB per body
// and 1 MiB per record.
func DefaultLimits() Limits {
	return Limits{MaxBody: DefaultMaxBody, MaxRecord: DefaultMaxRecord}
}
