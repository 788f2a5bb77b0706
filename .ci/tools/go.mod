module github.com/gormoutbox/outbox/ci/tools

go 1.26.0

tool golang.org/x/exp/cmd/apidiff

require (
	golang.org/x/exp v0.0.0-20261120182113-8801fbdfac81 // indirect
	golang.org/x/mod v0.43.0 // indirect
	golang.org/x/sync v0.25.0 // indirect
	golang.org/x/tools v0.53.0 // indirect
)
