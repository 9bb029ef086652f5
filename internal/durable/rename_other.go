//go:build !linux

package durable

// renameNoReplace is link and unlink where renameat2 does not exist.
func renameNoReplace(oldname, newname string) error { return linkUnlink(oldname, newname) }
