#include "textflag.h"

// QUOTES loads the sixteen bytes at off(SI) into X0 and the bit mask of
// their '"' bytes into reg.
#define QUOTES(off, reg) \
	MOVOU off(SI), X0; \
	MOVO X0, X1; \
	PCMPEQB X8, X1; \
	PMOVMSKB X1, reg

// CLASSIFY adds the bytes of X0 that are a '\' or below 0x20 to X11, and
// all of X0 to X12 (whose high bits are the bytes 0x80 or above).
#define CLASSIFY \
	MOVO X0, X2; \
	PCMPEQB X9, X2; \
	POR X2, X11; \
	MOVO X0, X3; \
	PMINUB X10, X3; \
	PCMPEQB X0, X3; \
	POR X3, X11; \
	POR X0, X12

// func quoteBlocks(b []byte, tail *[64]byte, q []uint64) (flags uint64)
//
// Sixteen bytes at a time (SSE2, in every amd64): for each 64-byte block
// of b, then tail if not nil, the bit mask of its '"' bytes into q; in
// flags, blockBad when a byte is below 0x20 or a '\', blockHigh when one
// is 0x80 or above.
TEXT ·quoteBlocks(SB), NOSPLIT, $0-64
	MOVQ b_base+0(FP), SI
	MOVQ b_len+8(FP), CX
	MOVQ tail+24(FP), R8
	MOVQ q_base+32(FP), DI
	SHRQ $6, CX
	MOVQ $0x2222222222222222, AX
	MOVQ AX, X8
	PUNPCKLQDQ X8, X8
	MOVQ $0x5c5c5c5c5c5c5c5c, AX
	MOVQ AX, X9
	PUNPCKLQDQ X9, X9
	MOVQ $0x1f1f1f1f1f1f1f1f, AX
	MOVQ AX, X10
	PUNPCKLQDQ X10, X10
	PXOR X11, X11
	PXOR X12, X12
	TESTQ CX, CX
	JZ last

loop:
	QUOTES(0, AX)
	CLASSIFY
	QUOTES(16, BX)
	SHLQ $16, BX
	ORQ BX, AX
	CLASSIFY
	QUOTES(32, BX)
	SHLQ $32, BX
	ORQ BX, AX
	CLASSIFY
	QUOTES(48, BX)
	SHLQ $48, BX
	ORQ BX, AX
	CLASSIFY

	MOVQ AX, (DI)
	ADDQ $64, SI
	ADDQ $8, DI
	DECQ CX
	JNZ loop

last:
	TESTQ R8, R8
	JZ done
	MOVQ R8, SI
	XORQ R8, R8
	MOVQ $1, CX
	JMP loop

done:
	XORQ DX, DX
	PMOVMSKB X11, AX
	TESTQ AX, AX
	JZ high
	ORQ $1, DX

high:
	PMOVMSKB X12, AX
	TESTQ AX, AX
	JZ out
	ORQ $2, DX

out:
	MOVQ DX, flags+56(FP)
	RET
