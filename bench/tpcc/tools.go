//go:build tools

// Keeps go-tpc's command package in the module graph so `go mod tidy` does not
// drop the requirement; the binary itself is built by bench/run.sh.
package tools

import _ "github.com/pingcap/go-tpc/cmd/go-tpc"
