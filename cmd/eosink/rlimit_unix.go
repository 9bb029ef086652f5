//go:build unix

package main

import "syscall"

// defaultMaxOpenFiles is maxOpenFilesFor the process's soft RLIMIT_NOFILE
// (which Go raises to the hard limit at start).
func defaultMaxOpenFiles() int {
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		return maxOpenFilesFor(1024)
	}
	return maxOpenFilesFor(lim.Cur)
}
