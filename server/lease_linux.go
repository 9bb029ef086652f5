package server

import (
	"fmt"
	"os"
	"strings"
	"syscall"
)

// storeIdentity names the state store file at path as this machine's
// kernel sees it now: its boot id, and the file's device and inode. A
// restart in place has the same; a copy of the data dir, a cloned volume,
// another machine, a reboot or a store made anew has not. "" when unknown.
func storeIdentity(path string) string {
	boot, err := os.ReadFile("/proc/sys/kernel/random/boot_id")
	if err != nil {
		return ""
	}
	fi, err := os.Stat(path)
	if err != nil {
		return ""
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return ""
	}
	return fmt.Sprintf("%s/%d/%d", strings.TrimSpace(string(boot)), st.Dev, st.Ino)
}
