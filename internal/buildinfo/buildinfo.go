// Package buildinfo owns what the binary says about its build: the module
// version, the VCS revision (and whether the tree had changes) and the Go
// version, for `eosink version` and the eosink_build_info metric alike.
//
// The revision comes from Go's build info (-buildvcs). Where Go records
// none (a git worktree, whose .git is a file; a container build without
// .git), scripts/build-static.sh passes it with
//
//	-ldflags "-X github.com/eosink/eosink/internal/buildinfo.revision=<sha> -X github.com/eosink/eosink/internal/buildinfo.modified=true"
package buildinfo

import (
	"runtime"
	"runtime/debug"
)

// Set with -ldflags -X by the build script; Go's own VCS data wins.
var (
	revision string
	modified string // "true" when the tree had uncommitted changes
)

// Info describes a build. Empty fields are unknown.
type Info struct {
	Version   string // module version; "(devel)" for a build from a work tree
	Revision  string // VCS revision
	Modified  bool   // the tree had uncommitted changes
	GoVersion string
}

// Read returns this binary's build.
func Read() Info {
	bi, ok := debug.ReadBuildInfo()
	return From(bi, ok, revision, modified == "true")
}

// From builds an Info from Go's build info (ok false when there is none)
// and the revision the build script passed, which Go's VCS data overrides.
func From(bi *debug.BuildInfo, ok bool, rev string, mod bool) Info {
	in := Info{Revision: rev, Modified: mod, GoVersion: runtime.Version()}
	if !ok || bi == nil {
		return in
	}
	in.Version = bi.Main.Version
	if bi.GoVersion != "" {
		in.GoVersion = bi.GoVersion
	}
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			in.Revision = s.Value
		case "vcs.modified":
			in.Modified = s.Value == "true"
		}
	}
	return in
}
