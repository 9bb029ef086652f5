module github.com/eosink/eosink

go 1.26.8

require (
	github.com/spf13/afero v1.15.0
	go.etcd.io/bbolt v1.5.0
)

require (
	golang.org/x/sys v0.45.0 // indirect
	golang.org/x/text v0.28.0 // indirect
)
