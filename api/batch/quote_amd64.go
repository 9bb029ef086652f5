package batch

// quoteBlocks is quoteBlocksGo in assembly (quote_amd64.s): the same
// contract, sixteen bytes an instruction.
//
//go:noescape
func quoteBlocks(b []byte, tail *[64]byte, q []uint64) (flags uint64)
