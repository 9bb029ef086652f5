//go:build !amd64

package batch

func quoteBlocks(b []byte, tail *[64]byte, q []uint64) (flags uint64) {
	return quoteBlocksGo(b, tail, q)
}
