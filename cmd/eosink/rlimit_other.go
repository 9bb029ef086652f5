//go:build !unix

package main

// defaultMaxOpenFiles assumes a limit of 1024 descriptors.
func defaultMaxOpenFiles() int { return maxOpenFilesFor(1024) }
