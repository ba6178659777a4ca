//go:build tools

// Package tools pins runc's command (package main at the root of its module), which
// resourceslice.testing.runtime builds with `go build github.com/opencontainers/runc`.
package tools

import _ "github.com/opencontainers/runc"
