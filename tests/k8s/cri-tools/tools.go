//go:build tools

// Package tools names the command tests/k8s/build.sh builds, so `go mod tidy` keeps it.
package tools

import _ "sigs.k8s.io/cri-tools/cmd/crictl"
